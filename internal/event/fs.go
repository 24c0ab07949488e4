package event

import (
	"bytes"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// FS returns a read-only file system over the snapshot's files (directories are implied by the paths): what
// internal/repo loads a repository from, so the planner reads manifests from the object store and never
// from git. A path that is not valid (fs.ValidPath) is left out.
func (s TreeSnapshot) FS() fs.FS { return newTreeFS(s) }

// treeFS is a read-only file system over a tree snapshot.
type treeFS struct {
	files map[string][]byte
	dirs  map[string][]fs.DirEntry
}

var (
	_ fs.ReadDirFS  = (*treeFS)(nil)
	_ fs.ReadFileFS = (*treeFS)(nil)
)

func newTreeFS(snap TreeSnapshot) *treeFS {
	t := &treeFS{files: map[string][]byte{}, dirs: map[string][]fs.DirEntry{".": nil}}
	seen := map[string]bool{}
	for _, f := range snap.Files {
		if !fs.ValidPath(f.Path) || f.Path == "." {
			continue
		}
		t.files[f.Path] = f.Content
		child, dir := f.Path, path.Dir(f.Path)
		isDir := false
		for {
			if !seen[child] {
				seen[child] = true
				t.dirs[dir] = append(t.dirs[dir], entry{name: path.Base(child), dir: isDir, size: int64(len(f.Content))})
			}
			if dir == "." {
				break
			}
			if _, ok := t.dirs[dir]; !ok {
				t.dirs[dir] = nil
			}
			child, dir, isDir = dir, path.Dir(dir), true
		}
	}
	for d := range t.dirs {
		slices.SortFunc(t.dirs[d], func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	}
	return t
}

func (t *treeFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if data, ok := t.files[name]; ok {
		return &openFile{entry: entry{name: path.Base(name), size: int64(len(data))}, r: bytes.NewReader(data)}, nil
	}
	if entries, ok := t.dirs[name]; ok {
		return &openDir{entry: entry{name: path.Base(name), dir: true}, entries: entries}, nil
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (t *treeFS) ReadFile(name string) ([]byte, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: fs.ErrInvalid}
	}
	data, ok := t.files[name]
	if !ok {
		if _, isDir := t.dirs[name]; isDir {
			return nil, &fs.PathError{Op: "readfile", Path: name, Err: fs.ErrInvalid}
		}
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: fs.ErrNotExist}
	}
	return slices.Clone(data), nil
}

func (t *treeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	entries, ok := t.dirs[name]
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	return slices.Clone(entries), nil
}

// entry is a file or directory of a snapshot; it is its own fs.FileInfo and fs.DirEntry.
type entry struct {
	name string
	dir  bool
	size int64
}

func (e entry) Name() string { return e.name }
func (e entry) Size() int64 {
	if e.dir {
		return 0
	}
	return e.size
}
func (e entry) Mode() fs.FileMode {
	if e.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
func (e entry) ModTime() time.Time         { return time.Time{} }
func (e entry) IsDir() bool                { return e.dir }
func (e entry) Sys() any                   { return nil }
func (e entry) Type() fs.FileMode          { return e.Mode().Type() }
func (e entry) Info() (fs.FileInfo, error) { return e, nil }
func (e entry) Stat() (fs.FileInfo, error) { return e, nil }
func (e entry) String() string             { return fs.FormatDirEntry(e) }

type openFile struct {
	entry
	r *bytes.Reader
}

func (f *openFile) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *openFile) Close() error               { return nil }

type openDir struct {
	entry
	entries []fs.DirEntry
	off     int
}

func (d *openDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.name, Err: fs.ErrInvalid}
}
func (d *openDir) Close() error { return nil }

func (d *openDir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.off:]
	if n <= 0 {
		d.off = len(d.entries)
		return slices.Clone(rest), nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(rest))
	d.off += n
	return slices.Clone(rest[:n]), nil
}
