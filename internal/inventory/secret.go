package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// CIPasswordPresent replaces a guest's cipassword value in an inventory: PVE only ever shows a mask, and the
// planner only needs to know whether one is set.
const CIPasswordPresent = "<present>"

// SSHKeysDigest returns the digest that stands for a set of OpenSSH public-key lines: each line trimmed,
// empty lines dropped, sorted and deduplicated, then hashed. The executor computes it from the live value and
// the planner from the desired keys (or their secret references), so both compare without carrying keys.
func SSHKeysDigest(keys []string) string {
	norm := make([]string, 0, len(keys))
	for _, k := range keys {
		k = strings.Join(strings.Fields(k), " ")
		if k != "" {
			norm = append(norm, k)
		}
	}
	slices.Sort(norm)
	norm = slices.Compact(norm)
	sum := sha256.Sum256([]byte(strings.Join(norm, "\n")))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// DecodeSSHKeys decodes PVE's sshkeys value (percent-encoded, lines joined by newlines) into key lines.
func DecodeSSHKeys(encoded string) ([]string, error) {
	raw, err := percentDecode(encoded)
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

// percentDecode decodes %XX escapes; unlike url.QueryUnescape it leaves '+' alone, as PVE's uri_unescape does.
func percentDecode(s string) (string, error) {
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
