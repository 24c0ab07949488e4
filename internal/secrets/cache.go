package secrets

import (
	"context"
	"errors"
	"sync"
)

// DefaultCacheSize is how many decrypted files a Decryptor keeps.
const DefaultCacheSize = 32

// Decryptor decrypts secrets files and keeps the result keyed by the file's name and the SHA-256 of its
// encrypted bytes: the same bytes give the same *Store without decrypting again, and a new commit of the file
// (a rotated token) gives a new Store on the next call, without a restart. Failures are not kept, so a fixed
// key file is picked up on the next call. Concurrent calls for the same bytes decrypt once. It is safe for
// concurrent use.
//
// A cached Store stays valid when the key source changes: the process already holds its plaintext, and the
// same encrypted bytes can only decrypt to the same values.
type Decryptor struct {
	keys KeySource
	size int

	mu      sync.Mutex
	tick    uint64
	entries map[cacheKey]*cacheEntry
}

type cacheKey struct {
	file   string
	digest string
}

type cacheEntry struct {
	ready chan struct{} // closed when store/err are set
	store *Store
	err   error
	used  uint64
}

// NewDecryptor returns a Decryptor that takes age identities from keys and keeps up to DefaultCacheSize
// decrypted files, dropping the least recently used.
func NewDecryptor(keys KeySource) *Decryptor {
	return &Decryptor{keys: keys, size: DefaultCacheSize, entries: map[cacheKey]*cacheEntry{}}
}

// Decrypt returns the Store for data, decrypting it only when these bytes of this file are not cached.
func (d *Decryptor) Decrypt(ctx context.Context, file string, data []byte) (*Store, error) {
	key := cacheKey{file: file, digest: contentDigest(data)}
	for {
		d.mu.Lock()
		d.tick++
		if e, ok := d.entries[key]; ok {
			e.used = d.tick
			d.mu.Unlock()
			select {
			case <-e.ready:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if e.err != nil && isContextError(e.err) && ctx.Err() == nil {
				continue // the caller that decrypted gave up; try again with this caller's context
			}
			return e.store, e.err
		}
		e := &cacheEntry{ready: make(chan struct{}), used: d.tick}
		d.entries[key] = e
		d.evictLocked()
		d.mu.Unlock()

		store, err := Decrypt(ctx, file, data, d.keys)

		d.mu.Lock()
		e.store, e.err = store, err
		if err != nil {
			delete(d.entries, key)
		}
		d.mu.Unlock()
		close(e.ready)
		return store, err
	}
}

// Len returns how many decrypted files are cached.
func (d *Decryptor) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, e := range d.entries {
		select {
		case <-e.ready:
			n++
		default:
		}
	}
	return n
}

// evictLocked drops the least recently used finished entries beyond the cache size.
func (d *Decryptor) evictLocked() {
	for len(d.entries) > d.size {
		var oldest cacheKey
		var oldestUsed uint64
		found := false
		for k, e := range d.entries {
			select {
			case <-e.ready:
			default:
				continue // being decrypted
			}
			if !found || e.used < oldestUsed { // ticks are unique, so the order is total
				oldest, oldestUsed, found = k, e.used, true
			}
		}
		if !found {
			return
		}
		delete(d.entries, oldest)
	}
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
