package diag_test

import (
	"testing"

	"github.com/proxops/proxops/internal/diag"
)

func TestStringLeavesOutUnknownParts(t *testing.T) {
	cases := []struct {
		d    diag.Diagnostic
		want string
	}{
		{diag.Diagnostic{Severity: diag.Error, File: "vm/base/a.yaml", Line: 3, Column: 5, Ref: "VM/a", Field: "spec.memory", Message: "bad"},
			"vm/base/a.yaml:3:5: VM/a: spec.memory: bad"},
		{diag.Diagnostic{Severity: diag.Warning, File: "x.yaml", Line: 1, Message: "unknown field"},
			"x.yaml:1: warning: unknown field"},
		{diag.Diagnostic{Severity: diag.Error, Message: "dependency cycle detected: VM/a → VM/b → VM/a"},
			"dependency cycle detected: VM/a → VM/b → VM/a"},
	}
	for _, c := range cases {
		if got := c.d.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}

func TestSortedIsTotalAndRemovesDuplicates(t *testing.T) {
	a := diag.Diagnostic{Severity: diag.Error, File: "b.yaml", Line: 1, Message: "x"}
	b := diag.Diagnostic{Severity: diag.Warning, File: "a.yaml", Line: 9, Message: "y"}
	c := diag.Diagnostic{Severity: diag.Error, File: "a.yaml", Line: 2, Message: "z"}
	got := diag.List{a, b, c, a}.Sorted()
	want := diag.List{c, b, a}
	if len(got) != len(want) {
		t.Fatalf("Sorted() has %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Sorted()[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if e, w := got.Count(); e != 2 || w != 1 {
		t.Errorf("Count() = %d, %d; want 2, 1", e, w)
	}
	if !got.HasErrors() || (diag.List{b}).HasErrors() {
		t.Error("HasErrors() is wrong")
	}
}
