package repo_test

import (
	"runtime"
	"testing"

	"github.com/proxops/proxops/internal/repo"
)

// A parsed repository holds a few times its own bytes: the decoded manifests, the position of each of their
// fields, and the dependency graph. (With every manifest's positions in a map of their own it held 8.4
// times the bytes of this repository.)
func TestParsedRepositoryHoldsAFewTimesItsBytes(t *testing.T) {
	fsys := syntheticRepo(2000)
	size := 0
	for _, f := range fsys {
		size += len(f.Data)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := repo.Load(fsys)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(r.Cluster("bench").Resources) != 2002 || r.AllDiagnostics().HasErrors() {
		t.Fatal("the synthetic repository did not load cleanly")
	}
	held := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	ratio := held / float64(size)
	t.Logf("%d bytes of YAML held in %.1f MB: %.1f times", size, held/1e6, ratio)
	if ratio > 5 {
		t.Errorf("the parsed repository holds %.1f times its bytes, want at most 5", ratio)
	}
	runtime.KeepAlive(r)
}
