// Package testcorpus locates the test corpora under testdata/corpus at the repository root, so tests in any
// module of the workspace can read them.
package testcorpus

import (
	"path/filepath"
	"runtime"
)

// Dir returns the absolute path of testdata/corpus/<name> (qemu-server, pve-container, field-qemu,
// field-lxc, upstream-examples).
func Dir(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "corpus", name)
}

// GuestCorpus is a corpus of guest config files (/etc/pve/qemu-server/<vmid>.conf or lxc/<vmid>.conf) of
// one guest type.
type GuestCorpus struct {
	// Name is the corpus's directory under testdata/corpus.
	Name string
	// Type is the guest type of its configs: qemu or lxc.
	Type string
	// WrittenByPVE says every file is byte for byte as PVE writes it (the hand-edited fixtures of PVE's
	// own test suites are not).
	WrittenByPVE bool
}

// Guests are the corpora of guest configs: those of PVE's own test suites, and configs in the shapes met on
// real clusters (cloud-init, TPM and EFI disks, PCI and device passthrough, bind mounts, id maps, raw lxc
// keys, privileged containers, snapshots).
var Guests = []GuestCorpus{
	{Name: "qemu-server", Type: "qemu"},
	{Name: "pve-container", Type: "lxc"},
	{Name: "field-qemu", Type: "qemu", WrittenByPVE: true},
	{Name: "field-lxc", Type: "lxc", WrittenByPVE: true},
}
