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
	"github.com/proxops/proxops/internal/repofs"
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

	// The link to a committed file inside the repository is read as that file, as validate reads it.
	want := append([]string{"vm/example/link.yaml"}, corpusManifests...)
	slices.Sort(want)
	for _, p := range []string{repo.dir, filepath.Join(repo.dir, "vm", "example"), filepath.Join(repo.dir, ".git")} {
		snap, err := watcher.SnapshotBranch(t.Context(), p, "main")
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if diff := cmp.Diff(want, paths(snap)); diff != "" {
			t.Errorf("%s: paths (-want +got):\n%s", p, diff)
		}
		if snap.Commit != commit || snap.Tree != repo.treeOf(commit) {
			t.Errorf("%s: snapshot of commit %s tree %s, want %s %s", p, snap.Commit, snap.Tree, commit, repo.treeOf(commit))
		}
		committed, _ := os.ReadFile(filepath.Join(testcorpus.Dir("upstream-examples"), "vm/example/app-vm.yaml"))
		for _, f := range []string{"vm/example/app-vm.yaml", "vm/example/link.yaml"} {
			if got := fileContent(snap, f); got != string(committed) {
				t.Errorf("%s: %s is not the committed content: %q", p, f, got)
			}
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

// A repository whose objects git has packed is read from its packfile, with the same content as the files
// committed, and the snapshot leaves none of the repository's files open.
func TestSnapshotBranchReadsAPackedRepositoryAndClosesItsPackfiles(t *testing.T) {
	repo := newWorkRepo(t, t.TempDir())
	copyCorpus(t, repo.dir)
	commit := repo.commit("example repository")
	runGit(t, repo.dir, "gc", "-q")
	if packs, _ := filepath.Glob(filepath.Join(repo.dir, ".git", "objects", "pack", "*.pack")); len(packs) == 0 {
		t.Fatal("git gc left no packfile")
	}
	snap, err := watcher.SnapshotBranch(t.Context(), repo.dir, "main")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(corpusManifests, paths(snap)); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
	if snap.Commit != commit || snap.Tree != repo.treeOf(commit) {
		t.Errorf("snapshot of commit %s tree %s, want %s %s", snap.Commit, snap.Tree, commit, repo.treeOf(commit))
	}
	for _, f := range corpusManifests {
		want, err := os.ReadFile(filepath.Join(repo.dir, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		if got := fileContent(snap, f); got != string(want) {
			t.Errorf("%s: %q, want the committed %q", f, got, want)
		}
	}
	if open := watcher.OpenFilesBelow(t, repo.dir); len(open) > 0 {
		t.Errorf("files of the repository left open after the snapshot: %v", open)
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
	want = append(want, "vm/.gitignore", "vm/example/link.yaml", "vm/example/new.yaml")
	slices.Sort(want)
	if diff := cmp.Diff(want, paths(snap)); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
	for _, f := range []string{"vm/example/app-vm.yaml", "vm/example/link.yaml"} {
		if got := fileContent(snap, f); got != "edited, not committed\n" {
			t.Errorf("%s = %q, want the work tree's", f, got)
		}
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

// A committed or uncommitted link that leaves the repository refuses the snapshot with an error naming the
// link; nothing of its target is read.
func TestSnapshotsRefuseALinkLeavingTheRepositoryAndNameIt(t *testing.T) {
	const secret = "AGE-SECRET-KEY-1QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7LQPZRY9X8GF2TVDW0S3JN54K"
	for _, c := range []struct{ link, target, want string }{
		{"vm/base/key.yaml", "../../../outside/age.txt", "symbolic link vm/base/key.yaml leads outside the repository: not followed"},
		{"proxops.yaml", "../outside/age.txt", "symbolic link proxops.yaml leads outside the repository: not followed"},
		{"clusters/lab/ci.yaml", "/etc/hostname", "symbolic link clusters/lab/ci.yaml is absolute: not followed"},
		{"vm/base/git.yaml", "../../.git/config", "symbolic link vm/base/git.yaml leads into the .git directory: not followed"},
	} {
		t.Run(c.link, func(t *testing.T) {
			tmp := t.TempDir()
			repo := newWorkRepo(t, tmp)
			seed(repo)
			if err := os.MkdirAll(filepath.Join(tmp, "outside"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tmp, "outside", "age.txt"), []byte(secret+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(repo.dir, filepath.FromSlash(c.link))
			if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			if err := os.Symlink(c.target, link); err != nil {
				t.Fatal(err)
			}
			repo.commit("a link out of the repository")
			_, committed := watcher.SnapshotBranch(t.Context(), repo.dir, "main")
			_, worktree := watcher.SnapshotWorktree(t.Context(), repo.dir)
			for name, err := range map[string]error{"committed": committed, "work tree": worktree} {
				if !errors.Is(err, repofs.ErrLinkRefused) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s snapshot: %v, want %q", name, err, c.want)
				}
				if err != nil && (strings.Contains(err.Error(), secret[:16]) || strings.Contains(err.Error(), c.target)) {
					t.Errorf("%s snapshot error carries the target: %v", name, err)
				}
			}
		})
	}
}

// A link inside the repository reads as validate reads it: a link to a file (anywhere in the repository)
// is that file under the link's path, a link to a directory is left out.
func TestSnapshotsFollowLinksToFilesInsideTheRepository(t *testing.T) {
	repo := newWorkRepo(t, t.TempDir())
	seed(repo)
	repo.write("shared/db.yaml", "kind: VM\n")
	repo.write(".gitignore", "*.dec.yaml\n")
	repo.write("clusters/lab/secrets.dec.yaml", "decrypted: do not ship\n")
	links := map[string]string{
		"vm/base/db.yaml":     "../../shared/db.yaml",
		"vm/shared":           "../shared",
		"vm/base/gone.yaml":   "nowhere.yaml",
		"vm/base/secret.yaml": "../../clusters/lab/secrets.dec.yaml",
	}
	for link, target := range links {
		if err := os.Symlink(target, filepath.Join(repo.dir, filepath.FromSlash(link))); err != nil {
			t.Fatal(err)
		}
	}
	repo.commit("links inside the repository")
	committed, err := watcher.SnapshotBranch(t.Context(), repo.dir, "main")
	if err != nil {
		t.Fatal(err)
	}
	worktree, err := watcher.SnapshotWorktree(t.Context(), repo.dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"clusters/lab/config.yaml", "clusters/lab/resources.yaml", "clusters/lab/secrets.sops.yaml", "proxops.yaml", "vm/base/db.yaml", "vm/base/web.yaml"}
	for name, snap := range map[string]watcher.TreeSnapshot{"committed": committed, "work tree": worktree} {
		if diff := cmp.Diff(want, paths(snap)); diff != "" {
			t.Errorf("%s: paths (-want +got):\n%s", name, diff)
		}
		if got := fileContent(snap, "vm/base/db.yaml"); got != "kind: VM\n" {
			t.Errorf("%s: vm/base/db.yaml = %q, want the linked file", name, got)
		}
	}
}
