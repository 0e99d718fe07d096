package testenv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Fauxqs runs fauxqs, an SNS and SQS emulator in Node.js from the npm
// registry, pinned by test/testenv/fauxqs/package-lock.json (npm ci into
// a cache directory, once per machine and lock file) and served on
// loopback by test/testenv/fauxqs/serve.mjs. It speaks SNS's query
// protocol (PublishBatch with per-entry results, FIFO topics that pass
// MessageGroupId and MessageDeduplicationId on to FIFO queues) and SQS's
// JSON protocol, and delivers what a topic gets to its SQS
// subscriptions, where the tests read it. 1.9.2 is the last fauxqs that
// runs on the machines' Node.js 20. What it does not reproduce of SNS is
// in docs/sinks.md ("What the SNS emulator does not reproduce").
//
// In front of it the tests get a small HTTP front (Endpoint) that counts
// the entries of each PublishBatch and can fail an entry once (FailOnce),
// as the emulator never fails one for a transient reason.

var (
	fauxqsOnce sync.Once
	fauxqsDir  string
	fauxqsErr  error
)

// fauxqsHome installs fauxqs once per machine and lock file and returns
// the directory holding serve.mjs and node_modules.
func fauxqsHome(t testing.TB) string {
	t.Helper()
	fauxqsOnce.Do(func() {
		_, self, _, _ := runtime.Caller(0)
		src := filepath.Join(filepath.Dir(self), "fauxqs")
		files := []string{"package.json", "package-lock.json", "serve.mjs"}
		h := sha256.New()
		content := map[string][]byte{}
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				fauxqsErr = err
				return
			}
			content[f] = b
			h.Write(b)
		}
		dir := filepath.Join(os.TempDir(), "outbox-cdc-test-fauxqs-"+hex.EncodeToString(h.Sum(nil))[:12])
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "fauxqs", "package.json")); err == nil {
			fauxqsDir = dir
			return
		}
		if _, err := exec.LookPath("npm"); err != nil {
			fauxqsErr = fmt.Errorf("npm is not installed: %v", err)
			return
		}
		tmp, err := os.MkdirTemp(os.TempDir(), "outbox-cdc-test-fauxqs-install-")
		if err != nil {
			fauxqsErr = err
			return
		}
		for f, b := range content {
			if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
				fauxqsErr = err
				return
			}
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			fauxqsErr = fmt.Errorf("npm ci (fauxqs): %v: %s", err, out)
			return
		}
		if err := os.Rename(tmp, dir); err != nil {
			// Another test process installed it meanwhile?
			os.RemoveAll(tmp)
			if _, serr := os.Stat(filepath.Join(dir, "node_modules", "fauxqs", "package.json")); serr != nil {
				fauxqsErr = err
				return
			}
		}
		fauxqsDir = dir
	})
	if fauxqsErr != nil {
		Unavailable(t, "the fauxqs SNS/SQS emulator: %v", fauxqsErr)
	}
	return fauxqsDir
}

// AWSTestEnv points the AWS SDK's default chain at fixed test credentials
// in the environment: no shared files, no instance metadata, no profile,
// no region. For the TestMain of a package that tests an AWS sink.
func AWSTestEnv() {
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_SESSION_TOKEN": "",
		"AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_PROFILE": "", "AWS_REGION": "",
	} {
		os.Setenv(k, v)
	}
}

// FauxqsServer is one fauxqs process and the front in front of it.
type FauxqsServer struct {
	// Addr is fauxqs's host:port.
	Addr string
	// Endpoint is the front's URL: the sink's sink.endpoint.
	Endpoint string
	front    *snsFront
}

// FauxqsAccount is the account id of fauxqs's topics and queues.
const FauxqsAccount = "000000000000"

// Fauxqs starts fauxqs and stops it at the end of t.
func Fauxqs(t testing.TB) *FauxqsServer {
	t.Helper()
	dir := fauxqsHome(t)
	if _, err := exec.LookPath("node"); err != nil {
		Unavailable(t, "the fauxqs SNS/SQS emulator: node is not installed: %v", err)
	}
	addr := FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command("node", filepath.Join(dir, "serve.mjs"), port)
	cmd.Dir = dir
	startEmulator(t, "fauxqs", cmd, addr)
	e := &FauxqsServer{Addr: addr, front: &snsFront{target: "http://" + addr + "/", fail: map[string]string{}}}
	srv := httptest.NewServer(e.front)
	t.Cleanup(srv.Close)
	e.Endpoint = srv.URL
	return e
}

// TopicARN is the ARN of the topic named name.
func (e *FauxqsServer) TopicARN(name string) string {
	return "arn:aws:sns:us-east-1:" + FauxqsAccount + ":" + name
}

// Topic creates the topic name (FIFO when it ends in .fifo) and, for each
// queue, the queue (FIFO likewise) and its subscription to the topic,
// with raw message delivery (the message and its attributes as they were
// published) unless envelope.
func (e *FauxqsServer) Topic(t testing.TB, name string, envelope bool, queues ...string) string {
	t.Helper()
	form := url.Values{"Action": {"CreateTopic"}, "Name": {name}}
	if strings.HasSuffix(name, ".fifo") {
		form.Set("Attributes.entry.1.key", "FifoTopic")
		form.Set("Attributes.entry.1.value", "true")
	}
	e.query(t, form)
	for _, q := range queues {
		e.Queue(t, q)
		form := url.Values{"Action": {"Subscribe"}, "TopicArn": {e.TopicARN(name)}, "Protocol": {"sqs"},
			"Endpoint": {"arn:aws:sqs:us-east-1:" + FauxqsAccount + ":" + q}}
		if !envelope {
			form.Set("Attributes.entry.1.key", "RawMessageDelivery")
			form.Set("Attributes.entry.1.value", "true")
		}
		e.query(t, form)
	}
	return e.TopicARN(name)
}

// Queue creates the SQS queue name (FIFO when it ends in .fifo).
func (e *FauxqsServer) Queue(t testing.TB, name string) {
	t.Helper()
	in := map[string]any{"QueueName": name}
	if strings.HasSuffix(name, ".fifo") {
		in["Attributes"] = map[string]string{"FifoQueue": "true"}
	}
	e.sqs(t, "CreateQueue", in, nil)
}

func (e *FauxqsServer) query(t testing.TB, form url.Values) []byte {
	t.Helper()
	resp, err := http.PostForm("http://"+e.Addr+"/", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", form.Get("Action"), resp.StatusCode, b)
	}
	return b
}

func (e *FauxqsServer) sqs(t testing.TB, op string, in, out any) {
	t.Helper()
	body, _ := json.Marshal(in)
	req, _ := http.NewRequest(http.MethodPost, "http://"+e.Addr+"/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS."+op)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", op, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v: %s", op, err, b)
		}
	}
}

// Drain reads every message of the SQS queue (receive, then delete) in
// the emulator's order, over SQS's JSON protocol.
func (e *FauxqsServer) Drain(t testing.TB, queue string) []SQSMessage {
	t.Helper()
	qu := "http://sqs.us-east-1.localhost:" + strings.SplitN(e.Addr, ":", 2)[1] + "/" + FauxqsAccount + "/" + queue
	var out []SQSMessage
	for {
		var r struct {
			Messages []struct {
				Body    string
				Receipt string `json:"ReceiptHandle"`
				Attrs   map[string]struct {
					StringValue string
					BinaryValue []byte
				} `json:"MessageAttributes"`
				System map[string]string `json:"Attributes"`
			}
		}
		e.sqs(t, "ReceiveMessage", map[string]any{"QueueUrl": qu, "MaxNumberOfMessages": 10,
			"MessageAttributeNames": []string{"All"}, "AttributeNames": []string{"All"}}, &r)
		if len(r.Messages) == 0 {
			return out
		}
		for _, m := range r.Messages {
			got := SQSMessage{Body: m.Body, Attrs: map[string]string{}, Group: m.System["MessageGroupId"], DedupID: m.System["MessageDeduplicationId"]}
			for k, a := range m.Attrs {
				got.Attrs[k] = a.StringValue + string(a.BinaryValue)
			}
			out = append(out, got)
			e.sqs(t, "DeleteMessage", map[string]any{"QueueUrl": qu, "ReceiptHandle": m.Receipt}, nil)
		}
	}
}

// FailOnce makes the next PublishBatch entry with the deduplication id
// fail once with code (SenderFault false); the emulator does not see it.
func (e *FauxqsServer) FailOnce(dedupID, code string) { e.front.failOnce(dedupID, code) }

// Batches returns the number of entries of each PublishBatch seen.
func (e *FauxqsServer) Batches() []int {
	e.front.mu.Lock()
	defer e.front.mu.Unlock()
	return append([]int(nil), e.front.batches...)
}

// Republished returns how many PublishBatch entries the front handed on
// with a deduplication id it had handed on before: the copies a FIFO
// topic's deduplication window drops.
func (e *FauxqsServer) Republished() int {
	e.front.mu.Lock()
	defer e.front.mu.Unlock()
	n := 0
	for _, c := range e.front.sent {
		n += c - 1
	}
	return n
}

// snsFront forwards every request to fauxqs; of a PublishBatch it counts
// the entries and answers the entries to fail itself.
type snsFront struct {
	target string

	mu      sync.Mutex
	fail    map[string]string // deduplication id -> code, once
	batches []int
	sent    map[string]int // deduplication id -> entries handed on
}

func (f *snsFront) failOnce(dedupID, code string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[dedupID] = code
}

var publishEntryKey = regexp.MustCompile(`^PublishBatchRequestEntries\.member\.(\d+)\.(.+)$`)

func (f *snsFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ctype := r.Header.Get("Content-Type")
	form, err := url.ParseQuery(string(body))
	if err != nil || !strings.Contains(ctype, "x-www-form-urlencoded") || form.Get("Action") != "PublishBatch" {
		f.forward(w, r, ctype, body)
		return
	}
	entries := map[string]bool{}
	dropped := map[string]bool{}
	var failed strings.Builder
	f.mu.Lock()
	for k, vs := range form {
		m := publishEntryKey.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		entries[m[1]] = true
		if m[2] == "MessageDeduplicationId" {
			if f.sent == nil {
				f.sent = map[string]int{}
			}
			if code, ok := f.fail[vs[0]]; !ok {
				f.sent[vs[0]]++
			} else {
				delete(f.fail, vs[0])
				dropped[m[1]] = true
				fmt.Fprintf(&failed, "<member><Id>%s</Id><Code>%s</Code><Message>injected</Message><SenderFault>false</SenderFault></member>",
					xmlText(form.Get("PublishBatchRequestEntries.member."+m[1]+".Id")), code)
			}
		}
	}
	f.batches = append(f.batches, len(entries))
	f.mu.Unlock()
	for k := range form {
		if m := publishEntryKey.FindStringSubmatch(k); m != nil && dropped[m[1]] {
			form.Del(k)
		}
	}
	body = entryOrder(form)
	resp, err := http.Post(f.target, ctype, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if failed.Len() > 0 && resp.StatusCode == http.StatusOK {
		rb = bytes.Replace(rb, []byte("<Failed>"), []byte("<Failed>"+failed.String()), 1)
	}
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	w.Write(rb)
}

// entryOrder encodes form with the batch's entries in the order of their
// member numbers. fauxqs takes a PublishBatch's entries in the order
// their fields appear in the body, and url.Values (like the SDK) encodes
// keys sorted as text, member.10 before member.2; SNS takes the list in
// member order, which is what the front hands on.
func entryOrder(form url.Values) []byte {
	keys := make([]string, 0, len(form))
	for k := range form {
		keys = append(keys, k)
	}
	num := func(k string) int {
		m := publishEntryKey.FindStringSubmatch(k)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	sort.Slice(keys, func(i, j int) bool {
		if a, b := num(keys[i]), num(keys[j]); a != b {
			return a < b
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for _, k := range keys {
		for _, v := range form[k] {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(url.QueryEscape(k) + "=" + url.QueryEscape(v))
		}
	}
	return []byte(b.String())
}

func (f *snsFront) forward(w http.ResponseWriter, r *http.Request, ctype string, body []byte) {
	req, _ := http.NewRequest(http.MethodPost, f.target, bytes.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	if t := r.Header.Get("X-Amz-Target"); t != "" {
		req.Header.Set("X-Amz-Target", t)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}
