package e2e

// The position commands act on the store run uses (issue 12 item 1), and
// an exactly-once connector that finds its progress record missing
// refuses to start (item 2).

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// debeziumOffset writes a Kafka Connect offset value for the source's
// current position, as Debezium would have stored it after delivering
// everything committed so far.
func (b *backend) debeziumOffset(t *testing.T) string {
	t.Helper()
	var v string
	if b.kind == "postgres" {
		var lsn int64
		if err := b.db.QueryRow("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").Scan(&lsn); err != nil {
			t.Fatal(err)
		}
		v = fmt.Sprintf(`{"lsn_proc":%d,"messageType":"COMMIT","lsn_commit":%d,"lsn":%d,"txId":1,"ts_usec":%d}`, lsn, lsn, lsn, time.Now().UnixMicro())
	} else {
		var gtids string
		if err := b.db.QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&gtids); err != nil {
			t.Fatal(err)
		}
		file, pos := masterStatus(t, b.db)
		v = fmt.Sprintf(`{"ts_sec":%d,"file":%q,"pos":%d,"gtids":%q,"server_id":1}`, time.Now().Unix(), file, pos, gtids)
	}
	p := filepath.Join(t.TempDir(), "offset.json")
	if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func masterStatus(t *testing.T, db *sql.DB) (string, int64) {
	t.Helper()
	rows, err := db.Query("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		t.Fatal("SHOW MASTER STATUS: binary logging is off")
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	var pos int64
	fmt.Sscan(vals[1].String, &pos)
	return vals[0].String, pos
}

// prepareSlot creates the Postgres publication and slot before any row of
// the test, as the cut-over runbook asks (a slot cannot read WAL from
// before it was created).
func (b *backend) prepareSlot(t *testing.T) {
	t.Helper()
	if b.kind != "postgres" {
		return
	}
	slot := testObjectName(t)
	slot = strings.ReplaceAll(slot, "-", "_")
	for _, q := range []string{
		"CREATE PUBLICATION " + slot + " FOR TABLE " + b.table() + " WITH (publish = 'insert')",
		"SELECT pg_create_logical_replication_slot('" + slot + "', 'pgoutput')",
	} {
		if _, err := b.db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestPositionImportThenRun: `position import-debezium` writes the store
// that run resumes from, in each delivery mode and store: the checkpoint
// file, the checkpoint table with HA on, and the exactly-once progress
// topic. Rows Debezium delivered are not sent again, and every row
// committed after the imported offset is (the reported bug: in
// exactly-once mode the import went to a file run ignores, and the 50 rows
// were lost).
func TestPositionImportThenRun(t *testing.T) {
	for _, mode := range []struct{ name, delivery, checkpoint string }{
		{"file", "at-least-once", "file"},
		{"table-ha", "at-least-once", "table"},
		{"progress-topic", "exactly-once", "kafka"},
		// The reported setup: exactly-once with the default checkpoint.type.
		{"eos-default", "exactly-once", "file"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b *backend) {
				_, brokers := testenv.Kafka(t)
				b.prepareSlot(t)
				name := connName(t, "e2e-import-"+mode.name+"-"+b.kind)
				cfg := b.modeConfig(t, name, brokers, mode.checkpoint == "table", mode.delivery, mode.checkpoint)
				b.insertRows(t, ids("debezium", 1, 10), 100) // delivered by Debezium before the cut-over
				offset := b.debeziumOffset(t)
				code, out := testenv.Run(t, 60*time.Second, nil, "position", "import-debezium", "--config", cfg, "--offset", offset)
				if code != 0 {
					t.Fatalf("import-debezium exit %d:\n%s", code, out)
				}
				after := ids("after", 1, 50)
				b.insertRows(t, after, 100)
				c := testenv.Start(t, cfg)
				cons := newConsumer(t, brokers, `outbox\.event\..*`)
				got := cons.waitFor(t, len(after), 60*time.Second)
				got = append(got, cons.quiet(t, time.Second)[len(got):]...)
				checkDelivery(t, got, after, 3, mode.delivery == "exactly-once")
				switch mode.name {
				case "table-ha":
					// The running instance holds the HA lock: the command refuses.
					code, out := testenv.Run(t, 60*time.Second, nil, "position", "import-debezium", "--config", cfg, "--offset", offset, "--force")
					if code != 1 || !strings.Contains(out, "holds the HA lock") {
						t.Fatalf("import while an instance runs: exit %d:\n%s", code, out)
					}
				case "progress-topic":
					// The command fences the running instance, which exits.
					code, out := testenv.Run(t, 60*time.Second, nil, "position", "import-debezium", "--config", cfg, "--offset", offset, "--force")
					if code != 0 {
						t.Fatalf("import while an instance runs: exit %d:\n%s", code, out)
					}
					b.insertRows(t, ids("poke", 1, 1), 100) // its next transaction fails
					if code := c.WaitExit(30 * time.Second); code != 1 || !strings.Contains(c.Log(), "fenced") {
						t.Fatalf("the running instance exited %d after the position was written:\n%s", code, c.Log())
					}
					return
				}
				if err := c.Stop(20 * time.Second); err != nil {
					t.Fatalf("stop: %v", err)
				}
				code, out = testenv.Run(t, 60*time.Second, nil, "position", "show", "--config", cfg, "--json")
				var show struct {
					Store    string `json:"store"`
					Exists   bool   `json:"exists"`
					Position string `json:"position"`
				}
				if err := json.Unmarshal([]byte(out), &show); err != nil || code != 0 || !show.Exists {
					t.Fatalf("position show exit %d: %v\n%s", code, err, out)
				}
				want := mode.checkpoint
				if mode.delivery == "exactly-once" {
					want = "kafka"
				}
				if show.Store != want {
					t.Fatalf("position show reads store %q, run uses %q", show.Store, want)
				}
			})
		})
	}
}

// deleteTopic deletes a topic, as an operator with kafka-topics --delete.
func deleteTopic(t *testing.T, brokers []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TopicNames = []string{topic}
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Topics {
		if r.ErrorCode != 0 {
			t.Fatalf("delete topic %s: error code %d", topic, r.ErrorCode)
		}
	}
}

// TestProgressMissingRefuses: an exactly-once connector that ran before
// and now finds no progress record refuses to start, whether the progress
// topic was deleted while it was stopped (the reported scenario: 20 rows
// committed meanwhile were all skipped) or the connector ran at-least-once
// before. The error names the last known position and both ways out;
// `position set --to` it resumes with nothing lost, `run --fresh-start`
// starts where source.start says.
func TestProgressMissingRefuses(t *testing.T) {
	t.Run("topic deleted", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, b *backend) {
			_, brokers := testenv.Kafka(t)
			name := connName(t, "e2e-progress-deleted-"+b.kind)
			cfg := b.eosConfig(t, name, brokers, false)
			c := testenv.Start(t, cfg)
			first := ids("first", 1, 5)
			b.insertRows(t, first, 100)
			cons := newConsumer(t, brokers, `outbox\.event\..*`)
			cons.waitFor(t, len(first), 30*time.Second)
			if err := c.Stop(20 * time.Second); err != nil {
				t.Fatal(err)
			}
			deleteTopic(t, brokers, name+".progress")
			meanwhile := ids("meanwhile", 1, 20)
			b.insertRows(t, meanwhile, 100)

			code, out := testenv.Run(t, 60*time.Second, nil, "run", "--config", cfg)
			if code != 1 || !strings.Contains(out, "no committed position, but the connector ran before") ||
				!strings.Contains(out, "position set --to") || !strings.Contains(out, "--fresh-start") {
				t.Fatalf("exit %d; want a refusal naming the ways out:\n%s", code, out)
			}
			// Resume from the witness: nothing committed meanwhile is lost.
			code, out = testenv.Run(t, 60*time.Second, nil, "position", "show", "--config", cfg, "--json")
			var show struct {
				Witness struct {
					Position string `json:"position"`
				} `json:"witness"`
			}
			if err := json.Unmarshal([]byte(out), &show); err != nil || show.Witness.Position == "" {
				t.Fatalf("position show (exit %d) names no witness: %v\n%s", code, err, out)
			}
			if code, out := testenv.Run(t, 60*time.Second, nil, "position", "set", "--config", cfg, "--to", show.Witness.Position); code != 0 {
				t.Fatalf("position set exit %d:\n%s", code, out)
			}
			c = testenv.Start(t, cfg)
			got := cons.waitFor(t, len(first)+len(meanwhile), 60*time.Second)
			got = append(got, cons.quiet(t, time.Second)[len(got):]...)
			checkDelivery(t, got, append(first, meanwhile...), 3, true)
			c.Stop(20 * time.Second)
		})
	})
	t.Run("was at-least-once", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, b *backend) {
			_, brokers := testenv.Kafka(t)
			name := connName(t, "e2e-progress-switch-"+b.kind)
			cpPath := filepath.Join(t.TempDir(), "checkpoint")
			alo := b.config(t, name, brokers)
			c := testenv.Start(t, alo, "OUTBOX_CDC_CHECKPOINT_PATH="+cpPath)
			first := ids("alo", 1, 5)
			b.insertRows(t, first, 100)
			cons := newConsumer(t, brokers, `outbox\.event\..*`)
			cons.waitFor(t, len(first), 30*time.Second)
			if err := c.Stop(20 * time.Second); err != nil {
				t.Fatal(err)
			}
			b.insertRows(t, ids("meanwhile", 1, 20), 100)
			eos := []string{"OUTBOX_CDC_CHECKPOINT_PATH=" + cpPath, "OUTBOX_CDC_DELIVERY=exactly-once", "OUTBOX_CDC_SINK_PROGRESS_TOPIC=" + name + ".progress"}
			code, out := testenv.Run(t, 60*time.Second, eos, "run", "--config", alo)
			if code != 1 || !strings.Contains(out, "no committed position, but the connector ran before") {
				t.Fatalf("exit %d; want the refusal:\n%s", code, out)
			}
			// Starting fresh deliberately starts where source.start says.
			c = testenv.LaunchArgs(t, []string{"run", "--config", alo, "--fresh-start"}, eos...)
			c.WaitStreaming(30 * time.Second)
			if !strings.Contains(c.Log(), "starting where source.start says, as asked") {
				t.Fatalf("no log of the deliberate fresh start:\n%s", c.Log())
			}
			later := ids("later", 1, 3)
			b.insertRows(t, later, 100)
			// MySQL (start: latest) skips the rows committed meanwhile,
			// PostgreSQL (start: earliest, the slot) sends them.
			deadline := time.Now().Add(60 * time.Second)
			for missing := later; len(missing) > 0; {
				if time.Now().After(deadline) {
					t.Fatalf("rows %v committed after the fresh start never arrived", missing)
				}
				seen := map[string]bool{}
				for _, r := range cons.waitFor(t, len(cons.r)+1, time.Second) {
					seen[r.Headers["id"]] = true
				}
				missing = missing[:0:0]
				for _, id := range later {
					if !seen[id] {
						missing = append(missing, id)
					}
				}
			}
			c.Stop(20 * time.Second)
		})
	})
}
