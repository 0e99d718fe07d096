package binlog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	mysqldriver "github.com/go-sql-driver/mysql"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/tlsconf"
)

// Errors Run returns wrap one of these (errors.Is), so cmd/ and the preflight
// check can say what to do. All of them are permanent: Run does not retry.
var (
	// ErrServerSettings: the server is not set up for row-based change data
	// capture (log_bin, binlog_format, binlog_row_image, gtid_mode).
	ErrServerSettings = errors.New("server settings unsuitable for change data capture")
	// ErrPositionGone: the server no longer has (or never had) the binlog
	// the checkpoint points into: purged, or a failover to a server
	// without our history (server error 1236).
	ErrPositionGone = errors.New("binlog position not available on the server")
	// ErrServerIDConflict: another replica registered with our server_id.
	ErrServerIDConflict = errors.New("server_id already used by another replica")
	// ErrTable: the outbox table is missing or lacks a role column.
	ErrTable = errors.New("outbox table unusable")
	// ErrAccess: the user lacks a privilege or cannot log in.
	ErrAccess = errors.New("access denied")
	// ErrDatabase: the database source.dsn names does not exist.
	ErrDatabase = errors.New("unknown database")
	// ErrUnsupported: the binlog holds something this source cannot turn
	// into outbox events safely (e.g. an XA PREPARE with outbox rows).
	ErrUnsupported = errors.New("unsupported binlog content")
)

// Errors are classified where they arise with the connector's one
// classification (outboxcdc.Transient, outboxcdc.Permanent with a hint):
// Run reconnects after a transient error and returns any other.
func transient(err error) error { return outboxcdc.Transient(err) }

// MySQL/MariaDB server error codes this source reacts to.
const (
	erAccessDenied       = 1045 // ER_ACCESS_DENIED_ERROR
	erDBAccessDenied     = 1044 // ER_DBACCESS_DENIED_ERROR
	erBadDB              = 1049 // ER_BAD_DB_ERROR
	erSpecificAccess     = 1227 // ER_SPECIFIC_ACCESS_DENIED_ERROR
	erTableAccess        = 1142 // ER_TABLEACCESS_DENIED_ERROR
	erMasterFatalReading = 1236 // ER_MASTER_FATAL_ERROR_READING_BINLOG
	erSlaveSameID        = 4052 // MariaDB ER_SLAVE_SAME_ID
	erServerShutdown     = 1053 // ER_SERVER_SHUTDOWN
	erConnKilled         = 1927 // MariaDB ER_CONNECTION_KILLED
	erQueryInterrupted   = 1317 // ER_QUERY_INTERRUPTED
	erTooManyConns       = 1040 // ER_CON_COUNT_ERROR
	erUserConns          = 1203 // ER_TOO_MANY_USER_CONNECTIONS
	erLockWait           = 1205 // ER_LOCK_WAIT_TIMEOUT
	erDeadlock           = 1213 // ER_LOCK_DEADLOCK
)

// serverCode returns the server error code carried by err, from either
// go-mysql or go-sql-driver, or 0.
func serverCode(err error) (uint16, string) {
	var me *mysql.MyError
	if errors.As(err, &me) {
		return me.Code, me.Message
	}
	var de *mysqldriver.MySQLError
	if errors.As(err, &de) {
		return de.Number, de.Message
	}
	return 0, ""
}

// classifyDumpErr classifies a failed binlog dump. MariaDB answers
// COM_BINLOG_DUMP from a user without REPLICATION SLAVE with "access
// denied" (1045), the code of a wrong password; the dump comes after the
// source's queries have logged in, so the missing grant is named first.
func classifyDumpErr(err error) error {
	if code, _ := serverCode(err); code == erAccessDenied {
		return joinSentinel(ErrAccess, err, "the server refused the binlog dump: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO <user> (MariaDB 10.5+: also BINLOG MONITOR); if the password changed meanwhile, fix it in source.dsn")
	}
	return classifyConnErr(err)
}

// classifyConnErr classifies an error from talking to the server (metadata
// queries, registering as a replica, reading the stream). Known permanent
// server errors are wrapped with their sentinel; network failures and
// server shutdowns are transient. Decoding errors are permanent: the same
// bytes would fail again.
func classifyConnErr(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err // Run's context: the caller sees ctx.Err() and stops
	}
	if outboxcdc.IsClassified(err) || isSentinel(err) {
		return err
	}
	// A call's own deadline (every query runs under Source.callTimeout), a
	// dial or read timing out against a host that drops packets: the
	// server did not answer in time, which reconnecting with backoff may
	// cure, like a refused connection.
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return transient(err)
	}
	code, msg := serverCode(err)
	switch code {
	case 0:
	case erAccessDenied:
		return joinSentinel(ErrAccess, err, "the server refused the login: check the user and password in source.dsn, and that the user may connect from this host")
	case erDBAccessDenied:
		return joinSentinel(ErrAccess, err, "the user has no access to the database named in source.dsn: GRANT SELECT ON <database>.<outbox table> TO <user>, or fix the database in source.dsn")
	case erBadDB:
		return joinSentinel(ErrDatabase, err, "the database named in source.dsn does not exist on this server: fix the database in source.dsn, or point it at the server that holds the outbox")
	case erSpecificAccess:
		return joinSentinel(ErrAccess, err, "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO <user> (MariaDB 10.5+: also BINLOG MONITOR)")
	case erTableAccess:
		return joinSentinel(ErrAccess, err, "GRANT SELECT ON <database>.<outbox table> TO <user>")
	case erSlaveSameID:
		return joinSentinel(ErrServerIDConflict, err, "another replica or connector uses this server_id: give each connector its own server_id (or a unique connector name)")
	case erMasterFatalReading:
		if strings.Contains(msg, "same server_uuid/server_id") || strings.Contains(msg, "same server_id") {
			return joinSentinel(ErrServerIDConflict, err, "give each connector its own server_id (or a unique connector name)")
		}
		return joinSentinel(ErrPositionGone, err, "the checkpoint's binlog was purged or this server lacks its history; "+positionGoneHint)
	case erServerShutdown, erConnKilled, erQueryInterrupted, erTooManyConns, erUserConns, erLockWait, erDeadlock:
		return transient(err)
	default:
		return err
	}
	var ee *replication.EventError
	if errors.As(err, &ee) {
		return err // undecodable event: the same bytes would fail again
	}
	if tlsconf.IsVerifyError(err) || errors.Is(err, mysqldriver.ErrNoTLS) {
		return joinSentinel(ErrTLS, err, "check source.tls (mode, ca_file, server_name) against the server's certificate")
	}
	// No server error code: the connection broke (EOF, reset, refused,
	// read timeout, go-mysql's own wrappers). Reconnecting with backoff is
	// the right answer to all of them.
	return transient(err)
}

// missingTable is ErrTable for a table the server does not show the user.
func missingTable(qualified string) error {
	return joinSentinel(ErrTable, fmt.Errorf("table %s does not exist (or the user may not SELECT it)", qualified),
		"create it, or fix source.table(s) or the database in source.dsn")
}

// missingColumns is ErrTable for a table that lacks role columns.
func missingColumns(qualified string, missing, have []string) error {
	return joinSentinel(ErrTable, fmt.Errorf("table %s has no column %s (its columns: %s), which the route preset needs",
		qualified, strings.Join(missing, ", "), strings.Join(have, ", ")), "change the table or the route preset")
}

func isSentinel(err error) bool {
	for _, s := range []error{ErrServerSettings, ErrPositionGone, ErrServerIDConflict, ErrTable, ErrAccess, ErrDatabase, ErrUnsupported, ErrTLS, ErrSchema} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// joinSentinel marks cause permanent, wrapping sentinel for errors.Is, with
// the remedy as its hint: "sentinel: cause (hint)".
func joinSentinel(sentinel, cause error, hint string) error {
	return outboxcdc.Permanent(fmt.Errorf("%w: %w", sentinel, cause), hint)
}
