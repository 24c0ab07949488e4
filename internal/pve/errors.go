package pve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/proxops/proxops/internal/plan"
)

// Error is a classified failure at the PVE boundary. Every error Apply returns is one.
type Error struct {
	// Class decides what the executor does: retry (nak with backoff), re-plan, or report and terminate.
	Class plan.ErrorClass
	// Lock is the config lock PVE reported ("VM 100 is locked (backup)"): the guest is busy with a long
	// job, so the executor waits for it instead of spending deliveries. LockFileContended stands for
	// "can't lock file … got timeout": another PVE worker held the guest's config file lock.
	Lock string
	// Status is the HTTP status of the answer, 0 for task failures and transport errors.
	Status int
	// UPID and TaskLog are set for a failed task.
	UPID    string
	TaskLog []string
	// Refusal is set when the adapter refused to write to a guest ProxOps does not own (RefusalNotOwned) or
	// that is no longer the guest a claim was planned for (RefusalClaimMismatch): always terminal.
	Refusal string
	Err     error
}

// Refusal reasons of Error.Refusal, also the reason labels of the executor's refused-operations metric.
const (
	RefusalNotOwned      = "not_owned"
	RefusalClaimMismatch = "claim_mismatch"
)

// RefusalOf returns the refusal reason an error carries, if any.
func RefusalOf(err error) (string, bool) {
	var e *Error
	if errors.As(err, &e) && e.Refusal != "" {
		return e.Refusal, true
	}
	return "", false
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ClassOf returns the class of an error: the class of a wrapped *Error, else a classification of err.
func ClassOf(err error) plan.ErrorClass {
	if err == nil {
		return plan.ErrorNone
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return classify(err).Class
}

// LockOf returns the config lock an error reports, if any.
func LockOf(err error) (string, bool) {
	var e *Error
	if errors.As(err, &e) && e.Lock != "" {
		return e.Lock, true
	}
	return "", false
}

// LockFileContended is Error.Lock for PVE's "can't lock file '…' - got timeout": the guest's config file
// lock (an flock, not a `lock:` property) was held by another worker for longer than PVE waits.
const LockFileContended = "lock-file"

var (
	// AbstractConfig.pm lock_file / PVE::Tools lock_file_full: "can't lock file '...' - got timeout".
	reLockTimeout = regexp.MustCompile(`can't lock file '[^']*' - got timeout`)
	// AbstractConfig.pm check_lock: "VM 100 is locked (backup)", "CT 100 is locked (disk)".
	reLocked = regexp.MustCompile(`\b(?:VM|CT) \d+ is locked \(([a-z0-9_-]+)\)`)
	// Digest mismatches (pve-facts §2): qemu config and resize, and PVE::Tools assert_if_modified.
	conflictTexts = []string{
		"checksum mismatch (file change by other user?)",
		"detected modified configuration - file changed by other user?",
	}
	// Failures that mention a timeout but are the guest's doing, not the cluster's: a shutdown the guest
	// ignored (qemu-server vm_shutdown without forceStop) is not retried.
	guestTimeoutTexts = []string{"quit/powerdown failed - got timeout", "--nokill"}
	// 500 answers that are transient: proxying to another node, timeouts, lock contention.
	transientTexts = []string{
		"got timeout", "connection refused", "connection timed out", "no route to host", "temporary failure",
		"broken pipe", "connection reset", "unable to connect", "timeout while", "proxy loop",
	}
)

// classify turns any error from a PVE request or task into an *Error.
func classify(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	out := &Error{Class: plan.ErrorTerminal, Err: err}
	var api *proxmox.APIError
	switch {
	case errors.As(err, &api):
		out.Status = api.StatusCode
		out.Class, out.Lock = classifyAPI(api)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		out.Class = plan.ErrorRetryable
	case errors.As(err, new(*ResponseTooLargeError)):
		// Asking again gets the same answer.
		out.Class = plan.ErrorTerminal
	case isTLSVerification(err):
		// PVE's certificate is not trusted (no ca-file, the wrong one, another host): waiting does not help.
		out.Class = plan.ErrorTerminal
	case isTransport(err):
		out.Class = plan.ErrorRetryable
	default:
		out.Class, out.Lock = classifyText(err.Error(), plan.ErrorTerminal)
	}
	return out
}

func classifyAPI(api *proxmox.APIError) (plan.ErrorClass, string) {
	msg := api.Message + "\n" + api.Status
	switch code := api.StatusCode; {
	case code == 595 || code == 596 || code == 599 || code == 429 || code == 502 || code == 503 || code == 504:
		return plan.ErrorRetryable, ""
	case code == 500:
		// A bare 500 without PVE's message (a proxy, a crashed worker) is transient; PVE's own dies are
		// read by their text.
		if strings.TrimSpace(api.Message) == "" || strings.TrimSpace(api.Message) == "Internal Server Error" {
			return plan.ErrorRetryable, ""
		}
		return classifyText(msg, plan.ErrorTerminal)
	case code >= 500:
		return classifyText(msg, plan.ErrorRetryable)
	}
	// 400 parameter errors, 401, 403, 501 and the rest are refusals: never retried.
	return plan.ErrorTerminal, ""
}

// classifyText classifies a PVE error or task exit text; def is the class when nothing matches.
func classifyText(msg string, def plan.ErrorClass) (plan.ErrorClass, string) {
	if m := reLocked.FindStringSubmatch(msg); m != nil {
		return plan.ErrorRetryable, m[1]
	}
	if reLockTimeout.MatchString(msg) {
		return plan.ErrorRetryable, LockFileContended
	}
	for _, t := range guestTimeoutTexts {
		if strings.Contains(msg, t) {
			return plan.ErrorTerminal, ""
		}
	}
	for _, t := range conflictTexts {
		if strings.Contains(msg, t) {
			return plan.ErrorConflict, ""
		}
	}
	low := strings.ToLower(msg)
	for _, t := range transientTexts {
		if strings.Contains(low, t) {
			return plan.ErrorRetryable, ""
		}
	}
	return def, ""
}

func isTLSVerification(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host)
}

func isTransport(err error) bool {
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// messageOf returns PVE's message for an error (the API message or task exit status), else err's text.
func messageOf(err error) string {
	var api *proxmox.APIError
	if errors.As(err, &api) && api.Message != "" {
		msg := api.Message
		for _, k := range slices.Sorted(maps.Keys(api.Errors)) {
			msg += fmt.Sprintf("; %s: %s", k, api.Errors[k])
		}
		return msg
	}
	var tf *TaskError
	if errors.As(err, &tf) {
		return tf.ExitStatus
	}
	return err.Error()
}

// statusOf returns the HTTP status of an API error, 0 otherwise.
func statusOf(err error) int {
	var api *proxmox.APIError
	if errors.As(err, &api) {
		return api.StatusCode
	}
	return 0
}

// failed wraps err with context and classifies it.
func failed(err error, format string, a ...any) *Error {
	e := classify(err)
	return &Error{Class: e.Class, Lock: e.Lock, Status: e.Status, UPID: e.UPID, TaskLog: e.TaskLog,
		Err: fmt.Errorf(format+": %w", append(a, err)...)}
}

// terminal is a refusal decided by the adapter itself.
func terminal(format string, a ...any) *Error {
	return &Error{Class: plan.ErrorTerminal, Err: fmt.Errorf(format, a...)}
}

// refused is a write to a guest refused for want of ownership (reason: RefusalNotOwned, RefusalClaimMismatch).
func refused(reason, format string, a ...any) *Error {
	return &Error{Class: plan.ErrorTerminal, Refusal: reason, Err: fmt.Errorf(format, a...)}
}

// conflict is a precondition the live guest no longer meets: the plan is stale.
func conflict(format string, a ...any) *Error {
	return &Error{Class: plan.ErrorConflict, Err: fmt.Errorf(format, a...)}
}

// UnexplainedTaskFailure reports whether err is a PVE task that stopped with an error exit status none of
// the known texts explains (not a lock, a guest timeout, a conflict or a transient cluster failure). Such a
// failure is often passing (a worker that died, storage that hiccupped) and sometimes lasting; the executor
// tries the operation once more in place, which re-observes before it sends anything, then reports it.
func UnexplainedTaskFailure(err error) bool {
	var te *TaskError
	if !errors.As(err, &te) || ClassOf(err) != plan.ErrorTerminal {
		return false
	}
	class, _ := classifyText(te.ExitStatus, plan.ErrorNone)
	return class == plan.ErrorNone
}

// NotServed reports whether PVE answered that it does not serve a path (501 Not Implemented: a path this
// PVE version does not have, such as /cluster/ha/rules before PVE 9).
func NotServed(err error) bool {
	return err != nil && statusOf(err) == 501
}
