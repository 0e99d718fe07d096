package testenv

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaProxy is one client's own path to a single-broker Kafka (kfake): a
// Proxy (Silence, Heal, Partition, Cut act on it) in front of a forwarder
// that rewrites the broker addresses in Metadata and FindCoordinator
// responses to the proxy's, so the client reaches the broker, bootstrap,
// partition leader and transaction coordinator alike, only through this
// proxy. Several KafkaProxies in front of one broker give several
// processes paths that fail independently (cut the active replica's path,
// keep the standby's). The broker itself keeps advertising its own
// address to everybody else (a test's consumer).
type KafkaProxy struct {
	*Proxy
	ln        net.Listener
	target    string
	advertise string // host:port of Proxy

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

// NewKafkaProxy returns a path to the broker at broker (host:port; a
// cluster of one broker). It is closed at test end.
func NewKafkaProxy(t testing.TB, broker string) *KafkaProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("kafka proxy listen: %v", err)
	}
	k := &KafkaProxy{ln: ln, target: broker, conns: map[net.Conn]struct{}{}}
	k.Proxy = NewProxy(t, ln.Addr().String())
	k.advertise = k.Proxy.Addr()
	go k.serve()
	t.Cleanup(k.close)
	return k
}

// Addr is what the client's bootstrap list names.
func (k *KafkaProxy) Addr() string { return k.advertise }

func (k *KafkaProxy) close() {
	k.mu.Lock()
	k.done = true
	for c := range k.conns {
		c.Close()
	}
	k.mu.Unlock()
	k.ln.Close()
}

func (k *KafkaProxy) track(c net.Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return false
	}
	k.conns[c] = struct{}{}
	return true
}

func (k *KafkaProxy) untrack(c net.Conn) {
	k.mu.Lock()
	delete(k.conns, c)
	k.mu.Unlock()
	c.Close()
}

func (k *KafkaProxy) serve() {
	for {
		client, err := k.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", k.target)
		if err != nil {
			client.Close()
			continue
		}
		if !k.track(client) || !k.track(server) {
			client.Close()
			server.Close()
			return
		}
		go k.relay(client, server)
	}
}

// asked is one request's key and version, by correlation id.
type asked struct{ key, version int16 }

func (k *KafkaProxy) relay(client, server net.Conn) {
	defer k.untrack(client)
	defer k.untrack(server)
	var mu sync.Mutex
	pending := map[int32]asked{}
	go func() {
		defer client.Close()
		defer server.Close()
		for {
			frame, err := readFrame(client)
			if err != nil {
				return
			}
			if len(frame) >= 8 {
				key := int16(binary.BigEndian.Uint16(frame[0:]))
				ver := int16(binary.BigEndian.Uint16(frame[2:]))
				corr := int32(binary.BigEndian.Uint32(frame[4:]))
				if key == kmsg.Metadata.Int16() || key == kmsg.FindCoordinator.Int16() {
					mu.Lock()
					pending[corr] = asked{key, ver}
					mu.Unlock()
				}
			}
			if err := writeFrame(server, frame); err != nil {
				return
			}
		}
	}()
	for {
		frame, err := readFrame(server)
		if err != nil {
			return
		}
		if len(frame) >= 4 {
			corr := int32(binary.BigEndian.Uint32(frame))
			mu.Lock()
			a, ok := pending[corr]
			delete(pending, corr)
			mu.Unlock()
			if ok {
				if out, err := k.rewrite(a, frame); err == nil {
					frame = out
				}
			}
		}
		if err := writeFrame(client, frame); err != nil {
			return
		}
	}
}

// rewrite returns the response frame with every broker address replaced
// by the proxy's.
func (k *KafkaProxy) rewrite(a asked, frame []byte) ([]byte, error) {
	host, portText, err := net.SplitHostPort(k.advertise)
	if err != nil {
		return nil, err
	}
	port, _ := strconv.Atoi(portText)
	req := kmsg.RequestForKey(a.key)
	req.SetVersion(a.version)
	resp := req.ResponseKind()
	resp.SetVersion(a.version)
	header := 4
	if req.IsFlexible() {
		// The response header's tagged fields (none from kfake): keep
		// them as they are.
		n, err := skipTags(frame[4:])
		if err != nil {
			return nil, err
		}
		header += n
	}
	if err := resp.ReadFrom(frame[header:]); err != nil {
		return nil, err
	}
	switch r := resp.(type) {
	case *kmsg.MetadataResponse:
		for i := range r.Brokers {
			r.Brokers[i].Host, r.Brokers[i].Port = host, int32(port)
		}
	case *kmsg.FindCoordinatorResponse:
		if r.Host != "" {
			r.Host, r.Port = host, int32(port)
		}
		for i := range r.Coordinators {
			if r.Coordinators[i].Host != "" {
				r.Coordinators[i].Host, r.Coordinators[i].Port = host, int32(port)
			}
		}
	}
	out := append([]byte(nil), frame[:header]...)
	return resp.AppendTo(out), nil
}

// skipTags returns the length of the tagged fields at the start of b.
func skipTags(b []byte) (int, error) {
	at := 0
	uvarint := func() (uint64, error) {
		v, n := binary.Uvarint(b[at:])
		if n <= 0 {
			return 0, errors.New("kafka proxy: bad tagged fields")
		}
		at += n
		return v, nil
	}
	count, err := uvarint()
	for ; err == nil && count > 0; count-- {
		if _, err = uvarint(); err != nil {
			break
		}
		var size uint64
		if size, err = uvarint(); err == nil {
			if uint64(len(b)-at) < size {
				return 0, errors.New("kafka proxy: short tagged field")
			}
			at += int(size)
		}
	}
	return at, err
}

// readFrame reads one size-prefixed Kafka message, without its size.
func readFrame(c net.Conn) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > 256<<20 {
		return nil, errors.New("kafka proxy: frame too large")
	}
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	return b, err
}

func writeFrame(c net.Conn, b []byte) error {
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err := c.Write(append(out, b...))
	return err
}
