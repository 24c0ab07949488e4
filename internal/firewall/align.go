package firewall

import (
	"cmp"
	"slices"
	"sort"
)

// ChangeKind says how a rule differs between a live and a declared list.
type ChangeKind string

const (
	Added   ChangeKind = "added"
	Removed ChangeKind = "removed"
	Changed ChangeKind = "changed"
	Moved   ChangeKind = "moved"
)

// RuleChange is one rule that differs, for a reviewer: where it was (From, -1 when added) and where it
// goes (To, -1 when removed).
type RuleChange struct {
	Kind     ChangeKind
	From, To int
	Before   Rule
	After    Rule
}

// Compare lines a live list up with a declared one as a reviewer reads it: the rules in the same order in
// both (a longest common subsequence) are unchanged; a live rule equal to a declared one elsewhere moved; a
// live rule between the same unchanged neighbours as a declared one changed in place; the rest is added or
// removed. Removed rules come first (by live position), then the others by declared position.
func Compare(live, declared []Rule) []RuleChange {
	anchors := lcs(live, declared)
	usedL, usedD := make([]bool, len(live)), make([]bool, len(declared))
	for _, a := range anchors {
		usedL[a[0]], usedD[a[1]] = true, true
	}
	var out []RuleChange
	for j := range declared {
		if usedD[j] {
			continue
		}
		for i := range live {
			if !usedL[i] && live[i] == declared[j] {
				usedL[i], usedD[j] = true, true
				out = append(out, RuleChange{Kind: Moved, From: i, To: j, Before: live[i], After: declared[j]})
				break
			}
		}
	}
	gapOf := func(idx, side int) int {
		return sort.Search(len(anchors), func(k int) bool { return anchors[k][side] >= idx })
	}
	for j := range declared {
		if usedD[j] {
			continue
		}
		for i := range live {
			if !usedL[i] && gapOf(i, 0) == gapOf(j, 1) {
				usedL[i], usedD[j] = true, true
				out = append(out, RuleChange{Kind: Changed, From: i, To: j, Before: live[i], After: declared[j]})
				break
			}
		}
	}
	for j := range declared {
		if !usedD[j] {
			out = append(out, RuleChange{Kind: Added, From: -1, To: j, After: declared[j]})
		}
	}
	for i := range live {
		if !usedL[i] {
			out = append(out, RuleChange{Kind: Removed, From: i, To: -1, Before: live[i]})
		}
	}
	slices.SortFunc(out, func(a, b RuleChange) int {
		if (a.Kind == Removed) != (b.Kind == Removed) {
			if a.Kind == Removed {
				return -1
			}
			return 1
		}
		if a.Kind == Removed {
			return cmp.Compare(a.From, b.From)
		}
		return cmp.Compare(a.To, b.To)
	})
	return out
}
