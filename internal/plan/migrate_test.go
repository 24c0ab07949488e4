package plan_test

import (
	"testing"

	"github.com/proxops/proxops/internal/plan"
)

// A node's executor bounds the operations it runs, a migration among them, but not the migrations coming
// into it: those are bounded by reconcile.migration-concurrency. Whatever the nodes, no more than that many
// migrations of a plan can run at once: each waits, through its dependencies, for the one that many places
// before it, so a node emptied onto another receives at most that many at a time.
func TestMigrationsIntoOneNodeRunAtMostMigrationConcurrencyAtOnce(t *testing.T) {
	for _, k := range []int{1, 2, 4} {
		c := loadCase(t, "testdata/cases/migrate-mass-held")
		c.input.Settings.MaxMigrations = 0
		c.input.Settings.MigrationConcurrency = k
		p, err := plan.Diff(c.input)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]plan.Operation{}
		var moves []plan.Operation
		for _, op := range p.Operations {
			byID[op.ID] = op
			if op.Action.Moves() {
				moves = append(moves, op)
			}
		}
		if len(moves) != 6 {
			t.Fatalf("k=%d: %d moves, want 6", k, len(moves))
		}
		var after func(op plan.Operation, id string) bool
		after = func(op plan.Operation, id string) bool {
			for _, d := range op.DependsOn {
				if d == id || after(byID[d], id) {
					return true
				}
			}
			return false
		}
		// At most k run at once: among any k+1 moves, one waits for another; and k of them may.
		ordered := func(set []int) bool {
			for _, i := range set {
				for _, j := range set {
					if i != j && after(moves[j], moves[i].ID) {
						return true
					}
				}
			}
			return false
		}
		var together int
		for _, set := range subsets(len(moves), k+1) {
			if !ordered(set) {
				t.Errorf("k=%d: moves %v may all run at once", k, set)
			}
		}
		for _, set := range subsets(len(moves), k) {
			if !ordered(set) {
				together++
			}
		}
		if together == 0 {
			t.Errorf("k=%d: no %d moves may run at once", k, k)
		}
	}
}

// subsets lists the size-element subsets of 0..n-1.
func subsets(n, size int) [][]int {
	if size == 0 {
		return [][]int{nil}
	}
	var out [][]int
	for first := 0; first <= n-size; first++ {
		for _, rest := range subsets(n-first-1, size-1) {
			set := []int{first}
			for _, r := range rest {
				set = append(set, first+1+r)
			}
			out = append(out, set)
		}
	}
	return out
}
