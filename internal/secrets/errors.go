package secrets

import (
	"errors"
	"fmt"

	"github.com/proxops/proxops/internal/diag"
)

// Class says what kind of failure a secrets error is, so callers can map it (reject the cluster's plan,
// report it, retry after the operator fixed the key file) without parsing messages.
type Class int

const (
	// ClassFileMissing: the cluster names a secrets file that does not exist.
	ClassFileMissing Class = iota + 1
	// ClassNotEncrypted: the file has no sops metadata (a plain YAML file).
	ClassNotEncrypted
	// ClassNoKey: no age identity is available, or none of them (and no other SOPS key backend) can decrypt
	// the file's data key.
	ClassNoKey
	// ClassTampered: a value or the MAC does not authenticate; the file was changed after encryption.
	ClassTampered
	// ClassMalformed: not YAML, neither secrets: nor cloud-init:, a non-scalar leaf, a bad name or SSH key.
	ClassMalformed
	// ClassMissingEntry: a referenced entry is absent or empty.
	ClassMissingEntry
	// ClassBadReference: a reference is not of the form cloud-init.ssh-keys.<name> or
	// cloud-init.passwords.<name>.
	ClassBadReference
	// ClassNoCredentials: after resolution a cluster has no usable PVE credentials.
	ClassNoCredentials
)

// Sentinels for errors.Is, one per Class.
var (
	ErrFileMissing   = errors.New("secrets file missing")
	ErrNotEncrypted  = errors.New("secrets file not encrypted")
	ErrNoKey         = errors.New("no key can decrypt the secrets file")
	ErrTampered      = errors.New("secrets file fails its integrity check")
	ErrMalformed     = errors.New("malformed secrets document")
	ErrMissingEntry  = errors.New("referenced secret missing or empty")
	ErrBadReference  = errors.New("malformed secret reference")
	ErrNoCredentials = errors.New("no effective PVE credentials")
)

// classes names each class (stable and lower-case, for metrics labels and logs) and gives its sentinel.
var classes = map[Class]struct {
	name     string
	sentinel error
}{
	ClassFileMissing:   {"file-missing", ErrFileMissing},
	ClassNotEncrypted:  {"not-encrypted", ErrNotEncrypted},
	ClassNoKey:         {"no-key", ErrNoKey},
	ClassTampered:      {"tampered", ErrTampered},
	ClassMalformed:     {"malformed", ErrMalformed},
	ClassMissingEntry:  {"missing-entry", ErrMissingEntry},
	ClassBadReference:  {"bad-reference", ErrBadReference},
	ClassNoCredentials: {"no-credentials", ErrNoCredentials},
}

// String returns a stable, lower-case name for the class (for metrics labels and logs).
func (c Class) String() string {
	if k, ok := classes[c]; ok {
		return k.name
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Error is every failure this package reports. Its text names the file, the position in it, the entry and the
// field that referenced it; it never contains a decrypted value, and never repeats SOPS' own error text (which
// can carry key or value material): Message is always written by this package.
type Error struct {
	Class Class
	// File is the secrets file as the caller named it (repository-relative, slash-separated).
	File string
	// Line and Column locate the problem in File (1-based; 0 when unknown).
	Line, Column int
	// Entry is the entry concerned, as a dotted path: secrets.<name>, cloud-init.ssh-keys.<name>,
	// cloud-init.passwords.<name>.
	Entry string
	// Field is the configuration or manifest field that referenced Entry, when known (for example
	// pve.clusters.lab.secrets.pve.token or spec.cloud-init-data.ssh-key-refs[0]).
	Field string
	// Message says what is wrong, in this package's words.
	Message string
}

// Error renders file:line:col: field: entry: message, leaving out the unknown parts.
func (e *Error) Error() string {
	return diag.Text(e.File, e.Line, e.Column, []string{e.Field, e.Entry}, e.Message)
}

// Is makes errors.Is(err, ErrNoKey) and the other sentinels work.
func (e *Error) Is(target error) bool {
	k, ok := classes[e.Class]
	return ok && k.sentinel == target
}

// Diagnostic converts the error into a repository diagnostic positioned in the secrets file.
func (e *Error) Diagnostic() diag.Diagnostic {
	msg := e.Message
	if e.Entry != "" {
		msg = e.Entry + ": " + msg
	}
	return diag.Diagnostic{
		Severity: diag.Error,
		File:     e.File,
		Line:     e.Line,
		Column:   e.Column,
		Field:    e.Field,
		Message:  msg,
	}
}

// ClassOf returns the class of the first *Error in err's chain, or 0 when there is none.
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return 0
}

// WithField returns err with Field set on every *Error it holds that has none yet (errors joined with
// errors.Join included), so a caller can say which field referenced a lookup that failed. Other errors are
// returned unchanged.
func WithField(err error, field string) error {
	if err == nil || field == "" {
		return err
	}
	// The tree is walked by hand (an *Error itself, or the parts of errors.Join), because each *Error found is
	// replaced by a copy: errors.As would find one below a wrapper that this cannot rebuild.
	if e, ok := err.(*Error); ok { //nolint:errorlint // replaces the value at this level, see above
		if e.Field != "" {
			return e
		}
		c := *e
		c.Field = field
		return &c
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts := j.Unwrap()
		out := make([]error, len(parts))
		for i, p := range parts {
			out[i] = WithField(p, field)
		}
		return errors.Join(out...)
	}
	return err
}

// MissingFileError reports that a cluster's secrets file does not exist, for callers that read the file
// themselves (from a git tree, say) and found nothing.
func MissingFileError(file string) error {
	return &Error{Class: ClassFileMissing, File: file,
		Message: "secrets file does not exist; add it or remove secrets-file from the cluster's config"}
}
