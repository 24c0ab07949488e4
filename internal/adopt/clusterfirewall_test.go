package adopt_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/render"
)

// clusterFirewallLab is a one-node cluster whose own firewall an administrator enabled by hand: options, a
// security group and rules of each type.
func clusterFirewallLab(t *testing.T) *lab {
	t.Helper()
	s := pvesim.DefaultSpec()
	s.Nodes = []pvesim.NodeSpec{{Name: "pve1"}}
	l := newLab(t, s)
	l.fwWrite(t, http.MethodPost, "/cluster/firewall/groups", "group", "admin", "comment", "administrators")
	l.fwWrite(t, http.MethodPost, "/cluster/firewall/groups/admin", "type", "in", "action", "ACCEPT", "proto", "tcp", "dport", "22,8006", "enable", "1")
	// Created in reverse: PVE puts a new rule first.
	l.fwWrite(t, http.MethodPost, "/cluster/firewall/rules", "type", "out", "action", "REJECT", "proto", "tcp", "dport", "25", "enable", "0")
	l.fwWrite(t, http.MethodPost, "/cluster/firewall/rules", "type", "in", "action", "ACCEPT", "macro", "Ping", "iface", "vmbr0", "enable", "1")
	l.fwWrite(t, http.MethodPost, "/cluster/firewall/rules", "type", "group", "action", "admin", "comment", "ssh and the web interface", "enable", "1")
	l.fwWrite(t, http.MethodPut, "/cluster/firewall/options", "enable", "1", "policy_in", "DROP", "ebtables", "0")
	return l
}

// The cluster's own firewall, set up by hand and not managed by the cluster's config, is offered as the
// block to add to config.yaml (the report says where); with the block added, the plan changes nothing in it.
func TestAnUnmanagedClusterFirewallIsOfferedAsAConfigBlockThatRoundTrips(t *testing.T) {
	l := clusterFirewallLab(t)
	observed := l.observeFirewalls(t, "lab", "pve1")
	res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: observed})
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, filepath.Join("testdata", "firewall", "cluster-firewall.yaml"), res.ClusterFirewall)
	text := render.AdoptionText(render.Adoption{Result: res, CompositionFile: "clusters/lab/resources.yaml",
		ConfigFile: "clusters/lab/config.yaml", Missing: res.Composition()})
	if want := "adopt: the cluster's own firewall is not managed by ProxOps; to manage it as it is, add under pve.clusters.lab in clusters/lab/config.yaml:\n  firewall:\n    manage-cluster: true\n"; !strings.Contains(text, want) {
		t.Errorf("the report does not offer the block:\n%s", text)
	}

	dir := t.TempDir()
	writeRepository(t, dir, "lab", []string{"pve1"}, res)
	config := filepath.Join(dir, "clusters", "lab", "config.yaml")
	f, err := os.OpenFile(config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimRight(string(res.ClusterFirewall), "\n"), "\n") {
		if _, err := f.WriteString("      " + line + "\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	p := planRepository(t, dir, "lab", observed, nil)
	for _, op := range p.Operations {
		if op.Action == plan.ActionApplyClusterFirewall {
			t.Errorf("the offered cluster firewall differs from the live one: %s %v", op.Reason, op.Changes)
		}
	}
	if p.Held {
		t.Errorf("the plan is held: %+v", p)
	}
}

// Nothing is offered for a cluster whose config manages its firewall already, nor for PVE's default one;
// a rule the model cannot carry is a gap, and then the firewall is not offered at all (it would be owned as
// a whole, without that rule).
func TestAClusterFirewallIsNotOfferedWhenManagedDefaultOrNotCarriedWhole(t *testing.T) {
	l := clusterFirewallLab(t)
	observed := l.observeFirewalls(t, "lab", "pve1")
	if res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: observed, ClusterFirewallManaged: true}); err != nil || len(res.ClusterFirewall) > 0 {
		t.Errorf("managed: %v, offered:\n%s", err, res.ClusterFirewall)
	}

	s := pvesim.DefaultSpec()
	s.Nodes = []pvesim.NodeSpec{{Name: "pve1"}}
	plain := newLab(t, s)
	if res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: plain.observeFirewalls(t, "lab", "pve1")}); err != nil || len(res.ClusterFirewall) > 0 {
		t.Errorf("PVE's default firewall: %v, offered:\n%s", err, res.ClusterFirewall)
	}

	// An ICMP type given as a port, which PVE still takes and the manifest refuses.
	l.fwWrite(t, http.MethodPost, "/cluster/firewall/rules", "type", "in", "action", "ACCEPT", "proto", "icmp", "dport", "echo-request", "enable", "1")
	res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: l.observeFirewalls(t, "lab", "pve1")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.ClusterFirewall) > 0 {
		t.Errorf("offered although a rule cannot be carried:\n%s", res.ClusterFirewall)
	}
	var gaps []string
	for _, g := range res.Gaps {
		if g.Kind == "ClusterFirewall" {
			gaps = append(gaps, g.Name+" "+g.Key+" "+g.Value+": "+g.Note)
		}
	}
	if len(gaps) != 1 || !strings.HasPrefix(gaps[0], "lab rules[0] in ACCEPT -p icmp -dport echo-request: ") {
		t.Errorf("cluster firewall gaps: %q", gaps)
	}
}
