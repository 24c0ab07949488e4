package repo_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/testcorpus"
)

func seedFiles(f *testing.F, pattern string) {
	paths, _ := filepath.Glob(pattern)
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
}

func checkPositions(t *testing.T, diags diag.List) {
	t.Helper()
	for _, d := range diags {
		if d.Severity == diag.Error && (d.File == "" || d.Line < 1) {
			t.Errorf("error without a position: %s", d)
		}
	}
}

// FuzzParseComposition: a resources.yaml never panics the parser and every error has a position.
func FuzzParseComposition(f *testing.F) {
	seedFiles(f, filepath.Join(testcorpus.Dir("upstream-examples"), "clusters", "*", "resources.yaml"))
	seedFiles(f, filepath.Join("testdata", "broken", "*", "clusters", "*", "resources.yaml"))
	f.Add([]byte("- a\n- [b]\n- {c: d}\n-\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, diags := repo.ParseComposition("clusters/x/resources.yaml", data)
		checkPositions(t, diags)
	})
}

// FuzzParseClusterFile: a clusters/<name>/config.yaml never panics the parser and every error has a position.
func FuzzParseClusterFile(f *testing.F) {
	seedFiles(f, filepath.Join(testcorpus.Dir("upstream-examples"), "clusters", "*", "config.yaml"))
	seedFiles(f, filepath.Join("testdata", "broken", "*", "clusters", "*", "config.yaml"))
	seedFiles(f, filepath.Join(testcorpus.Dir("upstream-examples"), "proxops.yaml"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, diags := repo.ParseClusterFile("clusters/example/config.yaml", "example", data)
		checkPositions(t, diags)
		_, diags = repo.ParseConfigFile("proxops.yaml", data)
		checkPositions(t, diags)
	})
}
