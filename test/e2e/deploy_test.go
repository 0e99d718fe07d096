package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// The deployment artifacts in deploy/ cannot run here (no Docker engine, no
// Kubernetes), so these tests check them against the real connector: every
// metric the dashboard and the alert rules name is one the binary exports,
// the quickstart's connector configurations run against the local
// databases, and the compose file and the manifests have the structure the
// quickstart and the README rely on.

const deployDir = "../../deploy"

var metricRef = regexp.MustCompile(`outbox_cdc_[a-z0-9_]+`)

// referencedMetrics returns every outbox_cdc_* name in the dashboard and the
// alert rules (expressions, legends and descriptions alike), after checking
// that both files parse.
func referencedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	refs := map[string][]string{}
	dash := readDeploy(t, "grafana/outbox-cdc.json")
	var d struct {
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dash, &d); err != nil {
		t.Fatalf("grafana/outbox-cdc.json: %v", err)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Query == "prometheus" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Errorf("grafana/outbox-cdc.json: no Prometheus datasource variable")
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("grafana/outbox-cdc.json: panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if !metricRef.MatchString(tg.Expr) {
				t.Errorf("grafana/outbox-cdc.json: panel %q queries no outbox_cdc_ metric: %s", p.Title, tg.Expr)
			}
		}
	}
	for _, m := range metricRef.FindAllString(string(dash), -1) {
		refs[m] = appendOnce(refs[m], "dashboard")
	}

	rules := readDeploy(t, "prometheus/alerts.yaml")
	var r struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(rules, &r); err != nil {
		t.Fatalf("prometheus/alerts.yaml: %v", err)
	}
	alerts := map[string]bool{}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" || rule.Expr == "" || rule.Labels["severity"] == "" || rule.Annotations["summary"] == "" {
				t.Errorf("prometheus/alerts.yaml: rule %q needs alert, expr, labels.severity and annotations.summary", rule.Alert)
			}
			if rule.For != "" {
				if _, err := time.ParseDuration(rule.For); err != nil {
					t.Errorf("prometheus/alerts.yaml: rule %q: for: %v", rule.Alert, err)
				}
			}
			alerts[rule.Alert] = true
		}
	}
	// The alerts the issue asks for.
	for _, a := range []string{"OutboxCdcLagHigh", "OutboxCdcCheckpointStale", "OutboxCdcSinkDown", "OutboxCdcSourceDown",
		"OutboxCdcPostgresSlotLagHigh", "OutboxCdcPostgresWalAtRisk", "OutboxCdcDeadLetters", "OutboxCdcBadRows", "OutboxCdcReconnectStorm"} {
		if !alerts[a] {
			t.Errorf("prometheus/alerts.yaml: no alert %s", a)
		}
	}
	for _, m := range metricRef.FindAllString(string(rules), -1) {
		refs[m] = appendOnce(refs[m], "alerts")
	}
	return refs
}

func appendOnce(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

func readDeploy(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// scrape reads /metrics once and returns every sample name and every
// family named in a # TYPE line. Histograms give name_bucket, name_sum and
// name_count as samples, so PromQL names match directly.
func scrape(t *testing.T, addr string) (map[string]bool, map[string]float64) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	sums := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			names[strings.Fields(rest)[0]] = true
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		names[name] = true
		var v float64
		fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
		sums[name] += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names, sums
}

// composeConfig is the quickstart configuration for a source type.
func composeConfig(kind string) string {
	return filepath.Join(deployDir, "compose", kind+".yaml")
}

// sourceKeys returns the keys of a configuration's source: section.
func sourceKeys(t *testing.T, doc []byte, wrapped bool) map[string]string {
	t.Helper()
	var src map[string]any
	if wrapped {
		var c struct {
			Source map[string]any `yaml:"source"`
		}
		if err := yaml.Unmarshal(doc, &c); err != nil {
			t.Fatal(err)
		}
		src = c.Source
	} else if err := yaml.Unmarshal(doc, &src); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range src {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// TestDeployMetricsExist runs the connector once per source with the
// quickstart's own configuration file (deploy/compose/<source>.yaml; only
// addresses and names overridden through OUTBOX_CDC_* as an operator would),
// makes it deliver a record and skip an UPDATE/DELETE, scrapes /metrics,
// and requires every outbox_cdc_* name in the Grafana dashboard and the
// Prometheus rules to be among the names the two runs exported.
//
// A metric vector appears in /metrics only once a label value was set. The
// connector pre-sets sink_errors_total{kind} and dlq_records_total{class};
// postgres_slot_wal_status{status} appears at the first slot lag poll
// (lag_interval shortened here); source_skipped_operations_total{op} only
// after a skipped change, which is why the test makes one.
func TestDeployMetricsExist(t *testing.T) {
	refs := referencedMetrics(t)
	exported := map[string]bool{}
	ran := 0
	forEachBackend(t, func(t *testing.T, b *backend) {
		// The quickstart file has the same source keys as the tests' own
		// configuration: run it with the test's values.
		testSrc := sourceKeys(t, []byte(b.sourceYAML("x")), false)
		raw, err := os.ReadFile(composeConfig(b.kind))
		if err != nil {
			t.Fatal(err)
		}
		deploySrc := sourceKeys(t, raw, true)
		if keysOf(testSrc) != keysOf(deploySrc) {
			t.Fatalf("deploy/compose/%s.yaml source keys %s differ from the tests' %s", b.kind, keysOf(deploySrc), keysOf(testSrc))
		}
		_, brokers := testenv.Kafka(t)
		env := []string{
			"OUTBOX_CDC_NAME=deploy-metrics-" + b.kind,
			"OUTBOX_CDC_SINK_BROKERS=" + strings.Join(brokers, ","),
			"OUTBOX_CDC_CHECKPOINT_PATH=" + filepath.Join(t.TempDir(), "checkpoint"),
		}
		for k, v := range testSrc {
			if k != "type" {
				env = append(env, "OUTBOX_CDC_SOURCE_"+strings.ToUpper(k)+"="+v)
			}
		}
		if b.kind == "postgres" {
			env = append(env, "OUTBOX_CDC_SOURCE_LAG_INTERVAL=200ms")
		}
		c := testenv.Start(t, composeConfig(b.kind), env...)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		b.insertTx(t, []row{{"d-1", "ORDER", "A-1", "ORDER_CREATED", `{"n": 1}`}}, true)
		for _, q := range []string{"UPDATE " + b.table() + " SET status = 1", "DELETE FROM " + b.table()} {
			if _, err := b.db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		b.insertTx(t, []row{{"d-2", "ORDER", "A-1", "ORDER_PAID", `{"n": 2}`}}, true)
		checkDelivery(t, cons.waitFor(t, 2, 20*time.Second), []string{"d-1", "d-2"}, 3, false)

		want := map[string]func(map[string]bool, map[string]float64) bool{
			"two records delivered": func(_ map[string]bool, s map[string]float64) bool {
				return s["outbox_cdc_records_delivered_total"] >= 2
			},
		}
		if b.kind == "mysql" {
			want["skipped operations counted"] = func(n map[string]bool, _ map[string]float64) bool {
				return n["outbox_cdc_source_skipped_operations_total"]
			}
		} else {
			want["slot wal_status polled"] = func(n map[string]bool, _ map[string]float64) bool {
				return n["outbox_cdc_postgres_slot_wal_status"]
			}
		}
		var names map[string]bool
		last := ""
		testenv.Eventually(t, 20*time.Second, "every metric the deploy files name", func() bool {
			var sums map[string]float64
			names, sums = scrape(t, c.Addr())
			var missing []string
			for what, ok := range want {
				if !ok(names, sums) {
					missing = append(missing, what)
				}
			}
			sort.Strings(missing)
			if m := fmt.Sprint(missing); len(missing) > 0 && m != last {
				t.Logf("not yet: %s", m)
				last = m
			}
			return len(missing) == 0
		})
		// Each source exports the figures of how far behind it reads that
		// it has, and none of the other's (a Postgres connector exported
		// binlog_files_behind as 0 before).
		own, other := []string{"outbox_cdc_mysql_binlog_files_behind", "outbox_cdc_mysql_binlog_bytes_behind"}, "outbox_cdc_postgres_"
		if b.kind == "postgres" {
			own, other = []string{"outbox_cdc_postgres_slot_lag_bytes"}, "outbox_cdc_mysql_"
		}
		for _, n := range own {
			if !names[n] {
				t.Errorf("%s connector does not export %s", b.kind, n)
			}
		}
		for n := range names {
			if strings.HasPrefix(n, other) {
				t.Errorf("%s connector exports %s, a figure it does not have", b.kind, n)
			}
		}
		for n := range names {
			exported[n] = true
		}
		if err := c.Stop(10 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
		ran++
	})
	if ran != len(backends) {
		// A skipped source exports nothing; comparing would blame the files.
		t.Skipf("only %d of %d sources ran; not comparing metric names", ran, len(backends))
	}

	var unknown []string
	for m, where := range refs {
		if !exported[m] {
			unknown = append(unknown, fmt.Sprintf("%s (%s)", m, strings.Join(where, ", ")))
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		t.Errorf("metrics referenced in deploy/ that the connector does not export:\n  %s", strings.Join(unknown, "\n  "))
	}
	// The other direction is informational: an exported family nobody
	// charts is worth a look, not a failure.
	var unused []string
	for n := range exported {
		if !strings.HasPrefix(n, "outbox_cdc_") || strings.HasSuffix(n, "_bucket") || strings.HasSuffix(n, "_sum") || strings.HasSuffix(n, "_count") {
			continue
		}
		if len(refs[n]) == 0 && len(refs[n+"_bucket"]) == 0 {
			unused = append(unused, n)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Logf("exported but not in the dashboard or alerts: %v", unused)
	}
	if len(unknown) == 0 {
		t.Logf("%d outbox_cdc_* names referenced in deploy/, all exported by the mysql and postgres runs", len(refs))
	}
}

func keysOf(m map[string]string) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

// configPrint loads a configuration with the real loader (outbox-cdc config
// print) and returns its output; extra is added to an environment without
// any OUTBOX_CDC_ variable.
func configPrint(t *testing.T, path string, extra ...string) (string, error) {
	cmd := testenv.Command(t, "config", "print", "--config", path)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOX_CDC_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, extra...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestDeployCompose checks the quickstart's structure: the services, pinned
// images, the database settings CDC needs, health checks and start order,
// and that every mounted file exists and every connector configuration
// loads.
func TestDeployCompose(t *testing.T) {
	var c struct {
		Services map[string]struct {
			Image string `yaml:"image"`
			Build *struct {
				Context    string `yaml:"context"`
				Dockerfile string `yaml:"dockerfile"`
			} `yaml:"build"`
			Command     any            `yaml:"command"`
			Environment map[string]any `yaml:"environment"`
			Volumes     []string       `yaml:"volumes"`
			Healthcheck *struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
			DependsOn map[string]struct {
				Condition string `yaml:"condition"`
			} `yaml:"depends_on"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(readDeploy(t, "docker-compose.yaml"), &c); err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	for _, name := range []string{"mysql", "postgres", "kafka", "outbox-cdc-mysql", "outbox-cdc-postgres", "consumer"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("docker-compose.yaml: no service %s", name)
		}
	}
	command := func(name string) string {
		switch v := c.Services[name].Command.(type) {
		case string:
			return v
		case []any:
			return fmt.Sprint(v...)
		}
		return fmt.Sprint(c.Services[name].Command)
	}
	for _, flag := range []string{"--log-bin", "--binlog-format=ROW", "--binlog-row-image=FULL", "--binlog-row-metadata=FULL", "--server-id"} {
		if !strings.Contains(command("mysql"), flag) {
			t.Errorf("mysql command lacks %s", flag)
		}
	}
	if !strings.Contains(command("postgres"), "wal_level=logical") {
		t.Errorf("postgres command lacks wal_level=logical")
	}
	if !strings.HasPrefix(c.Services["kafka"].Image, "apache/kafka:") || c.Services["kafka"].Environment["KAFKA_PROCESS_ROLES"] != "broker,controller" {
		t.Errorf("kafka is not apache/kafka in KRaft mode (broker,controller)")
	}
	pinned := regexp.MustCompile(`^[a-z0-9./-]+(:[0-9][A-Za-z0-9._-]*|@sha256:[0-9a-f]{64})$`)
	for name, s := range c.Services {
		if s.Build != nil {
			if _, err := os.Stat(filepath.Join(deployDir, s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("%s: build: %v", name, err)
			}
			continue
		}
		if !pinned.MatchString(s.Image) {
			t.Errorf("%s: image %q is not pinned to a version or digest", name, s.Image)
		}
	}
	for _, name := range []string{"mysql", "postgres", "kafka"} {
		if hc := c.Services[name].Healthcheck; hc == nil || len(hc.Test) == 0 {
			t.Errorf("%s: no healthcheck", name)
		}
	}
	for name, deps := range map[string][]string{
		"outbox-cdc-mysql":    {"mysql", "kafka"},
		"outbox-cdc-postgres": {"postgres", "kafka"},
		"consumer":            {"kafka"},
	} {
		for _, d := range deps {
			if c.Services[name].DependsOn[d].Condition != "service_healthy" {
				t.Errorf("%s: does not wait for %s to be healthy", name, d)
			}
		}
	}
	// Mounted files exist; connector configurations load with the real loader.
	configs := 0
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if !strings.HasPrefix(parts[0], ".") {
				if _, ok := c.Volumes[parts[0]]; !ok {
					t.Errorf("%s: volume %q is not declared", name, parts[0])
				}
				continue
			}
			host := filepath.Join(deployDir, parts[0])
			if _, err := os.Stat(host); err != nil {
				t.Errorf("%s: mounts %v", name, err)
				continue
			}
			if len(parts) > 1 && parts[1] == "/etc/outbox-cdc.yaml" {
				configs++
				out, err := configPrint(t, host)
				if err != nil {
					t.Errorf("%s: %s does not load: %v\n%s", name, parts[0], err, out)
				}
			}
		}
	}
	if configs != 2 {
		t.Errorf("%d outbox-cdc services mount a configuration, want 2", configs)
	}
}

// TestDeployKubernetes checks the example manifests: two replicas with the
// probes and the security context the README promises, the DSN from the
// Secret through source.dsn_file, and a configuration that loads.
func TestDeployKubernetes(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(deployDir, "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	docs := map[string]map[string]any{} // kind -> document
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(raw)))
		for {
			var d map[string]any
			if err := dec.Decode(&d); err != nil {
				if err.Error() == "EOF" {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if k, _ := d["kind"].(string); k != "" {
				docs[k] = d
			}
		}
	}
	for _, k := range []string{"Deployment", "Secret", "ConfigMap", "Service", "ServiceMonitor", "Kustomization"} {
		if docs[k] == nil {
			t.Errorf("no %s manifest", k)
		}
	}
	get := func(v any, path ...any) any {
		for _, p := range path {
			switch p := p.(type) {
			case string:
				m, _ := v.(map[string]any)
				v = m[p]
			case int:
				s, _ := v.([]any)
				if p >= len(s) {
					return nil
				}
				v = s[p]
			}
		}
		return v
	}
	dep := docs["Deployment"]
	if r := get(dep, "spec", "replicas"); r != 2 {
		t.Errorf("Deployment replicas = %v, want 2", r)
	}
	ctr := get(dep, "spec", "template", "spec", "containers", 0)
	if p := get(ctr, "livenessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("liveness probe path %v, want /healthz", p)
	}
	if p := get(ctr, "readinessProbe", "httpGet", "path"); p != "/readyz" {
		t.Errorf("readiness probe path %v, want /readyz", p)
	}
	if get(dep, "spec", "template", "spec", "securityContext", "runAsNonRoot") != true ||
		get(ctr, "securityContext", "readOnlyRootFilesystem") != true ||
		get(ctr, "securityContext", "allowPrivilegeEscalation") != false {
		t.Errorf("container must run as non-root with a read-only root filesystem and no privilege escalation")
	}
	mounts := map[string]string{}
	for _, m := range get(ctr, "volumeMounts").([]any) {
		mounts[get(m, "name").(string)] = get(m, "mountPath").(string)
	}
	if _, ok := mounts["state"]; ok {
		t.Errorf("the pods should keep no state: the checkpoint is in a table both replicas reach")
	}
	if get(docs["ServiceMonitor"], "spec", "endpoints", 0, "port") != "metrics" {
		t.Errorf("ServiceMonitor does not scrape the metrics port")
	}

	// The configuration reads the DSN from the mounted Secret.
	cfgText, _ := get(docs["ConfigMap"], "data", "outbox-cdc.yaml").(string)
	var cfg struct {
		Source struct {
			DSNFile string `yaml:"dsn_file"`
			DSN     string `yaml:"dsn"`
		} `yaml:"source"`
	}
	if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
		t.Fatalf("ConfigMap outbox-cdc.yaml: %v", err)
	}
	if cfg.Source.DSN != "" || filepath.Dir(cfg.Source.DSNFile) != mounts["secret"] {
		t.Errorf("source.dsn_file %q should name a file under the Secret mount %q, with no inline dsn", cfg.Source.DSNFile, mounts["secret"])
	}
	if _, ok := get(docs["Secret"], "stringData", filepath.Base(cfg.Source.DSNFile)).(string); !ok {
		t.Errorf("Secret has no key %q", filepath.Base(cfg.Source.DSNFile))
	}

	// Load it with the real loader, the Secret's file standing in.
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "outbox-cdc.yaml")
	dsnPath := filepath.Join(dir, "dsn")
	os.WriteFile(dsnPath, []byte("cdc:s3cret@tcp(mysql.shop.svc:3306)/shop\n"), 0o600)
	os.WriteFile(cfgPath, []byte(cfgText), 0o600)
	out, err := configPrint(t, cfgPath, "OUTBOX_CDC_SOURCE_DSN_FILE="+dsnPath)
	if err != nil {
		t.Fatalf("ConfigMap configuration does not load: %v\n%s", err, out)
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("config print shows the password from the Secret:\n%s", out)
	}

	// The grace period leaves the drain (pipeline.shutdown_timeout) and
	// the sink's close (up to 10 s) time before the kubelet's SIGKILL, and
	// so does Kubernetes' default of 30 s with the default timeout.
	m := regexp.MustCompile(`(?m)^  shutdown_timeout: (\S+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("config print shows no pipeline.shutdown_timeout:\n%s", out)
	}
	shutdown, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	const stopMargin = 15 * time.Second
	grace, _ := get(dep, "spec", "template", "spec", "terminationGracePeriodSeconds").(int)
	if time.Duration(grace)*time.Second < shutdown+stopMargin {
		t.Errorf("terminationGracePeriodSeconds %d < pipeline.shutdown_timeout %s + %s", grace, shutdown, stopMargin)
	}
	if shutdown+stopMargin > 30*time.Second {
		t.Errorf("pipeline.shutdown_timeout's default %s + %s exceeds Kubernetes' default grace period of 30 s: the SIGKILL comes before the drain ends", shutdown, stopMargin)
	}
}

// TestDeployKubernetesReplicated checks the overlay that spreads six
// connectors over three replicas: it patches the base (kustomization), the
// Deployment runs 3 replicas, every dsn_file names a key of the Secret
// patch under the base's Secret mount, and each connector of the
// ConfigMap patch loads with the real loader (config print --connector,
// the Secret's files standing in), placement on, ha.enabled, no password
// in the output.
func TestDeployKubernetesReplicated(t *testing.T) {
	decode := func(rel string) map[string]any {
		var d map[string]any
		if err := yaml.Unmarshal(readDeploy(t, filepath.Join("kubernetes-replicated", rel)), &d); err != nil {
			t.Fatalf("kubernetes-replicated/%s: %v", rel, err)
		}
		return d
	}
	kust := decode("kustomization.yaml")
	if res := fmt.Sprint(kust["resources"]); res != "[../kubernetes]" {
		t.Errorf("kustomization resources %s, want [../kubernetes]", res)
	}
	patched := map[string]bool{}
	for _, p := range kust["patches"].([]any) {
		patched[p.(map[string]any)["path"].(string)] = true
	}
	for _, f := range []string{"deployment-patch.yaml", "configmap-patch.yaml", "secret-patch.yaml"} {
		if !patched[f] {
			t.Errorf("kustomization does not apply %s", f)
		}
	}
	dep := decode("deployment-patch.yaml")
	if r := dep["spec"].(map[string]any)["replicas"]; r != 3 {
		t.Errorf("Deployment patch replicas = %v, want 3", r)
	}
	secret, _ := decode("secret-patch.yaml")["stringData"].(map[string]any)
	if len(secret) == 0 {
		t.Fatal("Secret patch has no stringData")
	}
	// The base Deployment mounts the Secret here.
	const secretMount = "/etc/outbox-cdc/secret"
	if !strings.Contains(string(readDeploy(t, "kubernetes/deployment.yaml")), "mountPath: "+secretMount) {
		t.Fatalf("base Deployment does not mount the Secret at %s", secretMount)
	}
	cm := decode("configmap-patch.yaml")
	cfgText, _ := cm["data"].(map[string]any)["outbox-cdc.yaml"].(string)
	var cfg struct {
		Placement  map[string]any `yaml:"placement"`
		Connectors []struct {
			Name   string `yaml:"name"`
			Source struct {
				DSN     string `yaml:"dsn"`
				DSNFile string `yaml:"dsn_file"`
			} `yaml:"source"`
		} `yaml:"connectors"`
	}
	if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
		t.Fatalf("ConfigMap patch outbox-cdc.yaml: %v", err)
	}
	if len(cfg.Connectors) != 6 {
		t.Errorf("%d connectors, want 6", len(cfg.Connectors))
	}

	// The Secret's keys as files in a temporary directory, the
	// configuration pointing there instead of at the mount.
	dir := t.TempDir()
	for k, v := range secret {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(fmt.Sprint(v)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := filepath.Join(dir, "outbox-cdc.yaml")
	if err := os.WriteFile(cfgPath, []byte(strings.ReplaceAll(cfgText, secretMount+"/", dir+"/")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Connectors {
		t.Run(c.Name, func(t *testing.T) {
			if c.Source.DSN != "" || filepath.Dir(c.Source.DSNFile) != secretMount {
				t.Errorf("source.dsn_file %q should name a file under %s, with no inline dsn", c.Source.DSNFile, secretMount)
			}
			if _, ok := secret[filepath.Base(c.Source.DSNFile)]; !ok {
				t.Errorf("Secret patch has no key %q", filepath.Base(c.Source.DSNFile))
			}
			cmd := testenv.Command(t, "config", "print", "--config", cfgPath, "--connector", c.Name)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "OUTBOX_CDC_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			raw, err := cmd.CombinedOutput()
			out := string(raw)
			if err != nil {
				t.Fatalf("does not load: %v\n%s", err, out)
			}
			var printed struct {
				Name      string `yaml:"name"`
				Placement struct {
					Enabled    bool     `yaml:"enabled"`
					Deployment string   `yaml:"deployment"`
					Brokers    []string `yaml:"brokers"`
				} `yaml:"placement"`
				HA struct {
					Enabled bool `yaml:"enabled"`
				} `yaml:"ha"`
				Checkpoint struct {
					Type string `yaml:"type"`
				} `yaml:"checkpoint"`
			}
			if err := yaml.Unmarshal(raw, &printed); err != nil {
				t.Fatalf("config print output: %v\n%s", err, out)
			}
			if printed.Name != c.Name || !printed.Placement.Enabled || printed.Placement.Deployment == "" || len(printed.Placement.Brokers) == 0 {
				t.Errorf("want connector %s with placement on: %+v", c.Name, printed)
			}
			if !printed.HA.Enabled || printed.Checkpoint.Type != "table" {
				t.Errorf("ha.enabled %v, checkpoint.type %q: placement needs the HA lock and a table checkpoint", printed.HA.Enabled, printed.Checkpoint.Type)
			}
			if strings.Contains(out, "change-me") {
				t.Errorf("config print shows the password from the Secret:\n%s", out)
			}
		})
	}
}
