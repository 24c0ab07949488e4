package firewall

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func ruleN(n int) Rule {
	return Rule{Type: "in", Action: "ACCEPT", Proto: "tcp", DPort: string(rune('0' + n%10)), Comment: string(rune('a' + n%26)), Enable: true}
}

func rules(ns ...int) []Rule {
	var out []Rule
	for _, n := range ns {
		out = append(out, ruleN(n))
	}
	return out
}

// replay applies the edits to live, checking each edit's Before against the list it finds.
func replay(t testing.TB, live []Rule, edits []Edit) []Rule {
	t.Helper()
	cur := slices.Clone(live)
	for i, e := range edits {
		if !slices.Equal(e.Before, cur) {
			t.Fatalf("edit %d (%s) expects %v, finds %v", i, e, e.Before, cur)
		}
		next, err := Apply(cur, e)
		if err != nil {
			t.Fatalf("edit %d (%s): %v", i, e, err)
		}
		cur = next
	}
	return cur
}

func kinds(edits []Edit) []EditKind {
	var out []EditKind
	for _, e := range edits {
		out = append(out, e.Kind)
	}
	return out
}

func TestPlanObviousCasesTakeTheFewestWrites(t *testing.T) {
	changed := ruleN(2)
	changed.Comment = "changed"
	cases := []struct {
		name           string
		live, declared []Rule
		want           []EditKind
	}{
		{"unchanged", rules(1, 2, 3), rules(1, 2, 3), nil},
		{"empty to empty", nil, nil, nil},
		{"insert on top", rules(1, 2), rules(0, 1, 2), []EditKind{Create}},
		{"insert in the middle is a create and a move", rules(1, 3), rules(1, 2, 3), []EditKind{Create, Move}},
		{"append", rules(1, 2), rules(1, 2, 3), []EditKind{Create, Move}},
		{"remove", rules(1, 2, 3), rules(1, 3), []EditKind{Delete}},
		{"swap two neighbours", rules(1, 2), rules(2, 1), []EditKind{Move}},
		{"swap in a longer list", rules(1, 2, 3, 4), rules(1, 3, 2, 4), []EditKind{Move}},
		{"last to first", rules(1, 2, 3, 4), rules(4, 1, 2, 3), []EditKind{Move}},
		{"first to last", rules(1, 2, 3, 4), rules(2, 3, 4, 1), []EditKind{Move}},
		{"one field of one rule", rules(1, 2, 3), []Rule{ruleN(1), changed, ruleN(3)}, []EditKind{Update}},
		{"replace everything", rules(1, 2), rules(3, 4), []EditKind{Update, Update}},
		{"clear", rules(1, 2), nil, []EditKind{Delete, Delete}},
		{"from nothing", nil, rules(1, 2), []EditKind{Create, Create}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			edits := Plan(tc.live, tc.declared)
			if got := replay(t, tc.live, edits); !slices.Equal(got, tc.declared) {
				t.Fatalf("result %v, want %v", got, tc.declared)
			}
			if got := kinds(edits); !slices.Equal(got, tc.want) {
				t.Fatalf("edits %v (%v), want %v", got, edits, tc.want)
			}
		})
	}
}

func TestApplyMovesAsPVEDoes(t *testing.T) {
	list := rules(0, 1, 2, 3)
	cases := []struct {
		pos, to int
		want    []Rule
	}{
		{0, 2, rules(1, 0, 2, 3)},
		{3, 0, rules(3, 0, 1, 2)},
		{1, 9, rules(0, 2, 3, 1)},
		{2, 2, rules(0, 1, 2, 3)},
	}
	for _, tc := range cases {
		got, err := Apply(list, Edit{Kind: Move, Pos: tc.pos, MoveTo: tc.to})
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("move %d→%d: %v %v, want %v", tc.pos, tc.to, got, err, tc.want)
		}
	}
	if _, err := Apply(list, Edit{Kind: Delete, Pos: 4}); err == nil {
		t.Error("a delete past the end succeeded")
	}
}

// For random pairs of lists (with duplicates), the plan turns live into declared, never takes more writes
// than deleting and recreating everything, and a permutation only moves.
func TestPlanPropertyAlwaysReachesTheDeclaredList(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	randList := func() []Rule {
		n := r.IntN(9)
		out := make([]Rule, n)
		for i := range out {
			out[i] = ruleN(r.IntN(7))
			out[i].Enable = r.IntN(5) != 0
		}
		return out
	}
	for range 3000 {
		live, declared := randList(), randList()
		edits := Plan(live, declared)
		if got := replay(t, live, edits); !slices.Equal(got, declared) {
			t.Fatalf("live %v declared %v: got %v via %v", live, declared, got, edits)
		}
		if len(edits) > len(live)+2*len(declared) {
			t.Fatalf("%d edits for %d→%d rules", len(edits), len(live), len(declared))
		}
		perm := slices.Clone(live)
		r.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		for _, e := range Plan(live, perm) {
			if e.Kind != Move {
				t.Fatalf("a reorder of %v into %v writes %s", live, perm, e)
			}
		}
	}
}
