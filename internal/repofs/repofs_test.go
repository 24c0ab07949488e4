package repofs_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/proxops/proxops/internal/repofs"
)

const secret = "AGE-SECRET-KEY-1QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7LQPZRY9X8GF2TVDW0S3JN54K"

// layout builds a repository at <tmp>/repo and a secret file at <tmp>/outside/key.txt; links maps a path
// in the repository to a link target.
func layout(t *testing.T, files map[string]string, links map[string]string) string {
	t.Helper()
	tmp := t.TempDir()
	write(t, filepath.Join(tmp, "outside", "key.txt"), secret)
	root := filepath.Join(tmp, "repo")
	for p, content := range files {
		write(t, filepath.Join(root, p), content)
	}
	for p, target := range links {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, root string) *repofs.FS {
	t.Helper()
	f, err := repofs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestLinksLeavingTheRepositoryAreRefusedWithTheirPath(t *testing.T) {
	root := layout(t, map[string]string{
		"shared/web.yaml": "kind: VM\n",
		".git/config":     "[remote]\nurl = https://user:tok@example.invalid\n",
	}, map[string]string{
		"vm/lab/up.yaml":       "../../../outside/key.txt",
		"vm/lab/git.yaml":      "../../.git/config",
		"vm/lab/via-link.yaml": "up.yaml",
	})
	// An absolute link is refused even when it names a file inside the repository.
	if err := os.Symlink(filepath.Join(root, "shared", "web.yaml"), filepath.Join(root, "vm", "lab", "abs.yaml")); err != nil {
		t.Fatal(err)
	}
	f := open(t, root)
	for name, want := range map[string]string{
		"vm/lab/up.yaml":       "symbolic link vm/lab/up.yaml leads outside the repository: not followed",
		"vm/lab/abs.yaml":      "symbolic link vm/lab/abs.yaml is absolute: not followed",
		"vm/lab/git.yaml":      "symbolic link vm/lab/git.yaml leads into the .git directory: not followed",
		"vm/lab/via-link.yaml": "symbolic link vm/lab/up.yaml leads outside the repository: not followed",
	} {
		for op, call := range map[string]func() error{
			"ReadFile": func() error { _, err := fs.ReadFile(f, name); return err },
			"Stat":     func() error { _, err := fs.Stat(f, name); return err },
			"Open":     func() error { _, err := f.Open(name); return err },
		} {
			err := call()
			var le *repofs.LinkError
			if !errors.As(err, &le) || !errors.Is(err, repofs.ErrLinkRefused) {
				t.Fatalf("%s(%s) = %v, want a LinkError", op, name, err)
			}
			if err.Error() != want {
				t.Errorf("%s(%s) = %q, want %q", op, name, err, want)
			}
			if strings.Contains(err.Error(), "outside/key.txt") || strings.Contains(err.Error(), root) {
				t.Errorf("%s(%s) names the target: %q", op, name, err)
			}
		}
	}
}

func TestLinksToFilesInsideTheRepositoryAreFollowed(t *testing.T) {
	root := layout(t, map[string]string{"shared/web.yaml": "kind: VM\n"}, map[string]string{
		"vm/lab/web.yaml":  "../../shared/web.yaml",
		"vm/lab/web2.yaml": "web.yaml",
		"proxops.yaml":     "./shared/../shared/web.yaml",
	})
	f := open(t, root)
	for _, name := range []string{"vm/lab/web.yaml", "vm/lab/web2.yaml", "proxops.yaml"} {
		data, err := fs.ReadFile(f, name)
		if err != nil || string(data) != "kind: VM\n" {
			t.Errorf("ReadFile(%s) = %q, %v", name, data, err)
		}
		if info, err := fs.Stat(f, name); err != nil || !info.Mode().IsRegular() {
			t.Errorf("Stat(%s) = %v, %v", name, info, err)
		}
	}
	entries, err := fs.ReadDir(f, "vm/lab")
	if err != nil || len(entries) != 2 || entries[0].Type()&fs.ModeSymlink == 0 {
		t.Errorf("ReadDir lists links as links: %v, %v", entries, err)
	}
}

func TestLinksToDirectoriesAndLoopsAreRefused(t *testing.T) {
	root := layout(t, map[string]string{"shared/web.yaml": "kind: VM\n"}, map[string]string{
		"vm/linked":   "../shared",
		"vm/up.yaml":  "..",
		"vm/dot.yaml": "../shared/..",
		"vm/a.yaml":   "b.yaml",
		"vm/b.yaml":   "a.yaml",
	})
	f := open(t, root)
	for name, want := range map[string]string{
		"vm/linked/web.yaml": "symbolic link vm/linked leads to a directory: not followed",
		"vm/linked":          "symbolic link vm/linked leads to a directory: not followed",
		"vm/up.yaml":         "symbolic link vm/up.yaml leads to a directory: not followed",
		"vm/dot.yaml":        "symbolic link vm/dot.yaml leads to a directory: not followed",
		"vm/a.yaml":          "ends a chain of too many links",
	} {
		_, err := fs.ReadFile(f, name)
		if !errors.Is(err, repofs.ErrLinkRefused) || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadFile(%s) = %v, want %q", name, err, want)
		}
	}
}

func TestMissingFilesAndDanglingLinksAreNotExist(t *testing.T) {
	root := layout(t, nil, map[string]string{"vm/gone.yaml": "nowhere.yaml"})
	f := open(t, root)
	for _, name := range []string{"vm/missing.yaml", "vm/gone.yaml", "clusters"} {
		if _, err := fs.ReadFile(f, name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadFile(%s) = %v, want not exist", name, err)
		}
	}
}

func TestWorkTreeWithoutLinksIsAnOrdinaryFS(t *testing.T) {
	root := layout(t, map[string]string{"proxops.yaml": "{}\n", "vm/lab/web.yaml": "kind: VM\n"}, nil)
	if err := fstest.TestFS(open(t, root), "proxops.yaml", "vm/lab/web.yaml"); err != nil {
		t.Fatal(err)
	}
}

func TestOnlyLinksToDirectoriesMatchErrLinkToDirectory(t *testing.T) {
	root := layout(t, map[string]string{"shared/web.yaml": "kind: VM\n"}, map[string]string{
		"vm/linked": "../shared",
		"vm/up":     "../../outside",
	})
	f := open(t, root)
	if _, err := f.Resolve("vm/linked"); !errors.Is(err, repofs.ErrLinkToDirectory) {
		t.Errorf("link to a directory inside: %v", err)
	}
	if _, err := f.Resolve("vm/up"); !errors.Is(err, repofs.ErrLinkRefused) || errors.Is(err, repofs.ErrLinkToDirectory) {
		t.Errorf("link to a directory outside: %v, want refused as leaving the repository", err)
	}
}
