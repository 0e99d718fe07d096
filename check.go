package outboxcdc

// CheckResult is one line of the preflight `outbox-cdc check`: what was
// checked, whether it passed, what was found, and how to fix a failure.
// Packages that can check their own prerequisites return a slice of these;
// cmd prints them (text or JSON) and exits non-zero if any failed.
type CheckResult struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

// Pass and Fail build results.
func Pass(name, detail string) CheckResult { return CheckResult{Name: name, OK: true, Detail: detail} }

func Fail(name, detail, fix string) CheckResult {
	return CheckResult{Name: name, Detail: detail, Fix: fix}
}
