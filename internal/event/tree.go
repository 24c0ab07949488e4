package event

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// TreePrefix starts every tree name: the name is TreePrefix and the hex SHA-256 of the snapshot's canonical
// encoding (TreeName).
const TreePrefix = "sha256-"

// treeDomain starts the canonical encoding, so a tree hash is never the hash of something else.
const treeDomain = "proxops-tree-snapshot-v1\n"

// ErrTreeMismatch is wrapped when a stored snapshot's content does not hash to the name it is stored under.
var ErrTreeMismatch = errors.New("tree snapshot does not match its name")

var treeNameRE = regexp.MustCompile(`^sha256-[0-9a-f]{64}$`)

// ValidTreeName reports whether name has the form of a tree name: TreePrefix and 64 lowercase hex digits.
func ValidTreeName(name string) bool { return treeNameRE.MatchString(name) }

// TreeName names a snapshot by its content, the same for the same files whoever computes it, committed or
// not: TreePrefix and the hex SHA-256 of its canonical encoding. The encoding is a fixed domain line, then,
// for each file in path order, the path's length (8 bytes, big endian), the path, the content's length and
// the content. The commit is not part of it: it travels beside the tree (RepoChanged.Commit).
func TreeName(files []File) string {
	sorted := slices.Clone(files)
	slices.SortStableFunc(sorted, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	h := sha256.New()
	h.Write([]byte(treeDomain))
	var n [8]byte
	for _, f := range sorted {
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Path)))
		h.Write(n[:])
		h.Write([]byte(f.Path))
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Content)))
		h.Write(n[:])
		h.Write(f.Content)
	}
	return TreePrefix + hex.EncodeToString(h.Sum(nil))
}

// Named names the snapshot by its content (TreeName) and sorts its files.
func (s *TreeSnapshot) Named() {
	s.Sort()
	s.Tree = TreeName(s.Files)
}

// Verify checks that a snapshot read under name is the snapshot of that name: the name is a tree name, no
// path appears twice, and the files hash to it. The error wraps ErrTreeMismatch and names the tree.
func (s TreeSnapshot) Verify(name string) error {
	if !ValidTreeName(name) {
		return fmt.Errorf("tree %q: not a content-addressed tree name (%s and 64 hex digits): %w", name, TreePrefix, ErrTreeMismatch)
	}
	paths := make([]string, len(s.Files))
	for i, f := range s.Files {
		paths[i] = f.Path
	}
	slices.Sort(paths)
	for i := 1; i < len(paths); i++ {
		if paths[i] == paths[i-1] {
			return fmt.Errorf("tree %s: the path %s appears twice: %w", name, paths[i], ErrTreeMismatch)
		}
	}
	if got := TreeName(s.Files); got != name {
		return fmt.Errorf("tree %s: its content hashes to %s: %w", name, got, ErrTreeMismatch)
	}
	return nil
}
