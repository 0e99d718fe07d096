package binlog

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// The dump lock: every binlog dump connection of a source holds a named
// user lock, DumpLockName(server_id), from before it registers as a replica
// until it closes. The server frees it when the connection ends.
//
// Why: when a second dump with the same server_id starts, MariaDB (and
// MySQL) tell the old dump thread to stop, but only by a flag the thread
// reads between events; a thread blocked writing to a client that reads
// nothing (a frozen process, a stalled sink) stays blocked for up to the
// session's net_write_timeout (dumpWriteTimeout, an hour), and meanwhile
// the new dump receives nothing at all. IS_USED_LOCK names the old
// connection, which KILL CONNECTION ends at once (it shuts the socket).
//
// Whom it kills: only the holder of this server_id's lock, that is, a dump
// connection of a source with the same server_id, which the server would
// end anyway when the new dump starts. With Config.TakeOver (HA: this
// instance holds the HA lock, the old one is fenced) the holder is killed
// at once. Without it, only a holder stuck in a write for dumpStuckAfter is
// killed; a healthy one is left to the server, whose own replacement makes
// the older source stop with ErrServerIDConflict, so two misconfigured
// instances sharing a server_id do not kill each other in turns.

// DumpLockName is the user lock a binlog dump connection with this
// server_id holds. GET_LOCK needs no privilege; killing a holder that
// connected as another user needs CONNECTION ADMIN (MariaDB 10.5+, MySQL
// 8) or SUPER.
func DumpLockName(serverID uint32) string {
	return "outbox-cdc-dump:" + strconv.FormatUint(uint64(serverID), 10)
}

// dumpStuckAfter is how long a holder must stay blocked in a write, without
// Config.TakeOver, before it is killed.
const dumpStuckAfter = 2 * time.Second

const erKillDenied = 1095 // ER_KILL_DENIED_ERROR: not the owner of the thread

// dumpSession prepares the binlog dump connection before it registers as a
// replica: the server keeps the session while the connector does not read
// for up to dumpWriteTimeout (a stalled sink), instead of its default 60 s;
// then it takes the dump lock, ending the previous holder as described
// above. Failing to take the lock is logged, not fatal: the dump then
// starts as it would without the lock.
func (s *Source) dumpSession(c *client.Conn) error {
	if _, err := c.Execute("SET @@SESSION.net_write_timeout = " + strconv.Itoa(int(dumpWriteTimeout/time.Second))); err != nil {
		return err
	}
	name := DumpLockName(s.serverID)
	log := s.log.With().Str("lock", name).Logger()
	got, _, err := queryInt(c, "SELECT GET_LOCK("+sqlString(name)+", 0)")
	if err != nil || got == 1 {
		return err
	}
	holder, null, err := queryInt(c, "SELECT IS_USED_LOCK("+sqlString(name)+")")
	if err != nil {
		return err
	}
	if !null {
		log = log.With().Int64("holder_connection_id", holder).Logger()
		if !s.cfg.TakeOver {
			stuck, err := holderStuck(c, holder)
			if err != nil {
				return err
			}
			if !stuck {
				log.Info().Msg("another binlog dump with this server_id is streaming; starting the dump, the server ends the older one")
				return nil
			}
		}
		if _, err := c.Execute("KILL CONNECTION " + strconv.FormatInt(holder, 10)); err != nil {
			var me *mysql.MyError
			if errors.As(err, &me) && me.Code == erKillDenied {
				log.Warn().Err(err).Msg("cannot end the previous binlog dump with this server_id: it connected as another user; " +
					"grant this user CONNECTION ADMIN (or SUPER), or run every instance as the same user. " +
					"Until the server ends it (net_write_timeout), the new dump may receive nothing")
				return nil
			}
			if !errors.As(err, &me) || me.Code != erNoSuchThread {
				return err
			}
		} else {
			log.Info().Bool("take_over", s.cfg.TakeOver).Msg("ended the previous binlog dump with this server_id")
		}
	}
	wait := max(1, min(5, int(s.cfg.ReadTimeout/time.Second)/2))
	if got, _, err = queryInt(c, "SELECT GET_LOCK("+sqlString(name)+", "+strconv.Itoa(wait)+")"); err != nil {
		return err
	}
	if got != 1 {
		log.Warn().Int("waited_seconds", wait).Msg("the binlog dump lock is still held; starting the dump without it")
	}
	return nil
}

const erNoSuchThread = 1094 // ER_NO_SUCH_THREAD: gone meanwhile

// holderStuck says whether connection id stays in a network write for
// dumpStuckAfter (sampled every 100 ms): a dump whose client reads nothing.
func holderStuck(c *client.Conn, id int64) (bool, error) {
	deadline := time.Now().Add(dumpStuckAfter)
	for {
		r, err := c.Execute("SELECT STATE FROM information_schema.PROCESSLIST WHERE ID = " + strconv.FormatInt(id, 10))
		if err != nil {
			return false, err
		}
		if r.RowNumber() == 0 {
			return false, nil // gone
		}
		state, _ := r.GetString(0, 0)
		if state != "Writing to net" {
			return false, nil
		}
		if time.Now().After(deadline) {
			return true, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// queryInt runs a query returning one integer (or NULL). It takes no
// arguments, so every statement on the dump connection goes in the text
// protocol (go-mysql prepares any Execute with arguments). With the
// prepared form, sourcetest BlockedConsumerNoChurnNoLoss saw an idle
// stream time out and reconnect every read_timeout on MariaDB 10.11 three
// times, and not with this form; later runs of the prepared form passed
// too, so that cause is not proven.
func queryInt(c *client.Conn, q string) (v int64, null bool, err error) {
	r, err := c.Execute(q)
	if err != nil {
		return 0, false, err
	}
	if r.RowNumber() == 0 {
		return 0, true, nil
	}
	if null, err = r.IsNull(0, 0); err != nil || null {
		return 0, null, err
	}
	v, err = r.GetInt(0, 0)
	return v, false, err
}

// sqlString quotes s as an SQL string literal (the names quoted here are
// DumpLockName's: a fixed prefix and digits).
func sqlString(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
}
