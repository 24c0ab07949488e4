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

// values holds recently decoded short values.
var values [4096]atomic.Pointer[string]

// share returns a string equal to s, the one already held if a recent document decoded the same value.
func share(s string) string {
	if len(s) == 0 || len(s) > maxShared {
		return s
	}
	slot := &values[maphash.String(seed, s)%uint64(len(values))]
	if p := slot.Load(); p != nil && *p == s {
		return *p
	}
	slot.Store(&s)
	return s
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
