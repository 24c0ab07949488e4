package pveformat

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
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

// DecodeSSHKeys decodes PVE's sshkeys value (percent-encoded, lines joined by newlines) into key lines, each
// trimmed, empty lines dropped.
func DecodeSSHKeys(encoded string) ([]string, error) {
	raw, err := PercentDecode(encoded)
	if err != nil {
		return nil, fmt.Errorf("sshkeys: %w", err)
	}
	var keys []string
	for line := range strings.SplitSeq(raw, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			keys = append(keys, line)
		}
	}
	return keys, nil
}

// PercentDecode decodes %XX escapes; unlike url.QueryUnescape it leaves '+' alone, as PVE's uri_unescape does.
func PercentDecode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated escape at offset %d", i)
		}
		v, err := hex.DecodeString(s[i+1 : i+3])
		if err != nil {
			return "", fmt.Errorf("bad escape %q at offset %d", s[i:i+3], i)
		}
		b.WriteByte(v[0])
		i += 2
	}
	return b.String(), nil
}
