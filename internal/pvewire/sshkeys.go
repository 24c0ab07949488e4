package pvewire

import (
	"strings"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pveformat"
)

// sshKeysDigestPrefix starts every digest inventory.SSHKeysDigest makes.
const sshKeysDigestPrefix = "sha256:"

// LiveSSHKeysDigest returns the digest of a live sshkeys value: inventories already carry the digest; a raw
// percent-encoded value (from a config read directly) is decoded and digested. An undecodable value gives
// a digest that matches nothing.
func LiveSSHKeysDigest(v string) string {
	if strings.HasPrefix(v, sshKeysDigestPrefix) {
		return v
	}
	keys, err := pveformat.DecodeSSHKeys(v)
	if err != nil {
		return "undecodable"
	}
	return inventory.SSHKeysDigest(keys)
}
