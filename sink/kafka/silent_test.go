package kafka

import (
	"context"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// silentBound is how long a sink may take to notice a broker path that
// went silent (no RST, no FIN: a cut network), with produce_timeout 5s:
// the read deadline of a request (produce_timeout + 10s), plus
// ready_interval for an idle sink, plus margin for a loaded machine.
const silentBound = 15*time.Second + time.Second + 10*time.Second

// TestKafkaSilentBrokerNoticed: the path to the broker goes quiet both ways
// while a Write is in flight and while the sink is idle. Ready reports it
// within the read deadline (produce_timeout + 10s), not after the OS's TCP
// timeouts (minutes to hours); once the path heals, the Write completes.
func TestKafkaSilentBrokerNoticed(t *testing.T) {
	for _, busy := range []bool{true, false} {
		name := map[bool]string{true: "writing", false: "idle"}[busy]
		t.Run(name, func(t *testing.T) {
			_, proxy, brokers := testenv.KafkaBehindProxy(t)
			cfg := testConfig(brokers)
			cfg.ReadyInterval = time.Second
			k, _ := newTestKafka(t, cfg)
			rec := []outboxcdc.Record{{Topic: "t", Key: []byte("k"), Value: []byte("v")}}
			if err := k.Write(context.Background(), rec); err != nil {
				t.Fatal(err)
			}
			time.Sleep(1500 * time.Millisecond) // the probe now has to ask the broker
			proxy.Silence()
			silenced := time.Now()
			done := make(chan error, 1)
			if busy {
				go func() { done <- k.Write(context.Background(), rec) }()
			}
			for k.Ready() == nil {
				if time.Since(silenced) > silentBound {
					t.Fatalf("Ready still nil %v after the broker path went silent", silentBound)
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("noticed after %v: %v", time.Since(silenced).Round(100*time.Millisecond), k.Ready())
			proxy.Heal()
			if busy {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("Write after the path healed: %v", err)
					}
				case <-time.After(60 * time.Second):
					t.Fatal("the Write did not complete after the path healed")
				}
			}
		})
	}
}

// TestReadProgressSilentBroker: reading the progress topic (start, the
// position commands) through a silent path fails within the request
// deadlines instead of hanging.
func TestReadProgressSilentBroker(t *testing.T) {
	_, proxy, brokers := testenv.KafkaBehindProxy(t)
	s := txnSink(t, brokers, "conn")
	if _, err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy.Silence()
	start := time.Now()
	_, err := ReadProgress(context.Background(), s.cfg, "progress", "conn", "mysql")
	took := time.Since(start)
	t.Logf("ReadProgress through a silent path: %v after %v", err, took.Round(100*time.Millisecond))
	if err == nil || took > 60*time.Second {
		t.Fatalf("ReadProgress = %v after %v; want an error within the request deadlines", err, took)
	}
}

// TestTransactionalIdleBrokerLossNoticed: the exactly-once sink, idle after
// Load, reports a broker path that went silent through Ready, as the
// at-least-once sink does, and is ready again once it heals. It probes
// through the producer Load started and never starts one itself (a start
// fences other instances).
func TestTransactionalIdleBrokerLossNoticed(t *testing.T) {
	_, proxy, brokers := testenv.KafkaBehindProxy(t)
	s := txnSink(t, brokers, "conn-idle", func(c *KafkaConfig, _ *TxnConfig) {
		c.ProduceTimeout = 5 * time.Second
		c.ReadyInterval = time.Second
	})
	if _, err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAtomic(context.Background(), recs("events", "1"), "mysql:0-1-1"); err != nil {
		t.Fatal(err)
	}
	inits := value(s.tm.inits)
	time.Sleep(1500 * time.Millisecond) // the probe now has to ask the broker
	proxy.Silence()
	silenced := time.Now()
	for s.Ready() == nil {
		if time.Since(silenced) > silentBound {
			t.Fatalf("Ready still nil %v after the broker path went silent", silentBound)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("noticed after %v: %v", time.Since(silenced).Round(100*time.Millisecond), s.Ready())
	proxy.Heal()
	for s.Ready() != nil {
		if time.Since(silenced) > 2*silentBound {
			t.Fatalf("Ready %v after the path healed", s.Ready())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := value(s.tm.inits); n != inits {
		t.Fatalf("the probe started a transactional producer: %v inits, %v before", n, inits)
	}
}
