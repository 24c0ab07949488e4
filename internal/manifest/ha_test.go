package manifest_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/manifest"
)

// Each broken spec.ha or HARule gives its own diagnostic, at the field's position.
func TestHAValidationReportsEachProblemAtItsField(t *testing.T) {
	vm := func(tail string) string {
		return head + "kind: VM\nmetadata: {name: web}\nspec:\n  node: pve1\n  vmid: 100\n  cpu: {type: host}\n" + tail
	}
	rule := func(tail string) string {
		return head + "kind: HARule\nmetadata: {name: pin}\nspec:\n" + tail
	}
	cases := []struct {
		name, file, src, want string
	}{
		{"state conflicts with HA", "vm/a/web.yaml", vm("  state: started\n  ha: {state: stopped}\n"),
			"vm/a/web.yaml:8:10: VM/web: spec.state: is started, but spec.ha.state stopped makes HA keep the guest stopped"},
		{"disabled keeps it stopped", "vm/a/web.yaml", vm("  state: started\n  ha: {state: disabled}\n"),
			"spec.state: is started, but spec.ha.state disabled makes HA keep the guest stopped"},
		{"unknown HA state", "vm/a/web.yaml", vm("  ha: {state: running}\n"), "vm/a/web.yaml:8:15: VM/web: spec.ha.state: invalid HA state \"running\""},
		{"negative restarts", "vm/a/web.yaml", vm("  ha: {max-restart: -1}\n"), "spec.ha.max-restart: must be 0 or more"},
		{"marker in the comment", "vm/a/web.yaml", vm("  ha: {comment: \"x [proxops]\"}\n"), "spec.ha.comment: must not contain the ownership marker"},
		{"template", "templatevm/a/web.yaml", strings.Replace(vm("  ha: {}\n"), "kind: VM", "kind: TemplateVM", 1),
			"spec.ha: a template never runs and cannot be an HA resource"},
		{"rule without type", "ha/a/pin.yaml", rule("  resources: [web]\n"), "ha/a/pin.yaml:4:1: HARule/pin: spec.type: required"},
		{"node-affinity without nodes", "ha/a/pin.yaml", rule("  type: node-affinity\n  resources: [web]\n"), "spec.nodes: required for a node-affinity rule"},
		{"affinity on a node rule", "ha/a/pin.yaml", rule("  type: node-affinity\n  resources: [web]\n  nodes: [{node: pve1}]\n  affinity: positive\n"),
			"spec.affinity: only a resource-affinity rule has an affinity"},
		{"one guest apart", "ha/a/pin.yaml", rule("  type: resource-affinity\n  affinity: negative\n  resources: [web]\n"),
			"spec.resources: a resource-affinity rule names at least two guests"},
		{"not a guest", "ha/a/pin.yaml", rule("  type: node-affinity\n  resources: [ISO/web]\n  nodes: [{node: pve1}]\n"),
			"ha/a/pin.yaml:6:15: HARule/pin: spec.resources[0]: \"ISO/web\" is not a guest"},
		{"bad priority", "ha/a/pin.yaml", rule("  type: node-affinity\n  resources: [web]\n  nodes: [{node: pve1, priority: -2}]\n"),
			"spec.nodes[0].priority: must be 0 or more"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, diags := manifest.Parse(c.file, []byte(c.src))
			got := diags.Error()
			if !strings.Contains(got, c.want) {
				t.Fatalf("diagnostics:\n%s\nwant one containing %q", got, c.want)
			}
		})
	}
}

// HA keeps a guest in the run state of its HA state when spec.state is absent, and resolving fills in the
// HA state and the rule's id.
func TestHAStateDecidesTheDesiredRunState(t *testing.T) {
	for _, c := range []struct {
		ha   string
		want manifest.State
	}{{"{}", manifest.StateStarted}, {"{state: stopped}", manifest.StateStopped}, {"{state: disabled}", manifest.StateStopped},
		{"{state: ignored}", manifest.StateStarted}} {
		r := parseOne(t, head+"kind: VM\nmetadata: {name: web}\nspec:\n  node: pve1\n  vmid: 100\n  cpu: {type: host}\n  ha: "+c.ha+"\n")
		if got := r.DesiredState(); got != c.want {
			t.Errorf("ha %s: desired state %s, want %s", c.ha, got, c.want)
		}
		if got := manifest.Resolve(r).GuestHA().State; got == "" {
			t.Errorf("ha %s: resolved without a state", c.ha)
		}
	}
	rs, diags := manifest.Parse("ha/a/pin.yaml", []byte(head+"kind: HARule\nmetadata: {name: pin}\nspec:\n  type: node-affinity\n  resources: [web]\n  nodes: [{node: pve1, priority: 2}, {node: pve2}]\n"))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	s := manifest.Resolve(rs[0]).HARule()
	if s.ID != "pin" || s.NodeList() != "pve1:2,pve2" {
		t.Fatalf("resolved rule id %q, nodes %q", s.ID, s.NodeList())
	}
}
