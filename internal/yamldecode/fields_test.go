package yamldecode_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/yamldecode"
)

// Fields answers every lookup as the map of positions it replaces does: exact paths, ancestors, paths
// recorded twice (the last position wins), long paths, keys that hold dots or brackets, and the empty path.
func TestFieldsAnswerLookupsAsPositionsDo(t *testing.T) {
	long := "spec.extra." + strings.Repeat("k", 300)
	recorded := []struct {
		path string
		pos  yamldecode.Pos
	}{
		{"apiVersion", yamldecode.Pos{Line: 1, Column: 13}},
		{"metadata", yamldecode.Pos{Line: 3, Column: 1}},
		{"metadata.name", yamldecode.Pos{Line: 4, Column: 9}},
		{"metadata.labels.example.com/tier", yamldecode.Pos{Line: 6, Column: 25}},
		{"spec", yamldecode.Pos{Line: 7, Column: 1}},
		{"spec.disks", yamldecode.Pos{Line: 8, Column: 3}},
		{"spec.disks[0]", yamldecode.Pos{Line: 9, Column: 7}},
		{"spec.disks[0].size", yamldecode.Pos{Line: 9, Column: 30}},
		{"spec.disks[10]", yamldecode.Pos{Line: 300, Column: 7}},
		{"spec.disks[10].size", yamldecode.Pos{Line: 300, Column: 200000}},
		{long, yamldecode.Pos{Line: 70000, Column: 3}},
		{"spec.disks[0].size", yamldecode.Pos{Line: 11, Column: 30}},
		{"", yamldecode.Pos{Line: 1, Column: 1}},
	}
	var b yamldecode.FieldsBuilder
	want := yamldecode.Positions{}
	for _, r := range recorded {
		b.Add(r.path, r.pos)
		want[r.path] = r.pos
	}
	f := b.Fields()
	queries := []string{"", "kind", "metadata.name", "metadata.namespace", "metadata.labels.example.com/tier",
		"metadata.labels.other", "spec.disks[0].size", "spec.disks[0].storage", "spec.disks[1].size",
		"spec.disks[10].size", "spec.disks[10]", "spec.disks", "spec.cpu.type", long, long + ".x", "spec.extra"}
	for _, q := range queries {
		if got, w := f.Lookup(q), want.Lookup(q); got != w {
			t.Errorf("Lookup(%q) = %+v, want %+v", q, got, w)
		}
		if got, w := b.Lookup(q), want.Lookup(q); got != w {
			t.Errorf("builder Lookup(%q) = %+v, want %+v", q, got, w)
		}
		_, w := want[q]
		if got := f.Has(q); got != w {
			t.Errorf("Has(%q) = %v, want %v", q, got, w)
		}
	}
	if got := f.Positions(); len(got) != len(want) {
		t.Errorf("Positions() has %d paths, want %d", len(got), len(want))
	}
	if (yamldecode.Fields{}).Lookup("spec") != (yamldecode.Pos{}) || (yamldecode.Fields{}).Has("") {
		t.Error("an empty record finds something")
	}
}

// Documents with the same fields in the same order hold one copy of the paths between them, whatever
// their positions.
func TestDocumentsOfTheSameShapeShareTheirPaths(t *testing.T) {
	fields := func(line int) yamldecode.Fields {
		var b yamldecode.FieldsBuilder
		for i, p := range []string{"kind", "metadata", "metadata.name", "spec", "spec.node", "spec.vmid"} {
			b.Add(p, yamldecode.Pos{Line: line + i, Column: 3})
		}
		return b.Fields()
	}
	a, b := fields(1), fields(40)
	if a.Lookup("spec.vmid") != (yamldecode.Pos{Line: 6, Column: 3}) || b.Lookup("spec.vmid") != (yamldecode.Pos{Line: 45, Column: 3}) {
		t.Fatalf("positions: %+v, %+v", a.Positions(), b.Positions())
	}
	if pa, pb := a.PathsData(), b.PathsData(); pa != pb {
		t.Error("two documents of the same shape hold a copy of the paths each")
	}
}
