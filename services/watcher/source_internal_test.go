package watcher

import (
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
)

func gitCLI(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+filepath.Join(dir, "none"),
		"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.invalid", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestMirrorIsRepackedWhenFetchesPileUpPacks(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(root, "work")
	gitCLI(t, root, "init", "-q", "-b", "main", work)
	// A local path as the remote: go-git fetches it with git upload-pack, like any remote.
	s := &remoteSource{url: work, branch: plumbing.NewBranchReferenceName("main"), dir: filepath.Join(root, "mirror"),
		access: remoteAccess{auth: func() (transport.AuthMethod, error) { return nil, nil }}}
	var orphan string
	for i := range maxMirrorPacks + 2 {
		if err := os.WriteFile(filepath.Join(work, "f"), []byte(strconv.Itoa(i)), 0o644); err != nil {
			t.Fatal(err)
		}
		gitCLI(t, work, "add", "f")
		gitCLI(t, work, "commit", "-q", "-m", strconv.Itoa(i))
		if i == 3 {
			// Rewrite history once: commit 3 becomes unreachable after the next fetches.
			orphan = gitCLI(t, work, "rev-parse", "HEAD")
			if _, err := s.fetch(t.Context()); err != nil {
				t.Fatal(err)
			}
			gitCLI(t, work, "commit", "-q", "--amend", "-m", "rewritten")
		}
		if _, err := s.fetch(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	repo, _ := s.open()
	packs, _ := repo.Storer.(storer.PackedObjectStorer).ObjectPacks()
	if len(packs) <= maxMirrorPacks {
		t.Fatalf("%d packs after %d fetches; the test needs more than %d", len(packs), maxMirrorPacks+3, maxMirrorPacks)
	}
	if _, err := repo.CommitObject(plumbing.NewHash(orphan)); err != nil {
		t.Fatalf("the orphaned commit is not in the mirror before maintenance: %v", err)
	}
	if err := s.maintain(); err != nil {
		t.Fatal(err)
	}
	repo, err := s.open()
	if err != nil {
		t.Fatal(err)
	}
	packs, _ = repo.Storer.(storer.PackedObjectStorer).ObjectPacks()
	if len(packs) != 1 {
		t.Errorf("%d packs after maintenance, want 1", len(packs))
	}
	head, err := s.have()
	if err != nil || head.String() != gitCLI(t, work, "rev-parse", "HEAD") {
		t.Fatalf("mirror head %s (%v)", head, err)
	}
	if _, _, err := s.snapshot(t.Context(), head); err != nil {
		t.Errorf("snapshot after repack: %v", err)
	}
	if _, err := repo.CommitObject(plumbing.NewHash(orphan)); !errors.Is(err, plumbing.ErrObjectNotFound) {
		t.Errorf("the commit orphaned by the force-push: %v, want it gone", err)
	}
}

func TestUnreadableMirrorIsClonedAgain(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(root, "work")
	gitCLI(t, root, "init", "-q", "-b", "main", work)
	gitCLI(t, work, "commit", "-q", "--allow-empty", "-m", "first")
	newSource := func() *remoteSource {
		return &remoteSource{url: work, branch: plumbing.NewBranchReferenceName("main"), dir: filepath.Join(root, "mirror"),
			access: remoteAccess{auth: func() (transport.AuthMethod, error) { return nil, nil }}}
	}
	if _, err := newSource().fetch(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "mirror", "config"), []byte("[core\n\tbroken = "), 0o600); err != nil {
		t.Fatal(err)
	}
	head, err := newSource().fetch(t.Context())
	if err != nil {
		t.Fatalf("fetch into a broken mirror: %v", err)
	}
	if head.String() != gitCLI(t, work, "rev-parse", "HEAD") {
		t.Errorf("mirror head %s after recovery", head)
	}
}

// A snapshot of the mirror reads the committed files from the packfile the fetch wrote, and leaves none of
// the mirror's files open.
func TestMirrorSnapshotReadsThePackedMirrorAndClosesItsPackfiles(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(root, "work")
	gitCLI(t, root, "init", "-q", "-b", "main", work)
	files := map[string]string{"clusters/lab/config.yaml": "pve: {}\n", "vm/lab/a.yaml": "kind: VM\n", "vm/lab/b.yaml": "kind: VM\nb: 1\n"}
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(work, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitCLI(t, work, "add", "-A")
	gitCLI(t, work, "commit", "-q", "-m", "guests")
	s := &remoteSource{url: work, branch: plumbing.NewBranchReferenceName("main"), dir: filepath.Join(root, "mirror"),
		access: remoteAccess{auth: func() (transport.AuthMethod, error) { return nil, nil }}}
	head, err := s.fetch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if packs, _ := filepath.Glob(filepath.Join(s.dir, "objects", "pack", "*.pack")); len(packs) == 0 {
		t.Fatal("the fetch left no packfile in the mirror")
	}
	snap, _, err := s.snapshot(t.Context(), head)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range snap.Files {
		got[f.Path] = string(f.Content)
	}
	if !maps.Equal(got, files) {
		t.Errorf("snapshot of the mirror: %v, want %v", got, files)
	}
	if open := openFilesBelow(t, s.dir); len(open) > 0 {
		t.Errorf("files of the mirror left open after the snapshot: %v", open)
	}
}

// openFilesBelow lists the files below dir this process holds open (Linux's /proc/self/fd).
func openFilesBelow(t *testing.T, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("open descriptors cannot be listed here: %v", err)
	}
	var out []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			out = append(out, target)
		}
	}
	return out
}
