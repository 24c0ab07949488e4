package yamldecode

import (
	"hash/maphash"
	"sync/atomic"
)

// A repository of thousands of manifests repeats itself: the same values (a node, a storage, a bridge, a
// CPU type) and the same fields in the same order. What recurs is held once through two fixed tables, each
// slot holding the last string stored there: their size never grows, a string that loses its slot is
// merely not shared, and they are safe to use from any goroutine.

var seed = maphash.MakeSeed()

// maxShared is the longest value shared; longer values rarely recur.
const maxShared = 64

// values holds recently read short values: those the plain parser read, with the tag yaml.v3 resolves each
// to, and those the decoder stored (tag not known yet).
var values [4096]atomic.Pointer[sharedValue]

type sharedValue struct {
	value string
	tag   string // "" until the plain parser asks
}

// share returns a string equal to s, the one already held if a recent document decoded the same value.
func share(s string) string {
	if len(s) == 0 || len(s) > maxShared {
		return s
	}
	slot := &values[maphash.String(seed, s)%uint64(len(values))]
	if p := slot.Load(); p != nil && p.value == s {
		return p.value
	}
	slot.Store(&sharedValue{value: s})
	return s
}

// sharePlain returns the text of a plain scalar as a string, the one already held if a recent document read
// the same value, and the tag yaml.v3 resolves it to: a value or key a repository repeats is neither copied
// nor resolved again.
func sharePlain(b []byte) (value, tag string) {
	if len(b) == 0 || len(b) > maxShared {
		value = string(b)
		return value, plainTag(value)
	}
	slot := &values[maphash.Bytes(seed, b)%uint64(len(values))]
	e := slot.Load()
	switch {
	case e != nil && e.value == string(b) && e.tag != "":
		return e.value, e.tag
	case e != nil && e.value == string(b):
		e = &sharedValue{value: e.value} // the decoder's: the same string, now with its tag
	default:
		e = &sharedValue{value: string(b)}
	}
	e.tag = plainTag(e.value)
	slot.Store(e)
	return e.value, e.tag
}

// maxShape is the longest encoded list of paths shared (a manifest of about a hundred fields).
const maxShape = 2048

// shapes holds the encoded path lists of recently decoded documents (see Fields).
var shapes [256]atomic.Pointer[string]

// shareShape returns the encoded path list b as a string, the one already held if a recent document had
// the same fields in the same order.
func shareShape(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > maxShape {
		return string(b)
	}
	slot := &shapes[maphash.Bytes(seed, b)%uint64(len(shapes))]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}
