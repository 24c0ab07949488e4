// Package repofs reads a repository's work tree without leaving it. A symbolic link is followed only when
// it is relative, leads to a file and stays inside the repository (outside its .git directory); any other
// link is refused with a LinkError that names the link by its path in the repository, and nothing at its
// target is opened or read. The same rule resolves links of a committed git tree (see Resolve), so a
// work tree and a commit read alike.
package repofs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// ErrLinkRefused is wrapped by every LinkError; ErrLinkToDirectory also by one whose link leads to a
// directory (inside the repository, unless another reason refuses it first).
var (
	ErrLinkRefused     = errors.New("symbolic link refused")
	ErrLinkToDirectory = errors.New("symbolic link to a directory")
)

// MaxLinks is the most symbolic links one path resolves through.
const MaxLinks = 40

// LinkError is a symbolic link that is not followed. Link is its slash-separated path in the repository;
// the error never carries the link's target or anything read there.
type LinkError struct {
	Link   string
	Reason string
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("symbolic link %s %s: not followed", e.Link, e.Reason)
}

// Unwrap makes every LinkError match ErrLinkRefused, and one leading to a directory ErrLinkToDirectory.
func (e *LinkError) Unwrap() []error {
	if e.Reason == reasonDirectory {
		return []error{ErrLinkRefused, ErrLinkToDirectory}
	}
	return []error{ErrLinkRefused}
}

// Reasons of a LinkError.
const (
	reasonOutside   = "leads outside the repository"
	reasonAbsolute  = "is absolute"
	reasonGitDir    = "leads into the .git directory"
	reasonDirectory = "leads to a directory"
	reasonLoop      = "ends a chain of too many links"
)

// Tree is what Resolve needs of a tree of files, both taking slash-separated paths whose every directory
// is a real directory (never a link).
type Tree interface {
	// Type returns the type bits of name (fs.ModeDir, fs.ModeSymlink, or none for a file); an error when
	// it does not exist.
	Type(name string) (fs.FileMode, error)
	// Readlink returns the target of the link at name.
	Readlink(name string) (string, error)
}

// Resolve returns the path, inside the tree, of what name (a valid fs path) leads to, following relative
// links to files that stay inside the tree. A link that is absolute, leads outside the tree or into its
// .git directory, leads to a directory, or ends a chain of more than MaxLinks links is refused with a
// LinkError naming it. An error of the tree (a missing file) is returned as it is.
func Resolve(t Tree, name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	var done []string
	todo := strings.Split(name, "/")
	link := "" // the link whose target is being resolved, if any
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			// Only a link's target climbs: a valid name has no "..".
			if len(done) == 0 {
				return "", &LinkError{Link: link, Reason: reasonOutside}
			}
			done = done[:len(done)-1]
			continue
		}
		if len(done) == 0 && c == ".git" && link != "" {
			return "", &LinkError{Link: link, Reason: reasonGitDir}
		}
		cur := path.Join(append(slices.Clone(done), c)...)
		typ, err := t.Type(cur)
		if err != nil {
			return "", err
		}
		if typ&fs.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		if len(todo) > 0 {
			return "", &LinkError{Link: cur, Reason: reasonDirectory}
		}
		if links++; links > MaxLinks {
			return "", &LinkError{Link: cur, Reason: reasonLoop}
		}
		target, err := t.Readlink(cur)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			return "", &LinkError{Link: cur, Reason: reasonAbsolute}
		}
		link = cur
		todo = strings.Split(target, "/")
	}
	p := path.Join(done...)
	if len(done) == 0 {
		p = "."
	}
	if link != "" {
		// Where the last link leads must be a file: its target may end in ".." or name a directory.
		typ, err := t.Type(p)
		if err != nil {
			return "", err
		}
		if typ.IsDir() {
			return "", &LinkError{Link: link, Reason: reasonDirectory}
		}
	}
	return p, nil
}

// FS is a work tree as an fs.FS that resolves every name with Resolve before it opens anything. Directory
// listings show links as links (fs.ModeSymlink), so fs.WalkDir does not descend through them.
type FS struct {
	root *os.Root
	fsys fs.FS
}

var (
	_ fs.ReadFileFS = (*FS)(nil)
	_ fs.ReadDirFS  = (*FS)(nil)
	_ fs.StatFS     = (*FS)(nil)
)

// Open opens the work tree at dir. Close releases it.
func Open(dir string) (*FS, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open repository %s: %w", dir, err)
	}
	return &FS{root: r, fsys: r.FS()}, nil
}

// Close releases the work tree.
func (f *FS) Close() error { return f.root.Close() }

// Type implements Tree.
func (f *FS) Type(name string) (fs.FileMode, error) {
	info, err := f.root.Lstat(name)
	if err != nil {
		return 0, err
	}
	return info.Mode().Type(), nil
}

// Readlink implements Tree.
func (f *FS) Readlink(name string) (string, error) { return f.root.Readlink(name) }

// Resolve returns the path, inside the work tree, of what name leads to (see the package function).
func (f *FS) Resolve(name string) (string, error) { return Resolve(f, name) }

// Open implements fs.FS.
func (f *FS) Open(name string) (fs.File, error) {
	p, err := Resolve(f, name)
	if err != nil {
		return nil, err
	}
	return f.fsys.Open(p)
}

// ReadFile implements fs.ReadFileFS.
func (f *FS) ReadFile(name string) ([]byte, error) {
	p, err := Resolve(f, name)
	if err != nil {
		return nil, err
	}
	return fs.ReadFile(f.fsys, p)
}

// ReadDir implements fs.ReadDirFS.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	p, err := Resolve(f, name)
	if err != nil {
		return nil, err
	}
	return fs.ReadDir(f.fsys, p)
}

// Stat implements fs.StatFS.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	p, err := Resolve(f, name)
	if err != nil {
		return nil, err
	}
	return fs.Stat(f.fsys, p)
}
