package graph_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/graph"
	"github.com/proxops/proxops/internal/manifest"
)

func ref(s string) manifest.Ref {
	r, ok := manifest.ParseRef(s)
	if !ok {
		panic("bad ref " + s)
	}
	return r
}

func build(nodes []string, edges [][2]string) *graph.Graph {
	var refs []manifest.Ref
	for _, n := range nodes {
		refs = append(refs, ref(n))
	}
	g := graph.New(refs)
	for _, e := range edges {
		g.AddEdge(ref(e[0]), ref(e[1]), "test")
	}
	return g
}

func strs(refs []manifest.Ref) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.String())
	}
	return out
}

func TestOrderPutsPrerequisitesFirstAndIsTotal(t *testing.T) {
	g := build(
		[]string{"VM/app", "ISO/talos", "CTTemplate/base", "LXC/cache", "VM/clone", "TemplateVM/tpl", "DiskImage/img", "VM/solo"},
		[][2]string{
			{"VM/app", "ISO/talos"}, {"VM/app", "CTTemplate/base"}, {"LXC/cache", "CTTemplate/base"},
			{"VM/clone", "TemplateVM/tpl"}, {"TemplateVM/tpl", "DiskImage/img"},
		})
	want := []string{"CTTemplate/base", "DiskImage/img", "ISO/talos", "VM/solo", "LXC/cache", "TemplateVM/tpl", "VM/app", "VM/clone"}
	if diff := cmp.Diff(want, strs(g.Order())); diff != "" {
		t.Errorf("Order() mismatch (-want +got):\n%s", diff)
	}
	levels := g.Levels()
	if levels[ref("VM/clone")] != 2 || levels[ref("TemplateVM/tpl")] != 1 || levels[ref("ISO/talos")] != 0 {
		t.Errorf("Levels() = %v", levels)
	}
	if len(g.Cycles()) != 0 || len(g.Blocked()) != 0 {
		t.Errorf("acyclic graph reports cycles %v, blocked %v", g.Cycles(), g.Blocked())
	}
}

func TestCyclesNameTheWholePathFromTheSmallestResource(t *testing.T) {
	g := build(
		[]string{"VM/c", "VM/a", "VM/b", "VM/d", "LXC/self", "VM/after"},
		[][2]string{{"VM/a", "VM/b"}, {"VM/b", "VM/c"}, {"VM/c", "VM/a"}, {"VM/b", "VM/d"}, {"LXC/self", "LXC/self"}, {"VM/after", "VM/a"}},
	)
	var got []string
	for _, c := range g.Cycles() {
		got = append(got, c.String())
	}
	want := []string{"LXC/self → LXC/self", "VM/a → VM/b → VM/c → VM/a"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Cycles() mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"VM/d"}, strs(g.Order())); diff != "" {
		t.Errorf("Order() keeps only the acyclic part (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"LXC/self", "VM/a", "VM/after", "VM/b", "VM/c"}, strs(g.Blocked())); diff != "" {
		t.Errorf("Blocked() mismatch (-want +got):\n%s", diff)
	}
}

func TestCycleReportIsShortestAndDeterministic(t *testing.T) {
	// Two ways back to VM/a: the direct one via VM/z is shorter than VM/b → VM/c.
	edges := [][2]string{{"VM/a", "VM/b"}, {"VM/b", "VM/c"}, {"VM/c", "VM/a"}, {"VM/a", "VM/z"}, {"VM/z", "VM/a"}}
	for range 20 {
		g := build([]string{"VM/z", "VM/c", "VM/b", "VM/a"}, edges)
		cycles := g.Cycles()
		if len(cycles) != 1 || cycles[0].String() != "VM/a → VM/z → VM/a" {
			t.Fatalf("Cycles() = %v, want [VM/a → VM/z → VM/a]", cycles)
		}
	}
}

func TestAddEdgeIgnoresUnknownResources(t *testing.T) {
	g := build([]string{"VM/a"}, nil)
	if g.AddEdge(ref("VM/a"), ref("ISO/missing"), "spec.hardware.cdrom.iso") {
		t.Error("AddEdge to a resource outside the graph reported true")
	}
	if len(g.Edges()) != 0 {
		t.Errorf("Edges() = %v, want none", g.Edges())
	}
}

func TestFromResourcesUsesStructuredAndAnnotationEdges(t *testing.T) {
	vm := &manifest.Resource{Kind: manifest.KindVM, Metadata: manifest.Metadata{Name: "app",
		Annotations: map[string]string{manifest.AnnotationDependsOn: "ctt:base, LXC:cache"}},
		Spec: &manifest.VMSpec{Disks: []manifest.Disk{{Image: "img"}}, Hardware: &manifest.Hardware{CDROM: &manifest.CDROM{ISO: "talos"}}}}
	lxc := &manifest.Resource{Kind: manifest.KindLXC, Metadata: manifest.Metadata{Name: "cache"}, Spec: &manifest.LXCSpec{Template: "base"}}
	iso := &manifest.Resource{Kind: manifest.KindISO, Metadata: manifest.Metadata{Name: "talos"}, Spec: &manifest.ArtifactSpec{}}
	ctt := &manifest.Resource{Kind: manifest.KindCTTemplate, Metadata: manifest.Metadata{Name: "base"}, Spec: &manifest.ArtifactSpec{}}
	img := &manifest.Resource{Kind: manifest.KindDiskImage, Metadata: manifest.Metadata{Name: "img"}, Spec: &manifest.ArtifactSpec{}}
	g := graph.FromResources([]*manifest.Resource{vm, lxc, iso, ctt, img})
	want := []string{"CTTemplate/base", "DiskImage/img", "ISO/talos", "LXC/cache"}
	if diff := cmp.Diff(want, strs(g.Dependencies(ref("VM/app")))); diff != "" {
		t.Errorf("Dependencies(VM/app) mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"LXC/cache", "VM/app"}, strs(g.Dependents(ref("CTTemplate/base")))); diff != "" {
		t.Errorf("Dependents(CTTemplate/base) mismatch (-want +got):\n%s", diff)
	}
}

func BenchmarkOrder10000(b *testing.B) {
	var refs []manifest.Ref
	for i := range 10000 {
		refs = append(refs, manifest.Ref{Kind: manifest.KindVM, Name: "vm-" + string(rune('a'+i%26)) + "-" + itoa(i)})
	}
	for b.Loop() {
		g := graph.New(append(refs, manifest.Ref{Kind: manifest.KindISO, Name: "iso"}))
		for _, r := range refs {
			g.AddEdge(r, manifest.Ref{Kind: manifest.KindISO, Name: "iso"}, "spec.hardware.cdrom.iso")
		}
		if len(g.Order()) != len(refs)+1 {
			b.Fatal("order lost resources")
		}
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var s []byte
	for ; i > 0; i /= 10 {
		s = append([]byte{byte('0' + i%10)}, s...)
	}
	return string(s)
}
