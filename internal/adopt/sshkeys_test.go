package adopt_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
)

// Live SSH keys become ssh-key-refs only when every live key is an entry of the secrets file (the smallest
// such set of entries, in reference order); otherwise, or without a secrets file, PVE keeps them.
func TestSSHKeysBecomeRefsOnlyWhenEveryKeyIsInTheSecretsFile(t *testing.T) {
	store := keyStore{"a": "ssh-ed25519 AAAA a@x", "b": "ssh-ed25519 BBBB b@x", "b-copy": "ssh-ed25519 BBBB b@x", "c": "ssh-ed25519 CCCC c@x"}
	digest := func(keys ...string) string { return inventory.SSHKeysDigest(keys) }
	for _, tc := range []struct {
		name  string
		live  string
		store adopt.KeyStore
		refs  []string
		keys  []string
	}{
		{"one key", digest("ssh-ed25519 AAAA a@x"), store, []string{"cloud-init.ssh-keys.a"}, nil},
		{"two keys", digest("ssh-ed25519 CCCC c@x", "ssh-ed25519 AAAA a@x"), store, []string{"cloud-init.ssh-keys.a", "cloud-init.ssh-keys.c"}, nil},
		{"a duplicate entry", digest("ssh-ed25519 BBBB b@x"), store, []string{"cloud-init.ssh-keys.b"}, nil},
		{"a key outside the file", digest("ssh-ed25519 AAAA a@x", "ssh-ed25519 ZZZZ z@x"), store, nil, []string{"*"}},
		{"no secrets file", digest("ssh-ed25519 AAAA a@x"), nil, nil, []string{"*"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := guestOn("pve1", 100, inventory.QEMU, append(vmLines("web"), "sshkeys: "+tc.live)...)
			in := adopt.Input{Cluster: "lab", Observed: oneNode(g)}
			if tc.store != nil {
				in.Keys = tc.store
			}
			res, err := adopt.Adopt(in)
			if err != nil {
				t.Fatal(err)
			}
			ci := res.Manifests[0].Resource.VM().CloudInitData
			if d := cmp.Diff(tc.refs, ci.SSHKeyRefs); d != "" {
				t.Errorf("ssh-key-refs (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.keys, ci.SSHKeys); d != "" {
				t.Errorf("ssh-keys (-want +got):\n%s", d)
			}
			if !res.Manifests[0].Complete() {
				t.Errorf("INCOMPLETE: %v", res.Manifests[0].Incomplete)
			}
		})
	}
}
