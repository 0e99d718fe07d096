package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// The management API: a subset of Kafka Connect's REST API (paths, bodies,
// status codes and the {"error_code", "message"} error body as Kafka
// Connect's ConnectorsResource, RootResource and ConnectorPluginsResource
// answer them), so that Connect clients and UIs can list, inspect, pause,
// resume, stop and restart connectors and read and change their offsets.
// docs/rest-api.md lists the endpoints and what differs from Connect.
//
// Every connector has one task, 0. States map as follows:
//
//	running                  RUNNING
//	paused                   PAUSED   (PUT .../pause)
//	stopped by PUT .../stop  STOPPED  (kept in the checkpoint store)
//	halted                   FAILED   (trace: the error)
//	starting, stopping       RESTARTING
//	standby, stopped         UNASSIGNED (another replica holds it, or
//	                                     placement runs it elsewhere)

// restAPI serves the Connect endpoints over the supervisor.
type restAPI struct {
	sup  *supervisor
	auth HTTPConfig // http.auth.token, http.read_only, http.tls.client_auth

	mu      sync.Mutex
	holders map[string]holderSeen // connector → its holder, read from the checkpoint table
}

// holderSeen is a holder read at a time.
type holderSeen struct {
	worker string
	at     time.Time
}

// holderTTL is how long a holder read from the checkpoint table is reused.
const holderTTL = 2 * time.Second

// holder returns the worker id of the replica holding the connector's HA
// lock as kept in the checkpoint table (sharedHold), "" when not known.
func (a *restAPI) holder(name string) string {
	cfg, ok := a.sup.config(name)
	if !ok || !sharedHold(cfg) {
		return ""
	}
	a.mu.Lock()
	h, ok := a.holders[name]
	a.mu.Unlock()
	if ok && time.Since(h.at) < holderTTL {
		return h.worker
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	w, err := readHolder(ctx, cfg, a.sup.log)
	if err != nil {
		w = ""
	}
	a.mu.Lock()
	if a.holders == nil {
		a.holders = map[string]holderSeen{}
	}
	a.holders[name] = holderSeen{worker: w, at: time.Now()}
	a.mu.Unlock()
	return w
}

// allowed answers 403 or 401 for a change the listener does not take
// (http.read_only) or that lacks the bearer token (http.auth.token), and
// reports whether to go on. Reads are always allowed.
func (a *restAPI) allowed(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	if a.auth.ReadOnly {
		writeRestError(w, http.StatusForbidden, "this listener is read-only (http.read_only: true): changes are refused")
		return false
	}
	if a.auth.TLS.mode() == clientAuthChanges && !clientCertified(r) {
		writeRestError(w, http.StatusUnauthorized, "this request changes a connector and needs a client certificate signed by a CA in http.tls.client_ca_file")
		return false
	}
	if a.auth.Auth.Token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(a.auth.Auth.Token)) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="outbox-cdc"`)
		writeRestError(w, http.StatusUnauthorized, "this request changes a connector and needs Authorization: Bearer <http.auth.token>")
		return false
	}
	return true
}

// restError is Connect's error body (ErrorMessage).
type restError struct {
	ErrorCode int    `json:"error_code"`
	Message   string `json:"message"`
}

func writeRestError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, restError{ErrorCode: code, Message: fmt.Sprintf(format, args...)})
}

// Connect's ConnectorStateInfo.
type restState struct {
	State    string `json:"state"`
	WorkerID string `json:"worker_id"`
	Trace    string `json:"trace,omitempty"`
}

type restTaskState struct {
	ID int `json:"id"`
	restState
}

type restStatus struct {
	Name      string          `json:"name"`
	Connector restState       `json:"connector"`
	Tasks     []restTaskState `json:"tasks"`
	Type      string          `json:"type"`
}

type restTaskID struct {
	Connector string `json:"connector"`
	Task      int    `json:"task"`
}

// Connect's ConnectorInfo.
type restInfo struct {
	Name   string            `json:"name"`
	Config map[string]string `json:"config"`
	Tasks  []restTaskID      `json:"tasks"`
	Type   string            `json:"type"`
}

// connectorClass is what connector.class and GET /connector-plugins name
// for a source type.
func connectorClass(sourceType string) string { return "outbox-cdc." + sourceType }

func (a *restAPI) routes(mux *http.ServeMux) {
	mux.HandleFunc("/{$}", a.root)
	mux.HandleFunc("/connectors", a.list)
	mux.HandleFunc("/connectors/", a.connector)
	mux.HandleFunc("/connector-plugins", a.plugins)
	mux.HandleFunc("/connector-plugins/", a.plugins)
}

func (a *restAPI) root(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, r)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"version": buildVersion(), "commit": buildCommit(), "kafka_cluster_id": "outbox-cdc"})
}

func (a *restAPI) plugins(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != "/connector-plugins" {
		if r.URL.Path != "/connector-plugins" {
			writeRestError(w, http.StatusNotFound, "HTTP 404 Not Found (outbox-cdc serves GET /connector-plugins only; connector configuration is in the file)")
			return
		}
		methodNotAllowed(w, r)
		return
	}
	names := make([]string, 0, len(sourceKinds))
	for k := range sourceKinds {
		names = append(names, k)
	}
	sort.Strings(names)
	out := []map[string]string{}
	for _, k := range names {
		out = append(out, map[string]string{"class": connectorClass(k), "type": "source", "version": buildVersion()})
	}
	writeJSON(w, http.StatusOK, out)
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	writeRestError(w, http.StatusMethodNotAllowed, "HTTP 405 Method Not Allowed (%s %s)", r.Method, r.URL.Path)
}

// fileOwned answers the writes that make no sense for a file-configured
// connector.
func fileOwned(w http.ResponseWriter, what string) {
	writeRestError(w, http.StatusMethodNotAllowed, "%s: connectors are configured in outbox-cdc's configuration file, not through the REST API; change the file (a connectors: list holds several) and reload it with SIGHUP or restart the process", what)
}

func (a *restAPI) list(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		fileOwned(w, "POST /connectors")
		return
	default:
		methodNotAllowed(w, r)
		return
	}
	names := a.sup.sortedNames()
	expand := r.URL.Query()["expand"]
	if len(expand) == 0 {
		writeJSON(w, http.StatusOK, names)
		return
	}
	out := map[string]map[string]any{}
	for _, name := range names {
		e := map[string]any{}
		for _, x := range expand {
			switch x {
			case "status":
				e["status"] = a.status(name)
			case "info":
				e["info"] = a.info(name)
			}
		}
		out[name] = e
	}
	writeJSON(w, http.StatusOK, out)
}

// status is the connector's Connect status (it exists).
func (a *restAPI) status(name string) restStatus {
	var st connectorStatus
	for _, c := range a.sup.status() {
		if c.Name == name {
			st = c
		}
	}
	held := a.sup.isHeld(name)
	rs := restState{WorkerID: a.sup.workerID}
	switch {
	case held:
		rs.State = "STOPPED"
	case st.State == stateRunning:
		rs.State = "RUNNING"
	case st.State == statePaused:
		rs.State = "PAUSED"
	case st.State == stateHalted:
		rs.State, rs.Trace = "FAILED", st.Reason
	case st.State == stateStarting || st.State == stateStopping:
		rs.State = "RESTARTING"
	case st.State == stateConnecting:
		// Not RUNNING: the source never connected. The trace says why.
		rs.State, rs.Trace = "RESTARTING", st.Reason
	default: // standby, or stopped (placement runs it elsewhere, or the process stops)
		rs.State = "UNASSIGNED"
		// Name the replica that runs it, as Connect's REST does on any worker.
		if h := a.holder(name); h != "" {
			rs.WorkerID = h
		}
	}
	out := restStatus{Name: name, Connector: rs, Type: "source", Tasks: []restTaskState{}}
	if rs.State != "STOPPED" { // a stopped connector has no tasks, as in Connect
		out.Tasks = append(out.Tasks, restTaskState{ID: 0, restState: rs})
	}
	return out
}

func (a *restAPI) info(name string) restInfo {
	cfg, _ := a.sup.config(name)
	tasks := []restTaskID{}
	if !a.sup.isHeld(name) {
		tasks = append(tasks, restTaskID{Connector: name, Task: 0})
	}
	return restInfo{Name: name, Config: flatConfig(cfg), Tasks: tasks, Type: "source"}
}

// flatConfig is the connector's effective configuration (as `outbox-cdc
// config print` shows it, secrets redacted) as Connect's string map:
// dotted keys, lists joined with commas.
func flatConfig(cfg Config) map[string]string {
	out := map[string]string{"name": cfg.Name, "connector.class": connectorClass(cfg.Source.Type), "tasks.max": "1"}
	var buf bytes.Buffer
	if err := printConfig(&buf, cfg); err != nil {
		return out
	}
	var root yaml.Node
	if err := yaml.Unmarshal(buf.Bytes(), &root); err != nil || len(root.Content) == 0 {
		return out
	}
	var walk func(prefix string, n *yaml.Node)
	walk = func(prefix string, n *yaml.Node) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if prefix != "" {
					k = prefix + "." + k
				}
				walk(k, n.Content[i+1])
			}
		case yaml.SequenceNode:
			var parts []string
			for _, c := range n.Content {
				if c.Kind != yaml.ScalarNode {
					b, _ := yaml.Marshal(c)
					parts = append(parts, strings.TrimSpace(string(b)))
					continue
				}
				parts = append(parts, c.Value)
			}
			out[prefix] = strings.Join(parts, ",")
		case yaml.ScalarNode:
			if prefix != "name" {
				out[prefix] = n.Value
			}
		}
	}
	walk("", root.Content[0])
	return out
}

// connector serves /connectors/{name}[/...].
func (a *restAPI) connector(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/connectors/")
	name, sub, _ := strings.Cut(rest, "/")
	if name == "" {
		writeRestError(w, http.StatusNotFound, "HTTP 404 Not Found")
		return
	}
	if !a.allowed(w, r) {
		return
	}
	cfg, ok := a.sup.config(name)
	if !ok {
		if r.Method == http.MethodPut && sub == "config" {
			fileOwned(w, "PUT /connectors/"+name+"/config")
			return
		}
		writeRestError(w, http.StatusNotFound, "Connector %s not found", name)
		return
	}
	route := r.Method + " " + sub
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	switch route {
	case "GET ":
		writeJSON(w, http.StatusOK, a.info(name))
	case "DELETE ":
		fileOwned(w, "DELETE /connectors/"+name)
	case "GET config":
		writeJSON(w, http.StatusOK, flatConfig(cfg))
	case "PUT config", "PATCH config":
		fileOwned(w, r.Method+" /connectors/"+name+"/config")
	case "GET status":
		writeJSON(w, http.StatusOK, a.status(name))
	case "GET tasks":
		tasks := []map[string]any{}
		if !a.sup.isHeld(name) {
			tasks = append(tasks, map[string]any{"id": restTaskID{Connector: name, Task: 0}, "config": flatConfig(cfg)})
		}
		writeJSON(w, http.StatusOK, tasks)
	case "GET tasks/0/status":
		st := a.status(name)
		if len(st.Tasks) == 0 {
			writeRestError(w, http.StatusNotFound, "No status found for task %s-0", name)
			return
		}
		writeJSON(w, http.StatusOK, st.Tasks[0])
	case "POST tasks/0/restart":
		if a.sup.isHeld(name) {
			writeRestError(w, http.StatusNotFound, "Task %s-0 not found (the connector is stopped)", name)
			return
		}
		if err := a.sup.Restart(name); err != nil {
			writeRestError(w, http.StatusConflict, "%v", err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case "POST restart":
		a.restart(w, r, name)
	case "PUT pause":
		if err := a.sup.Pause(ctx, name); err != nil {
			writeRestError(w, http.StatusInternalServerError, "%v", err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	case "PUT resume":
		if err := a.sup.Resume(ctx, name); err != nil {
			writeRestError(w, http.StatusInternalServerError, "%v", err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	case "PUT stop":
		if err := a.sup.Hold(ctx, name); err != nil {
			writeRestError(w, http.StatusInternalServerError, "%v", err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case "GET offsets":
		offs, err := readOffsets(ctx, cfg, a.sup.log)
		if err != nil {
			writeRestError(w, http.StatusInternalServerError, "%v", err)
			return
		}
		writeJSON(w, http.StatusOK, offs)
	case "PATCH offsets", "DELETE offsets":
		a.changeOffsets(ctx, w, r, cfg)
	default:
		if strings.HasPrefix(sub, "tasks/") && sub != "tasks/0/status" && sub != "tasks/0/restart" {
			writeRestError(w, http.StatusNotFound, "Task not found: %s has one task, 0", name)
			return
		}
		switch sub {
		case "", "config", "status", "tasks", "tasks/0/status", "tasks/0/restart", "restart", "pause", "resume", "stop", "offsets":
			methodNotAllowed(w, r)
		default:
			writeRestError(w, http.StatusNotFound, "HTTP 404 Not Found (%s)", r.URL.Path)
		}
	}
}

// restart implements POST /connectors/NAME/restart[?includeTasks&onlyFailed]:
// without either it restarts the connector and answers 204 (Connect's
// backward-compatible form); with either, 202 and the status. onlyFailed
// restarts only a failed connector. The connector and its one task are
// the same run here, so includeTasks changes only the answer's form.
func (a *restAPI) restart(w http.ResponseWriter, r *http.Request, name string) {
	q := r.URL.Query()
	flag := func(k string) (bool, error) {
		v := q.Get(k)
		if v == "" {
			return false, nil
		}
		return strconv.ParseBool(v)
	}
	includeTasks, err1 := flag("includeTasks")
	onlyFailed, err2 := flag("onlyFailed")
	if err := errors.Join(err1, err2); err != nil {
		writeRestError(w, http.StatusBadRequest, "includeTasks and onlyFailed take true or false: %v", err)
		return
	}
	if a.sup.isHeld(name) {
		writeRestError(w, http.StatusConflict, "connector %s is stopped (PUT /connectors/%s/stop); PUT /connectors/%s/resume starts it", name, name, name)
		return
	}
	failed := a.status(name).Connector.State == "FAILED"
	if !onlyFailed || failed {
		if err := a.sup.Restart(name); err != nil {
			writeRestError(w, http.StatusConflict, "%v", err)
			return
		}
	}
	if !includeTasks && !onlyFailed {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusAccepted, a.status(name))
}

// changeOffsets serves PATCH and DELETE .../offsets: only while the
// connector is stopped through the API, as Connect requires.
func (a *restAPI) changeOffsets(ctx context.Context, w http.ResponseWriter, r *http.Request, cfg Config) {
	name := cfg.Name
	if !a.sup.isHeld(name) {
		writeRestError(w, http.StatusBadRequest, "Connectors must be in the STOPPED state before their offsets can be modified. This can be done for the specified connector by issuing a 'PUT' request to the '/connectors/%s/stop' endpoint", name)
		return
	}
	var err error
	reset := r.Method == http.MethodDelete
	if reset {
		err = resetOffsets(ctx, cfg, a.sup.log)
	} else {
		body, rerr := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if rerr != nil {
			writeRestError(w, http.StatusBadRequest, "reading the body: %v", rerr)
			return
		}
		reset, err = alterOffsets(ctx, cfg, body, a.sup.log)
	}
	var oe *offsetError
	switch {
	case errors.As(err, &oe):
		writeRestError(w, oe.code, "%s", oe.msg)
		return
	case err != nil:
		writeRestError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	kind := "altered"
	if reset {
		kind = "reset"
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "The offsets for this connector have been " + kind + " successfully"})
}

// buildCommit is the VCS revision the binary was built from, if known.
func buildCommit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, st := range bi.Settings {
			if st.Key == "vcs.revision" {
				return st.Value
			}
		}
	}
	return ""
}
