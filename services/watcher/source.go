package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
)

// source is where the watcher reads commits from: a remote through its own bare mirror, or a local repository
// in place.
type source interface {
	// head returns the branch's commit at the source: a ref listing for a remote, a ref read for a local
	// repository.
	head(ctx context.Context) (plumbing.Hash, error)
	// have returns the branch's commit in the watcher's copy (zero if it has none).
	have() (plumbing.Hash, error)
	// fetch brings the branch into the watcher's copy, following force-pushes, and returns its commit.
	fetch(ctx context.Context) (plumbing.Hash, error)
	// snapshot reads the manifest files of a commit of the copy, and its subject line.
	snapshot(ctx context.Context, commit plumbing.Hash) (TreeSnapshot, string, error)
}

var (
	_ source = (*remoteSource)(nil)
	_ source = (*localSource)(nil)
)

// errBranchNotFound is returned when the source has no such branch.
var errBranchNotFound = errors.New("branch not found")

// remoteSource mirrors one branch of a remote repository into a bare repository of its own.
type remoteSource struct {
	url    string // without credentials
	branch plumbing.ReferenceName
	dir    string
	access remoteAccess
	repo   *git.Repository // opened on first use
}

// mirrorDir is <data-dir>/git/<hash of the repository identity>.
func mirrorDir(dataDir, repo string) string {
	sum := sha256.Sum256([]byte(repo))
	return filepath.Join(dataDir, "git", hex.EncodeToString(sum[:16]))
}

// open opens the mirror, creating it, or recreating it when it cannot be read: it holds nothing that a fetch
// cannot bring back.
func (s *remoteSource) open() (*git.Repository, error) {
	if s.repo != nil {
		return s.repo, nil
	}
	if err := os.MkdirAll(filepath.Dir(s.dir), 0o700); err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	repo, err := git.Open(mirrorStorage(s.dir), nil)
	if err != nil {
		if !errors.Is(err, git.ErrRepositoryNotExists) {
			if err := os.RemoveAll(s.dir); err != nil {
				return nil, fmt.Errorf("mirror %s: unreadable and cannot be removed: %w", s.dir, err)
			}
		}
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			return nil, fmt.Errorf("mirror: %w", err)
		}
		repo, err = git.Init(mirrorStorage(s.dir), nil)
		if err != nil {
			return nil, fmt.Errorf("mirror %s: %w", s.dir, err)
		}
	}
	s.repo = repo
	return repo, nil
}

// mirrorCacheSize bounds the mirror's cache of decoded objects (go-git's default is 96 MiB).
const mirrorCacheSize = 8 * cache.MiByte

// mirrorStorage is the bare mirror's object and reference storage.
func mirrorStorage(dir string) *filesystem.Storage {
	return filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRU(mirrorCacheSize))
}

// maxMirrorPacks is how many packfiles fetches may pile up before the mirror is repacked.
const maxMirrorPacks = 16

// maintain repacks the mirror when fetches have left many packfiles: one pack of the objects reachable from
// the branch replaces them, which also drops what force-pushes left unreachable.
func (s *remoteSource) maintain() error {
	repo, err := s.open()
	if err != nil {
		return err
	}
	pos, ok := repo.Storer.(storer.PackedObjectStorer)
	if !ok {
		return nil
	}
	packs, err := pos.ObjectPacks()
	if err != nil || len(packs) <= maxMirrorPacks {
		return err
	}
	// The storage caches the indexes of the packs it knew: open the mirror afresh after the repack.
	s.repo = nil
	if err := repo.RepackObjects(&git.RepackConfig{}); err != nil {
		return fmt.Errorf("repack mirror %s: %w", s.dir, err)
	}
	return nil
}

func (s *remoteSource) head(ctx context.Context) (plumbing.Hash, error) {
	auth, err := s.access.auth()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{s.url}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{
		Auth:            auth,
		CABundle:        s.access.caBundle,
		InsecureSkipTLS: s.access.insecure,
		PeelingOption:   git.IgnorePeeled,
	})
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("list refs of %s: %w", s.url, err)
	}
	for _, ref := range refs {
		if ref.Name() == s.branch && ref.Type() == plumbing.HashReference {
			return ref.Hash(), nil
		}
	}
	return plumbing.ZeroHash, fmt.Errorf("%s: %s: %w", s.url, s.branch.Short(), errBranchNotFound)
}

func (s *remoteSource) have() (plumbing.Hash, error) {
	repo, err := s.open()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	ref, err := repo.Reference(s.branch, true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return plumbing.ZeroHash, nil
	}
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("mirror: read %s: %w", s.branch, err)
	}
	return ref.Hash(), nil
}

func (s *remoteSource) fetch(ctx context.Context) (plumbing.Hash, error) {
	repo, err := s.open()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	auth, err := s.access.auth()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	spec := config.RefSpec("+" + s.branch.String() + ":" + s.branch.String())
	remote := git.NewRemote(repo.Storer, &config.RemoteConfig{Name: "origin", URLs: []string{s.url}, Fetch: []config.RefSpec{spec}})
	err = remote.FetchContext(ctx, &git.FetchOptions{
		RefSpecs:        []config.RefSpec{spec},
		Auth:            auth,
		Force:           true,
		Tags:            git.NoTags,
		CABundle:        s.access.caBundle,
		InsecureSkipTLS: s.access.insecure,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return plumbing.ZeroHash, fmt.Errorf("fetch %s from %s: %w", s.branch.Short(), s.url, err)
	}
	h, err := s.have()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if h.IsZero() {
		return plumbing.ZeroHash, fmt.Errorf("fetch %s from %s: %w", s.branch.Short(), s.url, errBranchNotFound)
	}
	return h, nil
}

func (s *remoteSource) snapshot(ctx context.Context, commit plumbing.Hash) (TreeSnapshot, string, error) {
	if _, err := s.open(); err != nil {
		return TreeSnapshot{}, "", err
	}
	// The snapshot reads the mirror through a storage of its own that keeps the packfiles it opens open
	// until the snapshot is read, rather than opening them again for every blob.
	storage := filesystem.NewStorageWithOptions(osfs.New(s.dir), cache.NewObjectLRU(mirrorCacheSize), filesystem.Options{KeepDescriptors: true})
	defer func() { _ = storage.Close() }()
	repo, err := git.Open(storage, nil)
	if err != nil {
		return TreeSnapshot{}, "", fmt.Errorf("mirror %s: %w", s.dir, err)
	}
	return snapshotCommit(ctx, repo, commit)
}

// localSource reads a local repository in place. It opens the repository afresh for every read, so commits,
// repacks and garbage collection by its owner are always seen, and writes nothing.
type localSource struct {
	path   string
	branch plumbing.ReferenceName
}

func (s *localSource) head(context.Context) (plumbing.Hash, error) {
	repo, closeRepo, err := openLocal(s.path)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer func() { _ = closeRepo() }()
	ref, err := repo.Reference(s.branch, true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return plumbing.ZeroHash, fmt.Errorf("%s: %s: %w", s.path, s.branch.Short(), errBranchNotFound)
	}
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("%s: read %s: %w", s.path, s.branch, err)
	}
	return ref.Hash(), nil
}

func (s *localSource) have() (plumbing.Hash, error) { return s.head(context.Background()) }

func (s *localSource) fetch(ctx context.Context) (plumbing.Hash, error) { return s.head(ctx) }

func (s *localSource) snapshot(ctx context.Context, commit plumbing.Hash) (TreeSnapshot, string, error) {
	repo, closeRepo, err := openLocal(s.path)
	if err != nil {
		return TreeSnapshot{}, "", err
	}
	defer func() { _ = closeRepo() }()
	return snapshotCommit(ctx, repo, commit)
}
