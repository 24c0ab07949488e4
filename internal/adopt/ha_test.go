package adopt_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
)

// Adoption writes spec.ha into the manifest of a guest with an HA resource (the state left to HA, the
// non-default options, the comment without the marker), an HARule manifest for each live rule that names
// the guests by their manifest names, and a gap for a PVE 8 HA group.
func TestAdoptionWritesSpecHAAndHARules(t *testing.T) {
	guest := func(vmid int, name, status string) inventory.Guest {
		return inventory.Guest{VMID: vmid, Type: inventory.QEMU, Node: "pve1", Status: status, Name: name, HAManaged: true,
			Config: []inventory.Entry{{Key: "name", Value: name, HasValue: true}, {Key: "memory", Value: "512", HasValue: true}}}
	}
	in := adopt.Input{Cluster: "lab", Observed: inventory.Cluster{Name: "lab", Nodes: []inventory.Node{{
		Cluster: "lab", Node: "pve1", Guests: []inventory.Guest{guest(100, "web", "running"), guest(101, "db", "stopped")},
		HA: &inventory.HA{RulesRead: true,
			Resources: []inventory.HAResource{
				{SID: "vm:100", State: "started", Comment: "front [proxops]", MaxRestart: 3, MaxRelocate: 1, Failback: false},
				{SID: "vm:101", State: "stopped", MaxRestart: 1, MaxRelocate: 1, Failback: true, Group: "old"},
			},
			Rules: []inventory.HARule{{ID: "Pin_Web", Type: "node-affinity", Resources: []string{"vm:101", "vm:100"},
				Nodes: []string{"pve1:2", "pve2"}, Strict: true, Comment: "by hand"}}},
	}}}}
	res, err := adopt.Adopt(in)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]adopt.Manifest{}
	for _, m := range res.Manifests {
		byPath[m.Path] = m
	}
	web, db, rule := byPath["vm/lab/web.yaml"], byPath["vm/lab/db.yaml"], byPath["ha/lab/pin-web.yaml"]
	if web.Resource == nil || db.Resource == nil || rule.Resource == nil {
		t.Fatalf("manifests %v: want vm/lab/web.yaml, vm/lab/db.yaml and ha/lab/pin-web.yaml", keys(byPath))
	}
	h := web.Resource.GuestHA()
	if h == nil || h.State != "" || h.MaxRestart == nil || *h.MaxRestart != 3 || h.MaxRelocate != nil || h.Failback == nil || *h.Failback || h.Comment != "front" {
		t.Fatalf("web's spec.ha is %+v", h)
	}
	if web.Resource.VM().State != "" || db.Resource.VM().State != "" {
		t.Errorf("spec.state is written for guests HA runs: %q, %q", web.Resource.VM().State, db.Resource.VM().State)
	}
	if got := db.Resource.GuestHA(); got == nil || got.State != "stopped" {
		t.Fatalf("db's spec.ha is %+v, want state stopped", got)
	}
	for _, want := range []string{"kind: HARule", "id: Pin_Web", "type: node-affinity", "- db\n", "- web\n", "node: pve1", "priority: 2", "strict: true", "comment: by hand"} {
		if !strings.Contains(string(rule.Content), want) {
			t.Errorf("HA rule manifest lacks %q:\n%s", want, rule.Content)
		}
	}
	if !rule.Complete() || !web.Complete() {
		t.Errorf("incomplete: rule %v, web %v", rule.Incomplete, web.Incomplete)
	}
	var group bool
	for _, g := range res.Gaps {
		group = group || (g.VMID == 101 && g.Key == "ha.group" && g.Value == "old")
	}
	if !group {
		t.Errorf("gaps %+v: the HA group of vm:101 is not reported", res.Gaps)
	}
	for _, m := range []adopt.Manifest{web, db, rule} {
		if ds := manifest.Validate(m.Resource); ds.HasErrors() {
			t.Errorf("%s does not validate: %v", m.Path, ds)
		}
	}
}

func keys(m map[string]adopt.Manifest) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
