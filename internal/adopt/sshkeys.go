package adopt

import "slices"

// maxKeySets bounds how many sets of secrets-file entries are digested while matching live SSH keys: every
// set when the file has up to 16 keys, else sets of one, two, three... entries until the bound.
const maxKeySets = 1 << 16

// keyMatcher finds, for the digest of a guest's live SSH keys (all an inventory carries), the smallest set
// of secrets-file entries whose keys are exactly those keys: then every live key is in the file, and the
// guest gets ssh-key-refs. Sets are tried by size, then in the order of their references, so the answer is
// deterministic; the digests are computed once per adoption.
type keyMatcher struct {
	store  KeyStore
	byHash map[string][]string
	ready  bool
}

func newKeyMatcher(s KeyStore) *keyMatcher { return &keyMatcher{store: s} }

// match returns the references whose keys have the digest, or nil.
func (m *keyMatcher) match(digest string) []string {
	if m.store == nil {
		return nil
	}
	if !m.ready {
		m.build()
	}
	return slices.Clone(m.byHash[digest])
}

func (m *keyMatcher) build() {
	m.ready = true
	m.byHash = map[string][]string{}
	refs := m.store.SSHKeyRefs()
	budget := maxKeySets
	for size := 1; size <= len(refs) && budget > 0; size++ {
		idx := make([]int, size)
		for i := range idx {
			idx[i] = i
		}
		for budget > 0 {
			set := make([]string, size)
			for i, j := range idx {
				set[i] = refs[j]
			}
			budget--
			if d, err := m.store.SSHKeysDigest(set); err == nil {
				if _, seen := m.byHash[d]; !seen {
					m.byHash[d] = set
				}
			}
			if !nextCombination(idx, len(refs)) {
				break
			}
		}
	}
}

// nextCombination advances idx to the next k-combination of 0..n-1 in lexicographic order.
func nextCombination(idx []int, n int) bool {
	k := len(idx)
	i := k - 1
	for i >= 0 && idx[i] == n-k+i {
		i--
	}
	if i < 0 {
		return false
	}
	idx[i]++
	for j := i + 1; j < k; j++ {
		idx[j] = idx[j-1] + 1
	}
	return true
}
