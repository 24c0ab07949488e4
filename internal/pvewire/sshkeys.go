package pvewire

import (
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
)

// EncodeSSHKeys produces the sshkeys value PVE wants: the keys, each trimmed, duplicates dropped, in order,
// joined with newlines, then percent-encoded keeping only RFC 3986 unreserved characters (A-Z a-z 0-9 - . _
// ~), with upper-case hex and %20 for a space (never '+'). PVE validates the decoded value and stores the
// encoded one.
func EncodeSSHKeys(keys []string) string {
	var lines []string
	for _, k := range keys {
		k = strings.TrimSpace(k)
		if k != "" && !slices.Contains(lines, k) {
			lines = append(lines, k)
		}
	}
	return PercentEncode(strings.Join(lines, "\n"))
}

// PercentEncode escapes every byte outside the RFC 3986 unreserved set as %XX with upper-case hex.
func PercentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) * 3 / 2)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

func unreserved(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// DecodeSSHKeys decodes a live sshkeys value into key lines (PVE's uri_unescape: '+' stays '+').
func DecodeSSHKeys(encoded string) ([]string, error) { return inventory.DecodeSSHKeys(encoded) }

// sshKeysDigestPrefix starts every digest inventory.SSHKeysDigest makes.
const sshKeysDigestPrefix = "sha256:"

// LiveSSHKeysDigest returns the digest of a live sshkeys value: inventories already carry the digest; a raw
// percent-encoded value (from a config read directly) is decoded and digested. An undecodable value gives
// a digest that matches nothing.
func LiveSSHKeysDigest(v string) string {
	if strings.HasPrefix(v, sshKeysDigestPrefix) {
		return v
	}
	keys, err := DecodeSSHKeys(v)
	if err != nil {
		return "undecodable"
	}
	return inventory.SSHKeysDigest(keys)
}
