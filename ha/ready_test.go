package ha

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestReadinessProofs: a standby's proof is seen by the other instances
// while it is fresh (ProofFresh, on the database's clock), never by the
// instance itself, and no longer once withdrawn.
func TestReadinessProofs(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.kind, func(t *testing.T) {
			ctx := context.Background()
			connector := "ready-" + b.kind + "-" + time.Now().Format("150405.000000")
			cfg := DefaultConfig()
			cfg.CheckInterval = 100 * time.Millisecond // ProofFresh: 3s
			open := func(replica string) *Readiness {
				r, err := NewReadiness(b.kind, b.dsn, connector, replica, cfg, zerolog.Nop())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Withdraw(ctx); r.Close() })
				return r
			}
			active, standby := open("active"), open("standby")
			if _, ok, err := active.OtherReady(ctx, time.Hour); err != nil || ok {
				t.Fatalf("before any proof: ready %v, %v", ok, err)
			}
			if err := active.Prove(ctx, time.Now()); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := active.OtherReady(ctx, time.Hour); err != nil || ok {
				t.Fatalf("its own proof counted: %v, %v", ok, err)
			}
			if err := standby.Prove(ctx, time.Now()); err != nil {
				t.Fatal(err)
			}
			if who, ok, err := active.OtherReady(ctx, time.Hour); err != nil || !ok || who != "standby" {
				t.Fatalf("fresh proof: %q %v, %v", who, ok, err)
			}
			// A probe that began before the active's trouble is no proof.
			if err := standby.Prove(ctx, time.Now().Add(-time.Second)); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := active.OtherReady(ctx, 500*time.Millisecond); err != nil || ok {
				t.Fatalf("a probe older than the trouble counted: %v, %v", ok, err)
			}
			if _, ok, err := active.OtherReady(ctx, 2*time.Second); err != nil || !ok {
				t.Fatalf("a probe younger than the trouble did not count: %v, %v", ok, err)
			}
			if err := standby.Prove(ctx, time.Now()); err != nil {
				t.Fatal(err)
			}
			// A proof ages out: back-date it beyond ProofFresh.
			age, ok, err := active.proofAge(ctx, "standby")
			if err != nil || !ok || age > time.Second {
				t.Fatalf("proof age %s %v %v", age, ok, err)
			}
			q := `UPDATE ` + ReadyTable + ` SET proved_at = proved_at - INTERVAL 4 SECOND WHERE lock_name = ? AND replica = 'standby'`
			if b.kind == "postgres" {
				q = `UPDATE ` + ReadyTable + ` SET proved_at = proved_at - interval '4 seconds' WHERE lock_name = $1 AND replica = 'standby'`
			}
			if _, err := b.db.Exec(q, LockName(connector)); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := active.OtherReady(ctx, time.Hour); err != nil || ok {
				t.Fatalf("stale proof counted: %v, %v", ok, err)
			}
			if err := standby.Prove(ctx, time.Now()); err != nil {
				t.Fatal(err)
			}
			if err := standby.Withdraw(ctx); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := active.OtherReady(ctx, time.Hour); err != nil || ok {
				t.Fatalf("withdrawn proof counted: %v, %v", ok, err)
			}
		})
	}
}
