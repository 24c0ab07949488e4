package yamldecode

import (
	"encoding/binary"
)

// Fields is a compact, read-only record of where each field of a document is: what Positions holds, in a
// few bytes per field rather than a map entry and a string each. Every parsed manifest keeps one for as
// long as the repository is loaded, so its size is what a large repository costs on top of the values
// themselves.
//
// It is two strings. The first lists the paths in the order they were recorded, each as the length of the
// prefix it shares with the path before it and the rest of it; a decoded document records a parent before
// its children, so most paths cost the name of their last field. Documents of the same shape record the
// same paths, and share that string (see shareShape). The second holds each path's line and column. All
// numbers are varints. A lookup decodes the record from the start: a document has tens of fields, and
// lookups are made for diagnostics and a few presence checks.
type Fields struct {
	paths string
	pos   string
}

// Lookup returns the position of path, or of its nearest ancestor that has one, as Positions.Lookup does.
func (f Fields) Lookup(path string) Pos {
	for {
		if pos, ok := f.get(path); ok {
			return pos
		}
		if path == "" {
			return Pos{}
		}
		path = Parent(path)
	}
}

// Has reports whether path itself was recorded.
func (f Fields) Has(path string) bool {
	_, ok := f.get(path)
	return ok
}

// Positions returns the record as a map.
func (f Fields) Positions() Positions {
	out := Positions{}
	f.each(func(path []byte, pos Pos) { out[string(path)] = pos })
	return out
}

// get returns the position recorded last for exactly path.
func (f Fields) get(path string) (found Pos, ok bool) {
	f.each(func(p []byte, pos Pos) {
		if string(p) == path {
			found, ok = pos, true
		}
	})
	return found, ok
}

// each calls fn with every recorded path and its position, in order. The path slice is only valid during
// the call.
func (f Fields) each(fn func(path []byte, pos Pos)) {
	var scratch [128]byte
	path := scratch[:0]
	paths, pos := f.paths, f.pos
	for len(paths) > 0 && len(pos) > 0 {
		var shared, n, line, col uint64
		shared, paths = uvarint(paths)
		n, paths = uvarint(paths)
		if shared > uint64(len(path)) || n > uint64(len(paths)) {
			return // never written by FieldsBuilder
		}
		path = append(path[:shared], paths[:n]...)
		paths = paths[n:]
		line, pos = uvarint(pos)
		col, pos = uvarint(pos)
		fn(path, Pos{Line: int(line), Column: int(col)})
	}
}

// uvarint decodes one varint from the front of s and returns it with the rest; a malformed varint ends s.
func uvarint(s string) (uint64, string) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		b := s[i]
		if b < 0x80 {
			return x | uint64(b)<<shift, s[i+1:]
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	return 0, ""
}

// FieldsBuilder records positions into a Fields.
type FieldsBuilder struct {
	paths []byte
	pos   []byte
	last  string
}

// Add records the position of path; a path recorded twice is found at its last position.
func (b *FieldsBuilder) Add(path string, pos Pos) {
	shared := 0
	for shared < len(path) && shared < len(b.last) && path[shared] == b.last[shared] {
		shared++
	}
	b.paths = binary.AppendUvarint(b.paths, uint64(shared))
	b.paths = binary.AppendUvarint(b.paths, uint64(len(path)-shared))
	b.paths = append(b.paths, path[shared:]...)
	b.pos = binary.AppendUvarint(b.pos, uint64(max(pos.Line, 0)))
	b.pos = binary.AppendUvarint(b.pos, uint64(max(pos.Column, 0)))
	b.last = path
}

// Lookup returns what Fields.Lookup would return for what was added so far.
func (b *FieldsBuilder) Lookup(path string) Pos {
	return b.view().Lookup(path)
}

// Has returns what Fields.Has would return for what was added so far.
func (b *FieldsBuilder) Has(path string) bool {
	return b.view().Has(path)
}

func (b *FieldsBuilder) view() Fields {
	return Fields{paths: string(b.paths), pos: string(b.pos)}
}

// Fields returns what was added, in strings of its own (the paths shared with documents of the same
// shape).
func (b *FieldsBuilder) Fields() Fields {
	return Fields{paths: shareShape(b.paths), pos: string(b.pos)}
}
