package watcher

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/repofs"
)

// ManifestRoots are the top-level directories whose files make up a manifest snapshot, sorted: every kind
// root (manifest.KindRoots) and clusters/ (configs, compositions and their secrets files). ConfigFile, at the
// root, is also part of it.
var ManifestRoots = func() []string {
	out := append([]string{"clusters"}, manifest.KindRoots...)
	slices.Sort(out)
	return out
}()

// ConfigFile is the optional process-wide configuration at the repository root.
const ConfigFile = "proxops.yaml"

// Limits of a snapshot: a manifest repository holds small text files, so anything far larger is refused
// rather than carried through the bus.
const (
	MaxSnapshotFileSize  = 8 << 20
	MaxSnapshotTotalSize = 256 << 20
	maxTreeDepth         = 64
)

// ErrSnapshotTooLarge is wrapped when a file or the whole snapshot exceeds the limits.
var ErrSnapshotTooLarge = errors.New("manifest snapshot too large")

// IsManifestPath reports whether a slash-separated path relative to the repository root belongs to a
// manifest snapshot.
func IsManifestPath(p string) bool {
	if p == ConfigFile {
		return true
	}
	root, rest, ok := strings.Cut(p, "/")
	return ok && rest != "" && isManifestRoot(root)
}

func isManifestRoot(name string) bool {
	i := sort.SearchStrings(ManifestRoots, name)
	return i < len(ManifestRoots) && ManifestRoots[i] == name
}

// SnapshotBranch reads the manifest files of the committed head of a branch of the local repository at
// repoPath (its work tree, a directory below it, or its git directory); an empty branch means the commit
// HEAD points to. Nothing of the repository, its index or its work tree is written. The snapshot is named by
// its content (event.TreeName) and carries the commit.
func SnapshotBranch(ctx context.Context, repoPath, branch string) (TreeSnapshot, error) {
	repo, closeRepo, err := openLocal(repoPath)
	if err != nil {
		return TreeSnapshot{}, err
	}
	defer func() { _ = closeRepo() }()
	var hash plumbing.Hash
	if branch == "" {
		ref, err := repo.Head()
		if err != nil {
			return TreeSnapshot{}, fmt.Errorf("repository %s: read HEAD: %w", repoPath, err)
		}
		hash = ref.Hash()
	} else {
		hash, err = branchCommit(repo, branch)
		if err != nil {
			return TreeSnapshot{}, fmt.Errorf("repository %s: %w", repoPath, err)
		}
	}
	snap, _, err := snapshotCommit(ctx, repo, hash)
	return snap, err
}

// CurrentBranch returns the branch HEAD points to in the local repository at repoPath (its work tree, a
// directory below it, or its git directory). A detached HEAD is an error.
func CurrentBranch(repoPath string) (string, error) {
	repo, closeRepo, err := openLocal(repoPath)
	if err != nil {
		return "", err
	}
	defer func() { _ = closeRepo() }()
	ref, err := repo.Storer.Reference(plumbing.HEAD)
	if err != nil {
		return "", fmt.Errorf("repository %s: read HEAD: %w", repoPath, err)
	}
	if ref.Type() != plumbing.SymbolicReference || !ref.Target().IsBranch() {
		return "", fmt.Errorf("repository %s: HEAD is detached (not on a branch)", repoPath)
	}
	return ref.Target().Short(), nil
}

// openLocal opens a local repository for reading. Its packfiles, once opened, stay open until closeRepo is
// called, rather than being opened again for every object read: a snapshot reads every manifest blob of a
// commit, and most of them are in one packfile.
func openLocal(p string) (repo *git.Repository, closeRepo func() error, err error) {
	repo, err = git.PlainOpenWithOptions(p, &git.PlainOpenOptions{DetectDotGit: true, EnableDotGitCommonDir: true})
	if errors.Is(err, git.ErrRepositoryNotExists) {
		// A bare repository has no .git and no commondir: go-git only opens it without those options.
		repo, err = git.PlainOpen(p)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open repository %s: %w", p, err)
	}
	found, ok := repo.Storer.(*filesystem.Storage)
	if !ok {
		return repo, func() error { return nil }, nil
	}
	// The same git directory (and common directory), read through a storage that keeps its packfiles open.
	storage := filesystem.NewStorageWithOptions(found.Filesystem(), cache.NewObjectLRUDefault(), filesystem.Options{KeepDescriptors: true})
	if repo, err = git.Open(storage, nil); err != nil {
		_ = storage.Close()
		return nil, nil, fmt.Errorf("open repository %s: %w", p, err)
	}
	return repo, storage.Close, nil
}

// branchCommit resolves refs/heads/<branch>.
func branchCommit(repo *git.Repository, branch string) (plumbing.Hash, error) {
	ref, err := repo.Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("branch %q: %w", branch, err)
	}
	return ref.Hash(), nil
}

// snapshotCommit reads the manifest files of one commit, and its subject line.
func snapshotCommit(ctx context.Context, repo *git.Repository, hash plumbing.Hash) (TreeSnapshot, string, error) {
	commit, err := repo.CommitObject(hash)
	if err != nil {
		return TreeSnapshot{}, "", fmt.Errorf("read commit %s: %w", hash, err)
	}
	tree, err := commit.Tree()
	if err != nil {
		return TreeSnapshot{}, "", fmt.Errorf("read tree of commit %s: %w", hash, err)
	}
	snap := TreeSnapshot{Commit: hash.String()}
	var total int64
	links := &commitLinks{repo: repo, root: tree}
	for _, e := range tree.Entries {
		switch {
		case e.Name == ConfigFile && e.Mode == filemode.Symlink:
			err = addLink(ctx, links, e.Name, &snap, &total)
		case e.Name == ConfigFile && e.Mode.IsFile():
			err = addBlob(ctx, repo, e, e.Name, &snap, &total)
		case e.Mode == filemode.Dir && isManifestRoot(e.Name):
			err = addTree(ctx, links, e.Hash, e.Name, 1, &snap, &total)
		}
		if err != nil {
			return TreeSnapshot{}, "", fmt.Errorf("commit %s: %w", hash, err)
		}
	}
	snap.Named()
	return snap, subjectLine(commit.Message), nil
}

func addTree(ctx context.Context, links *commitLinks, hash plumbing.Hash, dir string, depth int, snap *TreeSnapshot, total *int64) error {
	repo := links.repo
	if depth > maxTreeDepth {
		return fmt.Errorf("%s: directories nested deeper than %d", dir, maxTreeDepth)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tree, err := object.GetTree(repo.Storer, hash)
	if err != nil {
		return fmt.Errorf("read tree %s: %w", dir, err)
	}
	for _, e := range tree.Entries {
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\x00") {
			return fmt.Errorf("%s: invalid entry name %q", dir, e.Name)
		}
		p := dir + "/" + e.Name
		switch e.Mode {
		case filemode.Dir:
			err = addTree(ctx, links, e.Hash, p, depth+1, snap, total)
		case filemode.Regular, filemode.Executable, filemode.Deprecated:
			err = addBlob(ctx, repo, e, p, snap, total)
		case filemode.Symlink:
			err = addLink(ctx, links, p, snap, total)
		default:
			// Submodules are not manifest files.
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func addBlob(ctx context.Context, repo *git.Repository, e object.TreeEntry, p string, snap *TreeSnapshot, total *int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	blob, err := object.GetBlob(repo.Storer, e.Hash)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if err := checkSize(p, blob.Size, total); err != nil {
		return err
	}
	r, err := blob.Reader()
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	defer r.Close()
	content, err := io.ReadAll(io.LimitReader(r, blob.Size+1))
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	snap.Files = append(snap.Files, TreeFile{Path: p, Content: content})
	return nil
}

// addLink adds, under the link's own path, the committed file a symbolic link of the commit leads to, as
// repofs resolves links of a work tree: a relative link to a file inside the repository is followed; one to
// a directory or to nothing is left out; any other refuses the snapshot, naming the link.
func addLink(ctx context.Context, links *commitLinks, p string, snap *TreeSnapshot, total *int64) error {
	target, err := repofs.Resolve(links, p)
	switch {
	case errors.Is(err, repofs.ErrLinkToDirectory) || errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	e, err := links.root.FindEntry(target)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if !e.Mode.IsFile() {
		return nil
	}
	return addBlob(ctx, links.repo, *e, p, snap, total)
}

// commitLinks is a commit's tree as repofs.Resolve reads it.
type commitLinks struct {
	repo *git.Repository
	root *object.Tree
}

// maxLinkTarget bounds the target of a committed link: longer is not a path.
const maxLinkTarget = 4096

func (c *commitLinks) entry(name string) (*object.TreeEntry, error) {
	e, err := c.root.FindEntry(name)
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrNotExist}
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return e, nil
}

func (c *commitLinks) Type(name string) (fs.FileMode, error) {
	if name == "." {
		return fs.ModeDir, nil
	}
	e, err := c.entry(name)
	if err != nil {
		return 0, err
	}
	switch e.Mode {
	case filemode.Dir:
		return fs.ModeDir, nil
	case filemode.Symlink:
		return fs.ModeSymlink, nil
	case filemode.Submodule:
		return fs.ModeIrregular, nil
	default:
		return 0, nil
	}
}

func (c *commitLinks) Readlink(name string) (string, error) {
	e, err := c.entry(name)
	if err != nil {
		return "", err
	}
	blob, err := object.GetBlob(c.repo.Storer, e.Hash)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	if blob.Size > maxLinkTarget {
		return "", fmt.Errorf("read %s: link target of %d bytes", name, blob.Size)
	}
	r, err := blob.Reader()
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	defer r.Close()
	target, err := io.ReadAll(io.LimitReader(r, maxLinkTarget))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	return string(target), nil
}

func checkSize(p string, size int64, total *int64) error {
	if size > MaxSnapshotFileSize {
		return fmt.Errorf("%s is %d bytes (limit %d): %w", p, size, MaxSnapshotFileSize, ErrSnapshotTooLarge)
	}
	*total += size
	if *total > MaxSnapshotTotalSize {
		return fmt.Errorf("manifest files exceed %d bytes at %s: %w", MaxSnapshotTotalSize, p, ErrSnapshotTooLarge)
	}
	return nil
}

// subjectLine is the first line of a commit message, trimmed and capped for display.
func subjectLine(msg string) string {
	line, _, _ := strings.Cut(strings.TrimLeft(msg, "\r\n\t "), "\n")
	line = strings.TrimSpace(line)
	if r := []rune(line); len(r) > 200 {
		line = string(r[:200])
	}
	return line
}

// SnapshotWorktree reads the manifest files of the work tree at dir (the repository root) from disk, as they
// are, committed or not. Files ignored by the repository's .gitignore files or .git/info/exclude and
// anything below a .git entry are left out. A symbolic link is read through repofs: one to a file inside
// the repository adds that file's content under the link's path, one to a directory, to nothing or to an
// ignored file is left out, and any other (absolute, leaving the repository, into .git) refuses the snapshot
// with an error naming the link. The snapshot has no commit; it is named by its content (event.TreeName), so
// equal files give equal names, committed or not.
func SnapshotWorktree(ctx context.Context, dir string) (TreeSnapshot, error) {
	ignore, err := worktreeIgnores(dir)
	if err != nil {
		return TreeSnapshot{}, err
	}
	tree, err := repofs.Open(dir)
	if err != nil {
		return TreeSnapshot{}, err
	}
	defer func() { _ = tree.Close() }()
	var snap TreeSnapshot
	var total int64
	add := func(rel string) error {
		target, err := tree.Resolve(rel)
		if err == nil && target != rel && ignore.Match(strings.Split(target, "/"), false) {
			// A link to an ignored file (a decrypted secret, say) reads as in a commit: not there.
			return nil
		}
		info, err := fs.Stat(tree, rel)
		switch {
		case errors.Is(err, repofs.ErrLinkToDirectory) || errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return err
		case !info.Mode().IsRegular():
			return nil
		}
		if err := checkSize(rel, info.Size(), &total); err != nil {
			return err
		}
		content, err := fs.ReadFile(tree, rel)
		if err != nil {
			return fmt.Errorf("read %s: %w", rel, err)
		}
		if int64(len(content)) > MaxSnapshotFileSize {
			return fmt.Errorf("%s is %d bytes (limit %d): %w", rel, len(content), MaxSnapshotFileSize, ErrSnapshotTooLarge)
		}
		snap.Files = append(snap.Files, TreeFile{Path: rel, Content: content})
		return nil
	}
	if info, err := os.Lstat(filepath.Join(dir, ConfigFile)); err == nil && isFileOrLink(info.Mode()) && !ignore.Match([]string{ConfigFile}, false) {
		if err := add(ConfigFile); err != nil {
			return TreeSnapshot{}, fmt.Errorf("snapshot work tree %s: %w", dir, err)
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return TreeSnapshot{}, fmt.Errorf("read %s: %w", ConfigFile, err)
	}
	for _, root := range ManifestRoots {
		info, err := os.Lstat(filepath.Join(dir, root))
		if errors.Is(err, fs.ErrNotExist) || (err == nil && !info.IsDir()) {
			continue
		}
		if err != nil {
			return TreeSnapshot{}, fmt.Errorf("read %s: %w", root, err)
		}
		err = fs.WalkDir(tree, root, func(rel string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			parts := strings.Split(rel, "/")
			if d.Name() == ".git" || ignore.Match(parts, d.IsDir()) {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if !isFileOrLink(d.Type()) {
				return nil
			}
			return add(rel)
		})
		if err != nil {
			return TreeSnapshot{}, fmt.Errorf("snapshot work tree %s: %w", dir, err)
		}
	}
	snap.Named()
	return snap, nil
}

// isFileOrLink reports a regular file or a symbolic link.
func isFileOrLink(m fs.FileMode) bool {
	return m.IsRegular() || m&fs.ModeSymlink != 0
}

// worktreeIgnores reads .git/info/exclude, the root .gitignore and every .gitignore below the manifest
// roots. Global and system excludes are a person's preferences, not the repository's, and are not read.
func worktreeIgnores(dir string) (gitignore.Matcher, error) {
	var ps []gitignore.Pattern
	for _, f := range []string{filepath.Join(dir, ".git", "info", "exclude"), filepath.Join(dir, ".gitignore")} {
		more, err := readIgnoreFile(f)
		if err != nil {
			return nil, err
		}
		ps = append(ps, more...)
	}
	bfs := osfs.New(dir)
	for _, root := range ManifestRoots {
		if info, err := os.Lstat(filepath.Join(dir, root)); err != nil || !info.IsDir() {
			continue
		}
		more, err := gitignore.ReadPatterns(bfs, []string{root})
		if err != nil {
			return nil, fmt.Errorf("read ignore files under %s: %w", root, err)
		}
		ps = append(ps, more...)
	}
	return gitignore.NewMatcher(ps), nil
}

func readIgnoreFile(p string) ([]gitignore.Pattern, error) {
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrInvalid) || isNotDir(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	var ps []gitignore.Pattern
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ps = append(ps, gitignore.ParsePattern(line, nil))
	}
	return ps, nil
}

// isNotDir reports an error from reading below a file (.git is a file in a linked work tree).
func isNotDir(err error) bool {
	return errors.Is(err, syscall.ENOTDIR)
}
