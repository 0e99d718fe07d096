package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// The process's one HTTP server:
//
//	GET  /metrics                    every connector's metrics, each with a connector label, and the process's
//	GET  /healthz                    200 while the process serves; JSON: every connector's state
//	GET  /readyz[?connector=NAME]    200 when every connector (or NAME) is ready, else 503; JSON body
//	GET  /active[?connector=NAME]    200 when this replica streams at least one connector (or NAME), else 503
//	/, /connectors/..., /connector-plugins   Kafka Connect's REST API (restapi.go, docs/rest-api.md)
//
// Ready means nothing here needs attention before traffic moves on: a
// running connector whose source stream and sink are connected, and a
// standby or stopped one, which has nothing to do on this replica (a
// replica holding no connector is ready, so that a rolling update does not
// stall on it). A starting, stopping or halted connector is not ready.
// Whether a replica streams is /active, and "active" in the JSON.

// healthAnswer is the JSON body of /healthz, /readyz and /active.
type healthAnswer struct {
	Status     string            `json:"status"` // ok | ready | not ready | active | not active
	Ready      bool              `json:"ready"`
	Active     int               `json:"active"` // connectors this replica streams
	Connectors []connectorStatus `json:"connectors"`
}

func serveHTTP(hc HTTPConfig, g prometheus.Gatherer, sup *supervisor, log zerolog.Logger) (*http.Server, error) {
	var tc *tls.Config
	if hc.TLS.enabled() {
		var err error
		if tc, err = hc.TLS.serverConfig(); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", hc.Listen)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	sup.workerID = workerID(ln.Addr().String())
	srv := &http.Server{Addr: ln.Addr().String(), Handler: httpHandler(g, sup, hc), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("http server stopped")
		}
	}()
	return srv, nil
}

func httpHandler(g prometheus.Gatherer, sup *supervisor, hc HTTPConfig) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	// selected returns the connectors the query names (all without
	// ?connector=), or false after answering 404.
	selected := func(w http.ResponseWriter, r *http.Request) (healthAnswer, bool) {
		all := sup.status()
		a := healthAnswer{Ready: true, Connectors: all}
		if name := r.URL.Query().Get("connector"); name != "" {
			a.Connectors = nil
			for _, c := range all {
				if c.Name == name {
					a.Connectors = append(a.Connectors, c)
				}
			}
			if a.Connectors == nil {
				http.Error(w, "no connector "+name+" (the process runs "+strings.Join(sup.sortedNames(), ", ")+")", http.StatusNotFound)
				return a, false
			}
		}
		for _, c := range a.Connectors {
			a.Ready = a.Ready && c.Ready
			if c.Active {
				a.Active++
			}
		}
		return a, true
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if a, ok := selected(w, r); ok {
			a.Status = "ok"
			writeJSON(w, http.StatusOK, a)
		}
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		a, ok := selected(w, r)
		if !ok {
			return
		}
		code := http.StatusOK
		a.Status = "ready"
		if !a.Ready {
			a.Status, code = "not ready", http.StatusServiceUnavailable
		}
		writeJSON(w, code, a)
	})
	mux.HandleFunc("/active", func(w http.ResponseWriter, r *http.Request) {
		a, ok := selected(w, r)
		if !ok {
			return
		}
		code := http.StatusOK
		a.Status = "active"
		if a.Active == 0 {
			a.Status, code = "not active", http.StatusServiceUnavailable
		}
		writeJSON(w, code, a)
	})
	(&restAPI{sup: sup, auth: hc}).routes(mux) // restapi.go: Kafka Connect's REST API
	return mux
}

// workerID names this replica as Connect's worker_id does (host:port):
// the listen address, with the host name for an unspecified host.
func workerID(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
