package watcher_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/testcorpus"
	"github.com/proxops/proxops/services/watcher"
)

// copyCorpus copies the predecessor's example repository into dir.
func copyCorpus(t testing.TB, dir string) {
	t.Helper()
	src := testcorpus.Dir("upstream-examples")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func paths(snap watcher.TreeSnapshot) []string {
	var out []string
	for _, f := range snap.Files {
		out = append(out, f.Path)
	}
	return out
}

// corpusManifests are the files of the example repository that belong to a snapshot.
var corpusManifests = []string{
	"clusters/example/config.yaml",
	"clusters/example/resources.yaml",
	"clusters/example/secrets.sops.yaml",
	"ctt/base/golden-base.yaml",
	"diskimage/base/debian-13-cloud.yaml",
	"iso/base/base-iso.yaml",
	"lxc/example/cache-01.yaml",
	"proxops.yaml",
	"templatect/example/debian-tpl.yaml",
	"templatevm/example/almalinux-tpl.yaml",
	"vm/example/app-vm.yaml",
	"vm/example/clone-vm.yaml",
	"vm/example/cloudinit-vm.yaml",
	"vm/example/gpu-passthrough-01.yaml",
	"vm/example/sops-cloudinit-01.yaml",
	"vm/example/talos-worker-01.yaml",
}

func TestSnapshotBranchReadsTheCommittedManifests(t *testing.T) {
	repo := newWorkRepo(t, t.TempDir())
	copyCorpus(t, repo.dir)
	if err := os.Symlink("app-vm.yaml", filepath.Join(repo.dir, "vm/example/link.yaml")); err != nil {
		t.Fatal(err)
	}
	commit := repo.commit("example repository")
	repo.write("vm/example/app-vm.yaml", "uncommitted\n")
	repo.write("vm/example/new.yaml", "uncommitted\n")
	before := fingerprint(t, repo.dir)

	for _, p := range []string{repo.dir, filepath.Join(repo.dir, "vm", "example"), filepath.Join(repo.dir, ".git")} {
		snap, err := watcher.SnapshotBranch(t.Context(), p, "main")
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if diff := cmp.Diff(corpusManifests, paths(snap)); diff != "" {
			t.Errorf("%s: paths (-want +got):\n%s", p, diff)
		}
		if snap.Commit != commit || snap.Tree != repo.treeOf(commit) {
			t.Errorf("%s: snapshot of commit %s tree %s, want %s %s", p, snap.Commit, snap.Tree, commit, repo.treeOf(commit))
		}
		want, _ := os.ReadFile(filepath.Join(testcorpus.Dir("upstream-examples"), "vm/example/app-vm.yaml"))
		if got := fileContent(snap, "vm/example/app-vm.yaml"); got != string(want) {
			t.Errorf("%s: app-vm.yaml is not the committed content: %q", p, got)
		}
	}
	head, err := watcher.SnapshotBranch(t.Context(), repo.dir, "")
	if err != nil || head.Commit != commit {
		t.Errorf("snapshot of HEAD: commit %s, error %v", head.Commit, err)
	}
	if _, err := watcher.SnapshotBranch(t.Context(), repo.dir, "absent"); err == nil {
		t.Error("snapshot of an absent branch succeeded")
	}
	if diff := cmp.Diff(before, fingerprint(t, repo.dir)); diff != "" {
		t.Errorf("snapshotting changed the repository (-before +after):\n%s", diff)
	}
}

func TestSnapshotWorktreeReadsFilesAsTheyAreOnDisk(t *testing.T) {
	repo := newWorkRepo(t, t.TempDir())
	copyCorpus(t, repo.dir)
	repo.commit("example repository")
	repo.write("vm/example/app-vm.yaml", "edited, not committed\n")
	repo.write("vm/example/new.yaml", "kind: VM\n")
	repo.write(".gitignore", "*.dec.yaml\n")
	repo.write("clusters/example/secrets.dec.yaml", "decrypted: do not ship\n")
	repo.write("vm/.gitignore", "scratch/\n")
	repo.write("vm/scratch/tmp.yaml", "scratch\n")
	repo.write("lxc/example/.git/HEAD", "nested repository\n")
	if err := os.Symlink("app-vm.yaml", filepath.Join(repo.dir, "vm/example/link.yaml")); err != nil {
		t.Fatal(err)
	}

	snap, err := watcher.SnapshotWorktree(t.Context(), repo.dir)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{}, corpusManifests...)
	want = append(want, "vm/.gitignore", "vm/example/new.yaml")
	slices.Sort(want)
	if diff := cmp.Diff(want, paths(snap)); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
	if got := fileContent(snap, "vm/example/app-vm.yaml"); got != "edited, not committed\n" {
		t.Errorf("app-vm.yaml = %q, want the work tree's", got)
	}
	if snap.Commit != "" || !event.ValidTreeName(snap.Tree) {
		t.Errorf("snapshot commit %q tree %q, want no commit and a content hash", snap.Commit, snap.Tree)
	}

	again, err := watcher.SnapshotWorktree(t.Context(), repo.dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Tree != snap.Tree {
		t.Errorf("the same files were named %s then %s", snap.Tree, again.Tree)
	}
	repo.write("vm/example/new.yaml", "kind: VM\nchanged: true\n")
	changed, err := watcher.SnapshotWorktree(t.Context(), repo.dir)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Tree == snap.Tree {
		t.Error("a changed file kept the snapshot's name")
	}
	if got := event.TreeName(changed.Files); got != changed.Tree {
		t.Errorf("TreeName = %s, snapshot name %s", got, changed.Tree)
	}
}

func TestSnapshotRefusesOversizedFiles(t *testing.T) {
	repo := newWorkRepo(t, t.TempDir())
	seed(repo)
	repo.write("vm/base/huge.yaml", strings.Repeat("x", watcher.MaxSnapshotFileSize+1))
	repo.commit("a file too large")
	if _, err := watcher.SnapshotBranch(t.Context(), repo.dir, "main"); !errors.Is(err, watcher.ErrSnapshotTooLarge) {
		t.Errorf("committed snapshot: %v, want ErrSnapshotTooLarge", err)
	}
	if _, err := watcher.SnapshotWorktree(t.Context(), repo.dir); !errors.Is(err, watcher.ErrSnapshotTooLarge) {
		t.Errorf("work tree snapshot: %v, want ErrSnapshotTooLarge", err)
	}
}

func TestIsManifestPath(t *testing.T) {
	for p, want := range map[string]bool{
		"proxops.yaml": true, "vm/base/a.yaml": true, "vm/a.yaml": true, "clusters/lab/secrets.sops.yaml": true,
		"templatect/x/y.yaml": true, "diskimage/base/d.yaml": true,
		"README.md": false, "vm": false, "vm/": false, "docs/vm/a.yaml": false, "proxops.yml": false, "vms/a.yaml": false,
	} {
		if got := watcher.IsManifestPath(p); got != want {
			t.Errorf("IsManifestPath(%q) = %v, want %v", p, got, want)
		}
	}
}

// CurrentBranch names the branch HEAD points to, from the work tree or a directory below it, and refuses a
// detached HEAD.
func TestCurrentBranchNamesTheCheckedOutBranch(t *testing.T) {
	repo := newWorkRepo(t, t.TempDir())
	repo.write("vm/lab/a.yaml", "a\n")
	commit := repo.commit("first")
	for _, p := range []string{repo.dir, filepath.Join(repo.dir, "vm")} {
		if b, err := watcher.CurrentBranch(p); err != nil || b != "main" {
			t.Errorf("%s: branch %q, err %v", p, b, err)
		}
	}
	runGit(t, repo.dir, "checkout", "-q", "-b", "release/2026")
	if b, err := watcher.CurrentBranch(repo.dir); err != nil || b != "release/2026" {
		t.Errorf("branch %q, err %v", b, err)
	}
	runGit(t, repo.dir, "checkout", "-q", "--detach", commit)
	if _, err := watcher.CurrentBranch(repo.dir); err == nil || !strings.Contains(err.Error(), "detached") {
		t.Errorf("detached HEAD: err %v", err)
	}
}
