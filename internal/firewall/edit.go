package firewall

import (
	"fmt"
	"slices"
	"sort"
)

// EditKind is one of the writes PVE's rules endpoints offer.
type EditKind int

// The writes, as PVE performs them (pve-firewall API2/Firewall/Rules.pm):
const (
	// Create is POST …/rules: the new rule always goes first (PVE ignores pos on create).
	Create EditKind = iota + 1
	// Update is PUT …/rules/{pos} with the rule's properties and delete= for removed ones.
	Update
	// Move is PUT …/rules/{pos} with moveto: the rule is taken out and put before the rule that was at
	// moveto (last when moveto is past the end).
	Move
	// Delete is DELETE …/rules/{pos}.
	Delete
)

func (k EditKind) String() string {
	switch k {
	case Create:
		return "create"
	case Update:
		return "update"
	case Move:
		return "move"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("edit(%d)", int(k))
}

// Edit is one write. Before is the rule list the write expects to find: the executor reads the live list,
// refuses to write when it differs (a concurrent edit), and sends the digest it read, so an edit between
// its read and its write is refused by PVE.
type Edit struct {
	Kind   EditKind
	Pos    int  // Update, Move, Delete: the rule's position
	MoveTo int  // Move: PVE's moveto
	Rule   Rule // Create, Update: the rule as it will be
	Before []Rule
}

// String renders the edit for plans: "create at 0: in ACCEPT …", "move 3 → 0".
func (e Edit) String() string {
	switch e.Kind {
	case Create:
		return "create at 0: " + e.Rule.String()
	case Update:
		return fmt.Sprintf("update %d: %s", e.Pos, e.Rule.String())
	case Move:
		return fmt.Sprintf("move %d before %d", e.Pos, e.MoveTo)
	case Delete:
		return fmt.Sprintf("delete %d", e.Pos)
	}
	return e.Kind.String()
}

// Apply performs one edit on a rule list as PVE does and returns the new list; the input is not changed.
func Apply(list []Rule, e Edit) ([]Rule, error) {
	switch e.Kind {
	case Create:
		return append([]Rule{e.Rule}, list...), nil
	case Update, Move, Delete:
		if e.Pos < 0 || e.Pos >= len(list) {
			return nil, fmt.Errorf("no rule at position %d", e.Pos)
		}
	default:
		return nil, fmt.Errorf("unknown edit %d", int(e.Kind))
	}
	switch e.Kind {
	case Update:
		out := slices.Clone(list)
		out[e.Pos] = e.Rule
		return out, nil
	case Delete:
		return slices.Delete(slices.Clone(list), e.Pos, e.Pos+1), nil
	case Create, Move:
		// A create returned above; a move is applied below.
	}
	if e.MoveTo < 0 {
		return nil, fmt.Errorf("invalid moveto %d", e.MoveTo)
	}
	if e.MoveTo == e.Pos {
		return slices.Clone(list), nil
	}
	out := make([]Rule, 0, len(list))
	for i, r := range list {
		if i == e.Pos {
			continue
		}
		if i == e.MoveTo {
			out = append(out, list[e.Pos])
		}
		out = append(out, r)
	}
	if e.MoveTo >= len(list) {
		out = append(out, list[e.Pos])
	}
	return out, nil
}

// Plan computes writes that turn live into declared, each with the list it expects before it. The rules
// live already has in the declared order stay untouched (a longest common subsequence); a live rule equal
// to a declared one elsewhere is moved; the other live rules are changed in place into declared ones
// (first those between the same untouched neighbours, then any, moved afterwards); what is left over is
// deleted, and what is still missing is created (on top, where PVE puts a new rule). Finally the fewest
// moves put every rule in place (those on a longest increasing run stay).
func Plan(live, declared []Rule) []Edit {
	n, m := len(live), len(declared)
	target := make([]int, n) // live index → declared index, -1 to delete
	for i := range target {
		target[i] = -1
	}
	used := make([]bool, m)
	anchors := lcs(live, declared)
	for _, a := range anchors {
		target[a[0]], used[a[1]] = a[1], true
	}
	// Equal rules elsewhere: a move, no change.
	for i := range live {
		if target[i] >= 0 {
			continue
		}
		for j := range declared {
			if !used[j] && live[i] == declared[j] {
				target[i], used[j] = j, true
				break
			}
		}
	}
	// Changes in place between the same anchors keep their position.
	gapOf := func(idx int, side int) int {
		return sort.Search(len(anchors), func(k int) bool { return anchors[k][side] >= idx })
	}
	for i := range live {
		if target[i] >= 0 {
			continue
		}
		g := gapOf(i, 0)
		for j := range declared {
			if !used[j] && gapOf(j, 1) == g {
				target[i], used[j] = j, true
				break
			}
		}
	}
	// Any other change: one update and one move beat a delete, a create and a move.
	for i := range live {
		if target[i] >= 0 {
			continue
		}
		for j := range declared {
			if !used[j] {
				target[i], used[j] = j, true
				break
			}
		}
	}

	var edits []Edit
	cur := slices.Clone(live)
	tags := slices.Clone(target)
	emit := func(e Edit) {
		e.Before = slices.Clone(cur)
		next, err := Apply(cur, e)
		if err != nil {
			panic("firewall: planned an impossible edit: " + err.Error())
		}
		cur = next
		edits = append(edits, e)
	}
	for p := len(cur) - 1; p >= 0; p-- {
		if tags[p] < 0 {
			emit(Edit{Kind: Delete, Pos: p})
			tags = slices.Delete(tags, p, p+1)
		}
	}
	for p, t := range tags {
		if cur[p] != declared[t] {
			emit(Edit{Kind: Update, Pos: p, Rule: declared[t]})
		}
	}
	for j := m - 1; j >= 0; j-- {
		if !used[j] {
			emit(Edit{Kind: Create, Rule: declared[j]})
			tags = append([]int{j}, tags...)
		}
	}
	settled := map[int]bool{}
	for _, t := range lis(tags) {
		settled[t] = true
	}
	for t := 0; t < m; t++ {
		if settled[t] {
			continue
		}
		p := slices.Index(tags, t)
		q := -1 // the position of the settled rule that must precede it
		for k, o := range tags {
			if settled[o] && o < t && (q < 0 || o > tags[q]) {
				q = k
			}
		}
		if p != q+1 {
			emit(Edit{Kind: Move, Pos: p, MoveTo: q + 1})
			tags = MoveRule(tags, p, q+1)
		}
		settled[t] = true
	}
	return edits
}

// MoveRule is PVE's move of the rule at pos to position to (update_rule with moveto): it is taken out and put
// before the rule that stood at to, or last when to is past the end.
func MoveRule[T any](list []T, pos, to int) []T {
	out := make([]T, 0, len(list))
	for i, v := range list {
		if i == pos {
			continue
		}
		if i == to {
			out = append(out, list[pos])
		}
		out = append(out, v)
	}
	if to >= len(list) {
		out = append(out, list[pos])
	}
	return out
}

// lcs returns index pairs (live, declared) of a longest common subsequence of equal rules.
func lcs(a, b []Rule) [][2]int {
	n, m := len(a), len(b)
	dp := make([][]int, n+1)
	for i := range dp {
		dp[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	var out [][2]int
	for i, j := 0, 0; i < n && j < m; {
		switch {
		case a[i] == b[j]:
			out = append(out, [2]int{i, j})
			i++
			j++
		case dp[i+1][j] >= dp[i][j+1]:
			i++
		default:
			j++
		}
	}
	return out
}

// lis returns the values of a longest strictly increasing subsequence.
func lis(v []int) []int {
	var tails []int // index into v of the smallest tail of each length
	prev := make([]int, len(v))
	for i, x := range v {
		k := sort.Search(len(tails), func(k int) bool { return v[tails[k]] >= x })
		if k > 0 {
			prev[i] = tails[k-1]
		} else {
			prev[i] = -1
		}
		if k == len(tails) {
			tails = append(tails, i)
		} else {
			tails[k] = i
		}
	}
	out := make([]int, len(tails))
	if len(tails) == 0 {
		return out
	}
	for k, i := len(tails)-1, tails[len(tails)-1]; k >= 0; k-- {
		out[k] = v[i]
		i = prev[i]
	}
	return out
}
