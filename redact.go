package outboxcdc

import (
	"net/url"
	"strings"
)

// RedactDSN hides the password in a DSN of either form used here:
// go-sql-driver ("user:pass@tcp(host)/db") or URL ("postgres://user:pass@host/db",
// also "password=..." keyword pairs). Anything else is returned unchanged.
func RedactDSN(dsn string) string {
	if strings.Contains(dsn, "://") {
		if u, err := url.Parse(dsn); err == nil && u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			}
			q := u.Query()
			if q.Has("password") {
				q.Set("password", "xxxxx")
				u.RawQuery = q.Encode()
			}
			return u.String()
		}
		return dsn
	}
	if strings.Contains(dsn, "password=") { // libpq keyword/value form
		f := strings.Fields(dsn)
		for i, kv := range f {
			if strings.HasPrefix(kv, "password=") {
				f[i] = "password=xxxxx"
			}
		}
		return strings.Join(f, " ")
	}
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return dsn
	}
	if user, _, ok := strings.Cut(dsn[:at], ":"); ok {
		return user + ":xxxxx" + dsn[at:]
	}
	return dsn
}
