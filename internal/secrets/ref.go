package secrets

import (
	"fmt"
	"strings"
)

// Section is a block of a secrets document: the flat secrets: block or one of the cloud-init blocks.
type Section string

const (
	// Secrets is the top-level secrets: block: name → scalar (PVE and git credentials).
	Secrets Section = "secrets"
	// SSHKeys is cloud-init.ssh-keys: name → one OpenSSH public-key line.
	SSHKeys Section = "ssh-keys"
	// Passwords is cloud-init.passwords: name → cipassword plaintext.
	Passwords Section = "passwords"
)

// MaxNameLen is the longest name a cloud-init entry may have.
const MaxNameLen = 64

const (
	refPrefix      = "cloud-init."
	secretsPrefix  = "secrets."
	sshKeysPath    = refPrefix + string(SSHKeys) + "."
	passwordsPath  = refPrefix + string(Passwords) + "."
	maxQuotedInput = 80
)

// Ref is a reference to a cloud-init entry, as manifests write it: cloud-init.ssh-keys.<name> or
// cloud-init.passwords.<name>.
type Ref struct {
	Section Section
	Name    string
}

// String returns the reference in manifest form.
func (r Ref) String() string { return refPrefix + string(r.Section) + "." + r.Name }

// ParseRef parses a manifest reference. The error (class ClassBadReference) quotes the reference, which is a
// name, not a value.
func ParseRef(s string) (Ref, error) {
	var r Ref
	switch {
	case strings.HasPrefix(s, sshKeysPath):
		r = Ref{Section: SSHKeys, Name: s[len(sshKeysPath):]}
	case strings.HasPrefix(s, passwordsPath):
		r = Ref{Section: Passwords, Name: s[len(passwordsPath):]}
	default:
		return Ref{}, &Error{Class: ClassBadReference, Message: fmt.Sprintf(
			"reference %s is not of the form cloud-init.ssh-keys.<name> or cloud-init.passwords.<name>", quoteInput(s))}
	}
	if msg := checkName(r.Name); msg != "" {
		return Ref{}, &Error{Class: ClassBadReference, Message: fmt.Sprintf("reference %s: %s", quoteInput(s), msg)}
	}
	return r, nil
}

// ValidName reports whether name is a valid cloud-init entry name: [a-z0-9][a-z0-9-]*, at most 64 characters.
func ValidName(name string) bool { return checkName(name) == "" }

// checkName returns why name is not a valid cloud-init entry name, or "".
func checkName(name string) string {
	if name == "" {
		return "the name is empty"
	}
	if len(name) > MaxNameLen {
		return fmt.Sprintf("the name is longer than %d characters", MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		lowerOrDigit := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !lowerOrDigit && (i == 0 || c != '-') {
			return "the name must match [a-z0-9][a-z0-9-]* (lower-case letters, digits and dashes, not starting with a dash)"
		}
	}
	return ""
}

// quoteInput quotes a name or reference taken from input for a message, shortened so a value pasted by
// mistake into a reference field is not repeated whole.
func quoteInput(s string) string {
	if len(s) > maxQuotedInput {
		return fmt.Sprintf("%q (%d bytes, shortened)", s[:maxQuotedInput/2], len(s))
	}
	return fmt.Sprintf("%q", s)
}
