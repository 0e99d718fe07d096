package testenv

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Goaws runs goaws, a Go SQS emulator built from the module proxy at a
// pinned version (go install into a cache directory, once per machine),
// on a free port. goaws speaks the AWS query protocol only: the SQS sink
// reaches it with sink.protocol query at Endpoint, or with its default
// JSON 1.0 protocol at JSONEndpoint, a translating front (goaws_json.go).
//
// goaws's own SendMessageBatch drops the entries' message attributes,
// checks no size and never fails a single entry. So the tests put a small
// splitter in front of it (batchSplitter): it turns each SendMessageBatch
// into one SendMessage per entry, in entry order, and assembles the batch
// answer from their answers, which gives per-entry results (a message
// over the queue's maximum size fails alone) and a place to inject an
// entry's failure. What goaws does not reproduce of a FIFO queue is in
// docs/sinks.md ("What the SQS emulator does not reproduce").
//
// goaws listens on all addresses of the machine (it takes no listen
// address), on a free port; the tests send to loopback only.
const goawsModule = "github.com/Admiral-Piett/goaws/app/cmd@v0.4.5"

var (
	goawsOnce sync.Once
	goawsBin  string
	goawsErr  error
)

// goawsBinary builds goaws once per machine (the module and build caches
// make later builds instant).
func goawsBinary(t testing.TB) string {
	t.Helper()
	goawsOnce.Do(func() {
		dir := filepath.Join(os.TempDir(), "outbox-cdc-test-goaws-v0.4.5")
		bin := filepath.Join(dir, "cmd")
		if _, err := os.Stat(bin); err == nil {
			goawsBin = bin
			return
		}
		cmd := exec.Command("go", "install", goawsModule)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			goawsErr = fmt.Errorf("go install %s: %v: %s", goawsModule, err, out)
			return
		}
		goawsBin = bin
	})
	if goawsErr != nil {
		Unavailable(t, "the goaws SQS emulator: %v", goawsErr)
	}
	return goawsBin
}

// GoawsServer is one goaws process with the queues it was started with,
// and the splitter in front of it.
type GoawsServer struct {
	// Addr is goaws's host:port.
	Addr string
	// Endpoint is the splitter's URL: the sink's sink.endpoint with
	// sink.protocol query.
	Endpoint string
	// JSONEndpoint speaks SQS's AWS JSON 1.0 protocol (the sink's default)
	// in front of the splitter, translating the operations the sink uses.
	JSONEndpoint string
	split        *batchSplitter
}

// GoawsQueue is a queue goaws creates at start (a name ending in .fifo
// makes a FIFO queue).
type GoawsQueue struct {
	Name    string
	MaxSize int // MaximumMessageSize; 0: 256 KiB
}

// FailOnce makes the next batch entry with the deduplication id fail once
// with code (SenderFault false).
func (e *GoawsServer) FailOnce(dedupID, code string) { e.split.failOnce(dedupID, code) }

// Batches returns the number of entries of each SendMessageBatch seen.
func (e *GoawsServer) Batches() []int {
	e.split.mu.Lock()
	defer e.split.mu.Unlock()
	return append([]int(nil), e.split.batches...)
}

// Goaws starts goaws with queues and stops it at the end of t.
func Goaws(t testing.TB, queues ...GoawsQueue) *GoawsServer {
	t.Helper()
	bin := goawsBinary(t)
	addr := FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	var b strings.Builder
	fmt.Fprintf(&b, "Local:\n  Host: 127.0.0.1\n  Port: %s\n  Region: us-east-1\n  AccountId: \"100010001000\"\n  EnableDuplicates: false\n", port)
	b.WriteString("  QueueAttributeDefaults:\n    VisibilityTimeout: 300\n    ReceiveMessageWaitTimeSeconds: 0\n    MaximumMessageSize: 262144\n  Queues:\n")
	for _, q := range queues {
		fmt.Fprintf(&b, "    - Name: %s\n", q.Name)
		if q.MaxSize > 0 {
			fmt.Fprintf(&b, "      MaximumMessageSize: %d\n", q.MaxSize)
		}
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "goaws.yaml")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	startEmulator(t, "goaws", exec.Command(bin, "-config", conf, "Local"), addr)
	e := &GoawsServer{Addr: addr, split: &batchSplitter{target: "http://" + addr + "/", fail: map[string]string{}}}
	srv := httptest.NewServer(e.split)
	t.Cleanup(srv.Close)
	e.Endpoint = srv.URL
	js := httptest.NewServer(&jsonFront{next: e.split})
	t.Cleanup(js.Close)
	e.JSONEndpoint = js.URL
	return e
}

// startEmulator starts cmd, an emulator's process serving on addr (its
// output in a log file of the test), stops it at the end of t, and waits
// until GET /health answers.
func startEmulator(t testing.TB, name string, cmd *exec.Cmd, addr string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := http.Get("http://" + addr + "/health")
		if err == nil {
			r.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("%s did not answer on %s: %v\n%s", name, addr, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// batchSplitter forwards every request to goaws, a SendMessageBatch as one
// SendMessage per entry. fail maps a deduplication id (the message id) to
// an error code its next entry fails with once (SenderFault false).
type batchSplitter struct {
	target string

	mu      sync.Mutex
	fail    map[string]string
	batches []int // entries per SendMessageBatch seen
}

func (b *batchSplitter) failOnce(dedupID, code string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fail[dedupID] = code
}

var entryKey = regexp.MustCompile(`^SendMessageBatchRequestEntry\.(\d+)\.(.+)$`)

func (b *batchSplitter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("Action") != "SendMessageBatch" {
		b.forward(w, r.Header.Get("Content-Type"), body)
		return
	}
	entries := map[string]url.Values{}
	var order []string
	for k, vs := range form {
		m := entryKey.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		if _, ok := entries[m[1]]; !ok {
			entries[m[1]] = url.Values{"Action": {"SendMessage"}, "Version": {form.Get("Version")}, "QueueUrl": {form.Get("QueueUrl")}}
			order = append(order, m[1])
		}
		entries[m[1]][m[2]] = vs
	}
	sortNumeric(order)
	b.mu.Lock()
	b.batches = append(b.batches, len(order))
	b.mu.Unlock()
	// SQS lists the successful entries, then the failed ones.
	var out, failed strings.Builder
	for _, n := range order {
		e := entries[n]
		id := e.Get("Id")
		e.Del("Id")
		b.mu.Lock()
		code, inject := b.fail[e.Get("MessageDeduplicationId")]
		delete(b.fail, e.Get("MessageDeduplicationId"))
		b.mu.Unlock()
		if inject {
			fmt.Fprintf(&failed, `<BatchResultErrorEntry><Id>%s</Id><Code>%s</Code><Message>injected</Message><SenderFault>false</SenderFault></BatchResultErrorEntry>`, id, code)
			continue
		}
		resp, err := http.Post(b.target, "application/x-www-form-urlencoded", strings.NewReader(e.Encode()))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			var er struct {
				Type    string `xml:"Error>Type"`
				Code    string `xml:"Error>Code"`
				Message string `xml:"Error>Message"`
			}
			xml.Unmarshal(rb, &er)
			fmt.Fprintf(&failed, `<BatchResultErrorEntry><Id>%s</Id><Code>%s</Code><Message>%s</Message><SenderFault>%t</SenderFault></BatchResultErrorEntry>`,
				id, xmlText(er.Code), xmlText(er.Message), er.Type != "Receiver")
			continue
		}
		var ok struct {
			MessageID string `xml:"SendMessageResult>MessageId"`
			MD5       string `xml:"SendMessageResult>MD5OfMessageBody"`
			Seq       string `xml:"SendMessageResult>SequenceNumber"`
		}
		if err := xml.Unmarshal(rb, &ok); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintf(&out, `<SendMessageBatchResultEntry><Id>%s</Id><MessageId>%s</MessageId><MD5OfMessageBody>%s</MD5OfMessageBody></SendMessageBatchResultEntry>`,
			id, ok.MessageID, ok.MD5)
	}
	out.WriteString(failed.String())
	out.WriteString(`</SendMessageBatchResult><ResponseMetadata><RequestId>0</RequestId></ResponseMetadata></SendMessageBatchResponse>`)
	w.Header().Set("Content-Type", "text/xml")
	io.WriteString(w, `<SendMessageBatchResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/"><SendMessageBatchResult>`+out.String())
}

func (b *batchSplitter) forward(w http.ResponseWriter, ctype string, body []byte) {
	resp, err := http.Post(b.target, ctype, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

func xmlText(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

func sortNumeric(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && (len(s[j]) < len(s[j-1]) || len(s[j]) == len(s[j-1]) && s[j] < s[j-1]); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// SQSMessage is one message read back from goaws.
type SQSMessage struct {
	Body  string
	Attrs map[string]string // message attributes, String or Binary value
	// Group and DedupID are a FIFO message's MessageGroupId and
	// MessageDeduplicationId, where the emulator returns them (fauxqs).
	Group, DedupID string
}

// Drain reads every message of queue (receive, then delete) in the
// emulator's order, over plain HTTP with the query protocol (the test
// reads goaws with its own words, not through the SDK under test). A
// FIFO queue is read one message at a time: goaws hides, without
// returning them, the messages of a group it finds locked while it fills
// a receive of several.
func (e *GoawsServer) Drain(t testing.TB, queue string) []SQSMessage {
	t.Helper()
	qu := "http://" + e.Addr + "/100010001000/" + queue
	post := func(form url.Values) []byte {
		resp, err := http.PostForm("http://"+e.Addr+"/", form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v %s", form.Get("Action"), resp.StatusCode, err, b)
		}
		return b
	}
	max := "10"
	if strings.HasSuffix(queue, ".fifo") {
		max = "1"
	}
	var out []SQSMessage
	for {
		var r struct {
			Messages []struct {
				Body    string `xml:"Body"`
				Receipt string `xml:"ReceiptHandle"`
				Attrs   []struct {
					Name   string `xml:"Name"`
					String string `xml:"Value>StringValue"`
					Binary string `xml:"Value>BinaryValue"`
				} `xml:"MessageAttribute"`
			} `xml:"ReceiveMessageResult>Message"`
		}
		b := post(url.Values{"Action": {"ReceiveMessage"}, "QueueUrl": {qu}, "MaxNumberOfMessages": {max},
			"MessageAttributeName.1": {"All"}})
		if err := xml.Unmarshal(b, &r); err != nil {
			t.Fatalf("ReceiveMessage: %v: %s", err, b)
		}
		if len(r.Messages) == 0 {
			return out
		}
		for _, m := range r.Messages {
			got := SQSMessage{Body: m.Body, Attrs: map[string]string{}}
			for _, a := range m.Attrs {
				got.Attrs[a.Name] = a.String + a.Binary
			}
			out = append(out, got)
			post(url.Values{"Action": {"DeleteMessage"}, "QueueUrl": {qu}, "ReceiptHandle": {m.Receipt}})
		}
	}
}
