// Package testcorpus locates the third-party test corpora under testdata/corpus at the repository root, so
// tests in any module of the workspace can read them.
package testcorpus

import (
	"path/filepath"
	"runtime"
)

// Dir returns the absolute path of testdata/corpus/<name> (qemu-server, pve-container, upstream-examples).
func Dir(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "corpus", name)
}
