package outboxcdc

// CheckResult is one line of the preflight `outbox-cdc check`: what was
// checked, its status, what was found, and how to fix a failure (or, for a
// warning, how to settle what could not be proven). Packages that can
// check their own prerequisites return a slice of these; cmd prints them
// (text or JSON) and exits non-zero if any failed.
//
// Status is one of three: pass (proven to work), warn (could not be
// proven from here either way; run may work or fail), fail (run will
// fail or lose something). OK is false only for a failure, so a warning
// does not change the exit status.
type CheckResult struct {
	// Connector is the connector checked; cmd sets it.
	Connector string      `json:"connector,omitempty"`
	Name      string      `json:"name"`
	Status    CheckStatus `json:"status"`
	OK        bool        `json:"ok"`
	Detail    string      `json:"detail,omitempty"`
	Fix       string      `json:"fix,omitempty"`
}

// CheckStatus is a CheckResult's verdict, as printed ("PASS") and in JSON
// ("pass").
type CheckStatus string

const (
	CheckPass CheckStatus = "pass"
	CheckWarn CheckStatus = "warn"
	CheckFail CheckStatus = "fail"
)

// Pass, Warn and Fail build results. A warning's fix says how to prove
// what could not be (or how to make it certain).
func Pass(name, detail string) CheckResult {
	return CheckResult{Name: name, Status: CheckPass, OK: true, Detail: detail}
}

func Warn(name, detail, fix string) CheckResult {
	return CheckResult{Name: name, Status: CheckWarn, OK: true, Detail: detail, Fix: fix}
}

func Fail(name, detail, fix string) CheckResult {
	return CheckResult{Name: name, Status: CheckFail, Detail: detail, Fix: fix}
}

// Warned reports whether r is a warning.
func (r CheckResult) Warned() bool { return r.Status == CheckWarn }
