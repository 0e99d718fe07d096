// Package debezium converts other tools' source positions into outbox-cdc
// positions, and parses, describes and compares positions for the
// `outbox-cdc position` commands. It does no I/O: callers read the input
// and write the checkpoint.
//
// # From Debezium
//
// Debezium stores one offset per connector: a JSON object, in Kafka
// Connect's offsets topic (key ["<connector>",{"server":"<topic.prefix>"}])
// or in Debezium Server's offset file. FromDebezium turns it into the
// checkpoint outbox-cdc resumes from, at transaction granularity: nothing
// Debezium had not delivered is skipped, and if Debezium stopped inside a
// transaction that whole transaction is delivered again (at least once;
// consumers drop the duplicates by the id header).
//
// MySQL and MariaDB offsets (io.debezium.connector.binlog.BinlogOffsetContext,
// MySqlOffsetContext before 2.7, MariaDbOffsetContext since):
//
//	gtids           GTIDs of every transaction Debezium completed; a transaction
//	                in progress is NOT in it (Debezium adds a GTID to this set
//	                only at the transaction's commit). Newlines are removed.
//	                MySQL "uuid:1-5:7-9,uuid:1-3" -> mysql:gtid:<set>, unchanged.
//	                MariaDB "0-1-42,1-7-9" -> mysql:mariadb-gtid:<list>, keeping
//	                per domain the GTID with the highest sequence number
//	                (Debezium may list several servers of one domain).
//	                Preferred when present (a GTID position survives failover),
//	                unless Options.PreferFile.
//	file, pos       Where to restart reading: after the last completed
//	                transaction (the end of its XID/COMMIT event) or, while a
//	                transaction is in progress, the start of that transaction
//	                (its BEGIN, or MariaDB's GTID event). -> mysql:file:<file>:<pos>.
//	                Used when there is no gtids, or with PreferFile.
//	event, row      Events / rows of the transaction at file:pos that Debezium
//	                had already sent (absent when 0). Non-zero means the offset
//	                points inside a transaction: outbox-cdc does not skip
//	                part of a transaction, so the position stays at that
//	                transaction's start (both gtids and file:pos already do)
//	                and the whole transaction is re-sent. Notes.Resend is set.
//	snapshot        true/"true"/"INITIAL"/"BLOCKING": the offset was written
//	                while a snapshot ran -> refused (ErrSnapshot): rows read by
//	                a snapshot are not commit-ordered events, and rows not yet
//	                read would be lost. "INCREMENTAL": accepted; incremental
//	                snapshots run beside streaming, whose position this is.
//	snapshot_completed, incremental_snapshot_*, transaction_id,
//	transaction_data_collection_order_*, server_id, ts_sec
//	                Informational; ts_sec and transaction_id are quoted in notes.
//
// PostgreSQL offsets (io.debezium.connector.postgresql.PostgresOffsetContext);
// LSNs are JSON numbers (64-bit), our positions print them as X/X. outbox-cdc
// resumes with the first transaction whose end LSN (the commit record's end,
// pgoutput's Commit.TransactionEndLSN) is greater than the position:
//
//	lsn_commit      End LSN of the last transaction Debezium finished (set at
//	                each COMMIT message, whose LSN is the commit's end). Every
//	                transaction ending at or before it was delivered (logical
//	                decoding sends transactions in commit order).
//	                -> postgres:<lsn_commit>. Preferred.
//	lsn_proc        LSN of the last message Debezium processed completely.
//	                lsn_proc != lsn_commit means Debezium's last record was inside
//	                the transaction after lsn_commit: that transaction is re-sent
//	                (Notes.Resend). Without lsn_commit (Debezium < 1.1):
//	                -> postgres:<lsn_proc>; transactions ending after it are
//	                re-sent, which may be more than one if they interleaved.
//	lsn             LSN of the last event Debezium read. Used only when both
//	                of the above are absent (oldest versions), same caveat.
//	snapshot, last_snapshot_record
//	                snapshot=true -> refused (ErrSnapshot), even on the last
//	                snapshot record: the snapshot's LSN is not a commit
//	                boundary Debezium streamed from.
//	txId, messageType, ts_usec, xmin, transaction_id, incremental_snapshot_*
//	                Informational; txId, messageType and ts_usec are quoted in notes.
package debezium

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/binlog"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

var (
	// ErrBadOffset is wrapped by errors about input that is not a usable
	// Debezium offset (malformed, missing fields, wrong source).
	ErrBadOffset = errors.New("not a usable Debezium offset")
	// ErrSnapshot is wrapped by the refusal of an offset written during a
	// Debezium snapshot.
	ErrSnapshot = errors.New("Debezium offset was written during a snapshot")
)

// Options adjusts FromDebezium.
type Options struct {
	// Connector chooses the offset when the input holds several (a dump of
	// the whole offsets topic, or a Debezium Server file with several
	// engines): the connector name, the first element of the key
	// ["<connector>",{"server":"<prefix>"}], or the whole key text.
	Connector string
	// PreferFile converts a MySQL/MariaDB offset to its file:pos form even
	// when it has GTIDs (for source.gtid: off).
	PreferFile bool
}

// Notes says how a position was derived.
type Notes struct {
	// Key is the Kafka Connect partition key of the offset used, "" when
	// the input was a bare value.
	Key string
	// Offset is the offset value used (JSON).
	Offset string
	// Resend is true when Debezium's offset pointed inside a transaction:
	// outbox-cdc sends that whole transaction again.
	Resend bool
	// Alternative is the same point in the other MySQL position form (file
	// when a GTID position was chosen, or the reverse), "" if none.
	Alternative outboxcdc.Position
	// Lines are human-readable remarks, one sentence each.
	Lines []string
}

func (n *Notes) add(format string, args ...any) {
	n.Lines = append(n.Lines, fmt.Sprintf(format, args...))
}

// FromDebezium converts a Debezium source offset for a source of the given
// kind (binlog.Kind or wal.Kind). See the package comment for the accepted
// inputs and the mapping.
func FromDebezium(sourceKind string, offset []byte) (outboxcdc.Position, Notes, error) {
	return Convert(sourceKind, offset, Options{})
}

// Convert is FromDebezium with options.
func Convert(sourceKind string, offset []byte, opt Options) (outboxcdc.Position, Notes, error) {
	var n Notes
	if sourceKind != binlog.Kind && sourceKind != wal.Kind {
		return "", n, fmt.Errorf("unknown source kind %q (want %s or %s)", sourceKind, binlog.Kind, wal.Kind)
	}
	recs, err := readRecords(offset)
	if err != nil {
		return "", n, err
	}
	rec, err := pick(recs, opt.Connector)
	if err != nil {
		return "", n, err
	}
	n.Key = rec.key
	var compact bytes.Buffer
	if json.Compact(&compact, rec.value) == nil {
		n.Offset = compact.String()
	} else {
		n.Offset = string(rec.value)
	}
	v, err := decodeObject(rec.value)
	if err != nil {
		return "", n, err
	}
	family, err := familyOf(v)
	if err != nil {
		return "", n, err
	}
	if family != sourceKind {
		return "", n, fmt.Errorf("%w: this is a Debezium %s offset, but the configured source is %s", ErrBadOffset, familyName(family), familyName(sourceKind))
	}
	var pos outboxcdc.Position
	if family == binlog.Kind {
		pos, err = fromBinlog(v, opt, &n)
	} else {
		pos, err = fromWAL(v, &n)
	}
	if err != nil {
		return "", n, err
	}
	return pos, n, nil
}

func familyName(kind string) string {
	if kind == wal.Kind {
		return "PostgreSQL"
	}
	return "MySQL/MariaDB"
}

func decodeObject(value []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: offset value is not JSON: %v", ErrBadOffset, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: offset value has data after its JSON object", ErrBadOffset)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: offset value is a JSON %T, want an object such as {\"file\":...,\"pos\":...} or {\"lsn\":...}", ErrBadOffset, v)
	}
	return m, nil
}

// familyOf tells a binlog offset from a WAL offset by their fields.
func familyOf(v map[string]any) (string, error) {
	has := func(keys ...string) bool {
		for _, k := range keys {
			if _, ok := v[k]; ok {
				return true
			}
		}
		return false
	}
	switch {
	case has("lsn", "lsn_proc", "lsn_commit"):
		return wal.Kind, nil
	case has("file", "pos", "gtids"):
		return binlog.Kind, nil
	case has("change_lsn", "commit_lsn"):
		return "", fmt.Errorf("%w: this looks like a Debezium SQL Server offset (change_lsn/commit_lsn); only MySQL/MariaDB and PostgreSQL offsets can be imported", ErrBadOffset)
	case has("scn", "commit_scn"):
		return "", fmt.Errorf("%w: this looks like a Debezium Oracle offset (scn); only MySQL/MariaDB and PostgreSQL offsets can be imported", ErrBadOffset)
	case has("ord", "resume_token", "sec"):
		return "", fmt.Errorf("%w: this looks like a Debezium MongoDB offset; only MySQL/MariaDB and PostgreSQL offsets can be imported", ErrBadOffset)
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return "", fmt.Errorf("%w: no file/pos/gtids (MySQL, MariaDB) nor lsn/lsn_commit/lsn_proc (PostgreSQL) field; fields present: %s", ErrBadOffset, strings.Join(keys, ", "))
}

// uintField reads a non-negative integer field, as a JSON number or a
// decimal string (Debezium's loaders accept both).
func uintField(v map[string]any, key string) (uint64, bool, error) {
	x, ok := v[key]
	if !ok || x == nil {
		return 0, false, nil
	}
	var s string
	switch t := x.(type) {
	case json.Number:
		s = t.String()
	case string:
		s = strings.TrimSpace(t)
	default:
		return 0, true, fmt.Errorf("%w: field %q is %v, want a non-negative integer", ErrBadOffset, key, x)
	}
	u, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, true, fmt.Errorf("%w: field %q is %q, want a non-negative integer", ErrBadOffset, key, s)
	}
	return u, true, nil
}

func stringField(v map[string]any, key string) (string, bool, error) {
	x, ok := v[key]
	if !ok || x == nil {
		return "", false, nil
	}
	s, isStr := x.(string)
	if !isStr {
		return "", true, fmt.Errorf("%w: field %q is %v, want a string", ErrBadOffset, key, x)
	}
	return s, true, nil
}

// truthy reads a Debezium boolean that may be a JSON boolean or a string.
func truthy(x any) bool {
	switch t := x.(type) {
	case bool:
		return t
	case string:
		return t != "" && !strings.EqualFold(t, "false")
	}
	return x != nil
}

func hasPrefixKey(v map[string]any, prefix string) bool {
	for k := range v {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

func fromBinlog(v map[string]any, opt Options, n *Notes) (outboxcdc.Position, error) {
	if s, ok := v["snapshot"]; ok && truthy(s) {
		if str, isStr := s.(string); !isStr || !strings.EqualFold(str, "INCREMENTAL") {
			return "", fmt.Errorf("%w (snapshot=%v): outbox rows read by a snapshot are not commit-ordered events, and rows it had not read yet would be lost. Let Debezium finish its snapshot and stream at least one transaction (or a heartbeat), stop it, and export the offset again", ErrSnapshot, s)
		}
		n.add("An incremental snapshot was in progress; outbox-cdc does not continue it (a snapshot produces no outbox events), only the streaming position is taken over.")
	} else if hasPrefixKey(v, "incremental_snapshot_") {
		n.add("The offset carries incremental snapshot state; outbox-cdc ignores it and takes over the streaming position only.")
	}
	file, hasFile, err := stringField(v, "file")
	if err != nil {
		return "", err
	}
	pos, hasPos, err := uintField(v, "pos")
	if err != nil {
		return "", err
	}
	events, _, err := uintField(v, "event")
	if err != nil {
		return "", err
	}
	rows, _, err := uintField(v, "row")
	if err != nil {
		return "", err
	}
	gtids, _, err := stringField(v, "gtids")
	if err != nil {
		return "", err
	}
	gtids = strings.NewReplacer("\n", "", "\r", "", " ", "", "\t", "").Replace(gtids)

	var filePos outboxcdc.Position
	var fileErr error
	switch {
	case !hasFile || file == "":
		fileErr = fmt.Errorf("%w: field \"file\" is missing or empty", ErrBadOffset)
	case !hasPos:
		fileErr = fmt.Errorf("%w: field \"pos\" is missing", ErrBadOffset)
	case pos < 4 || pos > math.MaxUint32:
		fileErr = fmt.Errorf("%w: \"pos\" %d is not a binlog offset (4 .. 4294967295)", ErrBadOffset, pos)
	default:
		p := binlog.Pos{File: file, Offset: uint32(pos)}
		filePos = p.Encode()
		if _, err := binlog.ParsePosition(filePos); err != nil {
			fileErr = fmt.Errorf("%w: %v", ErrBadOffset, err)
			filePos = ""
		}
	}

	var gtidPos outboxcdc.Position
	if gtids != "" {
		gtidPos, err = gtidPosition(gtids, n)
		if err != nil {
			return "", err
		}
	}

	inTx := events > 0 || rows > 0
	txID, _, _ := stringField(v, "transaction_id")
	if inTx && gtidPos != "" && filePos != "" && txID != "" && gtidIncludes(gtidPos, txID) {
		// Debezium fills gtids with the set before the current transaction,
		// except for the first transaction after a start from an offset
		// without GTIDs, where the set already holds it. Its file:pos is
		// that transaction's start either way.
		n.add("Debezium's GTID set already includes the transaction in progress (%s), so the GTID form would skip its remaining rows; using the file form, which points at that transaction's start.", txID)
		opt.PreferFile = true
	}
	var chosen outboxcdc.Position
	switch {
	case gtidPos != "" && (!opt.PreferFile || filePos == ""):
		chosen, n.Alternative = gtidPos, filePos
		if opt.PreferFile {
			n.add("The file form was asked for, but the offset's file/pos is unusable (%v); using the GTID form.", fileErr)
		}
		n.add("GTID position: outbox-cdc resumes with the first transaction not in Debezium's completed GTID set.")
	case filePos != "":
		chosen, n.Alternative = filePos, gtidPos
		n.add("File position: outbox-cdc resumes reading binlog %s at offset %d.", file, pos)
		if gtidPos != "" {
			n.add("The offset also has GTIDs; the file form was chosen. Binlog files must still exist on the server, and a file position does not survive a failover to another server.")
		}
	default:
		return "", fileErr
	}
	if inTx {
		n.Resend = true
		n.add("Debezium's offset points inside a transaction (it had sent %d event(s) and %d row(s) of the transaction starting at %s:%d): outbox-cdc re-sends that whole transaction. Consumers drop the duplicates by the id header.", events, rows, file, pos)
	} else {
		n.add("Debezium's offset is at a transaction boundary: nothing it sent is sent again.")
	}
	if ts, ok, _ := uintField(v, "ts_sec"); ok && ts > 0 {
		n.add("The last event Debezium processed was written at %s.", time.Unix(int64(ts), 0).UTC().Format(time.RFC3339))
	}
	if txID != "" {
		n.add("Debezium was inside transaction %s.", txID)
	}
	return chosen, nil
}

// gtidIncludes reports whether the GTID position p covers the single GTID
// gtid (Debezium's transaction_id: "uuid:N" or MariaDB "d-s-n").
func gtidIncludes(p outboxcdc.Position, gtid string) bool {
	bp, err := binlog.ParsePosition(p)
	if err != nil {
		return false
	}
	if bp.MySQLGTID != nil {
		one, err := binlog.ParsePosition(outboxcdc.MakePosition(binlog.Kind, "gtid:"+gtid))
		return err == nil && one.MySQLGTID != nil && bp.MySQLGTID.Contain(one.MySQLGTID)
	}
	one, err := binlog.ParseMariaDBGTIDs(gtid)
	if err != nil || len(one) != 1 {
		return false
	}
	for _, g := range bp.MariaDB {
		if g.DomainID == one[0].DomainID {
			return g.SequenceNumber >= one[0].SequenceNumber
		}
	}
	return false
}

// gtidPosition converts Debezium's gtids field: a MySQL GTID set or a
// MariaDB GTID list.
func gtidPosition(gtids string, n *Notes) (outboxcdc.Position, error) {
	if !strings.Contains(gtids, ":") {
		return mariaDBPosition(gtids, n)
	}
	p := outboxcdc.MakePosition(binlog.Kind, "gtid:"+gtids)
	bp, err := binlog.ParsePosition(p)
	if err != nil {
		return "", fmt.Errorf("%w: field \"gtids\" %q is neither a MySQL GTID set (uuid:1-5,...) nor a MariaDB GTID list (0-1-42,...): %v", ErrBadOffset, gtids, err)
	}
	return bp.Encode(), nil
}

func mariaDBPosition(gtids string, n *Notes) (outboxcdc.Position, error) {
	type gtid struct {
		domain, server uint64
		seq            uint64
	}
	best := map[uint64]gtid{}
	seen := map[uint64]int{}
	for _, part := range strings.Split(gtids, ",") {
		if part == "" {
			continue
		}
		f := strings.Split(part, "-")
		if len(f) != 3 {
			return "", fmt.Errorf("%w: field \"gtids\": %q is not a MariaDB GTID (domain-server-sequence)", ErrBadOffset, part)
		}
		var g gtid
		var errs [3]error
		g.domain, errs[0] = strconv.ParseUint(f[0], 10, 32)
		g.server, errs[1] = strconv.ParseUint(f[1], 10, 32)
		g.seq, errs[2] = strconv.ParseUint(f[2], 10, 64)
		if errs[0] != nil || errs[1] != nil || errs[2] != nil {
			return "", fmt.Errorf("%w: field \"gtids\": %q is not a MariaDB GTID (domain-server-sequence numbers)", ErrBadOffset, part)
		}
		seen[g.domain]++
		if b, ok := best[g.domain]; !ok || g.seq > b.seq {
			best[g.domain] = g
		}
	}
	if len(best) == 0 {
		return "", fmt.Errorf("%w: field \"gtids\" %q holds no GTID", ErrBadOffset, gtids)
	}
	domains := make([]uint64, 0, len(best))
	for d := range best {
		domains = append(domains, d)
	}
	sort.Slice(domains, func(i, j int) bool { return domains[i] < domains[j] })
	parts := make([]string, len(domains))
	for i, d := range domains {
		g := best[d]
		parts[i] = fmt.Sprintf("%d-%d-%d", g.domain, g.server, g.seq)
		if seen[d] > 1 {
			n.add("Debezium listed %d GTIDs for domain %d (several servers); the one with the highest sequence number, %s, is the domain's position.", seen[d], d, parts[i])
		}
	}
	list, err := binlog.ParseMariaDBGTIDs(strings.Join(parts, ","))
	if err != nil {
		return "", fmt.Errorf("%w: field \"gtids\": %v", ErrBadOffset, err)
	}
	p := binlog.Pos{MariaDB: list, IsMariaDB: true}
	return p.Encode(), nil
}

func fromWAL(v map[string]any, n *Notes) (outboxcdc.Position, error) {
	if s, ok := v["snapshot"]; ok && truthy(s) {
		last := ""
		if l, ok := v["last_snapshot_record"]; ok && truthy(l) {
			last = " (even on its last snapshot record)"
		}
		return "", fmt.Errorf("%w%s: outbox rows read by a snapshot are not commit-ordered events, and the snapshot's LSN is not a transaction boundary Debezium streamed from. Let Debezium stream at least one transaction (or a heartbeat) after the snapshot, stop it, and export the offset again", ErrSnapshot, last)
	}
	if hasPrefixKey(v, "incremental_snapshot_") {
		n.add("The offset carries incremental snapshot state; outbox-cdc ignores it and takes over the streaming position only.")
	}
	commit, hasCommit, err := uintField(v, "lsn_commit")
	if err != nil {
		return "", err
	}
	proc, hasProc, err := uintField(v, "lsn_proc")
	if err != nil {
		return "", err
	}
	lsn, hasLSN, err := uintField(v, "lsn")
	if err != nil {
		return "", err
	}
	txID, hasTx, _ := uintField(v, "txId")
	txText := "the transaction in progress"
	if hasTx {
		txText = fmt.Sprintf("transaction %d", txID)
	}
	var at uint64
	switch {
	case hasCommit && commit > 0:
		at = commit
		if hasProc && proc != commit {
			n.Resend = true
			n.add("Debezium's last record was inside %s (lsn_proc %s, after the last finished transaction at lsn_commit %s): outbox-cdc re-sends that whole transaction. Consumers drop the duplicates by the id header.",
				txText, lsnText(proc), lsnText(commit))
		} else {
			n.add("Debezium's offset is at a transaction boundary: outbox-cdc resumes with the first transaction that commits after LSN %s.", lsnText(commit))
		}
	case hasProc && proc > 0:
		at = proc
		n.Resend = true
		n.add("The offset has no lsn_commit (a Debezium older than 1.1): outbox-cdc resumes after lsn_proc %s and re-sends every transaction that ended after it, including %s and any that interleaved with it.", lsnText(proc), txText)
	case hasLSN && lsn > 0:
		at = lsn
		n.Resend = true
		n.add("The offset has neither lsn_commit nor lsn_proc (a very old Debezium): outbox-cdc resumes after lsn %s and re-sends every transaction that ended after it, including %s and any that interleaved with it.", lsnText(lsn), txText)
	default:
		return "", fmt.Errorf("%w: no non-zero lsn_commit, lsn_proc or lsn field", ErrBadOffset)
	}
	if mt, ok, _ := stringField(v, "messageType"); ok && mt != "" {
		n.add("Debezium's last message type was %s.", mt)
	}
	if us, ok, _ := uintField(v, "ts_usec"); ok && us > 0 {
		n.add("Its commit time was %s.", time.UnixMicro(int64(us)).UTC().Format(time.RFC3339Nano))
	}
	return wal.MakePosition(pglogrepl.LSN(at)), nil
}

func lsnText(v uint64) string { return pglogrepl.LSN(v).String() }
