package firewall

import (
	"slices"
	"testing"
)

// FuzzPlan: whatever the two lists, replaying the planned edits yields the declared list.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{1, 2, 3}, []byte{3, 2, 1})
	f.Add([]byte{}, []byte{1, 1, 1})
	f.Add([]byte{5, 5, 4}, []byte{})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		if len(a) > 40 || len(b) > 40 {
			return
		}
		toRules := func(bs []byte) []Rule {
			var out []Rule
			for _, x := range bs {
				r := ruleN(int(x % 11))
				r.Enable = x&0x80 == 0
				out = append(out, r)
			}
			return out
		}
		live, declared := toRules(a), toRules(b)
		if got := replay(t, live, Plan(live, declared)); !slices.Equal(got, declared) {
			t.Fatalf("got %v, want %v", got, declared)
		}
	})
}
