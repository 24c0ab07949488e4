package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/pveformat"
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
func DecodeSSHKeys(encoded string) ([]string, error) { return pveformat.DecodeSSHKeys(encoded) }
