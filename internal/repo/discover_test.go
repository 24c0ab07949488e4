package repo_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/repo"
)

func TestDiscoverFindsTheNearestGitEntryUpward(t *testing.T) {
	outer := t.TempDir()
	inner := filepath.Join(outer, "nested", "work")
	deep := filepath.Join(inner, "vm", "base")
	if err := os.MkdirAll(filepath.Join(outer, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	// A linked work tree has a .git file, not a directory.
	if err := os.WriteFile(filepath.Join(inner, ".git"), []byte("gitdir: /elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{deep: inner, inner: inner, filepath.Join(outer, "nested"): outer, outer: outer} {
		got, err := repo.Discover(dir)
		if err != nil || got != want {
			t.Errorf("Discover(%s) = %s, %v; want %s", dir, got, err, want)
		}
	}
}

func TestDiscoverOutsideARepositoryExplainsWhatToDo(t *testing.T) {
	dir := t.TempDir()
	if _, err := os.Stat("/.git"); err == nil {
		t.Skip("the file system root is a repository")
	}
	_, err := repo.Discover(dir)
	if err == nil || !strings.Contains(err.Error(), "no ProxOps GitOps repository found") || !strings.Contains(err.Error(), "--repo") {
		t.Errorf("Discover() error = %v", err)
	}
}
