package adopt_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

// fwWrite sends one firewall write to the simulator, as an administrator would by hand.
func (l *lab) fwWrite(t *testing.T, method, path string, kv ...string) {
	t.Helper()
	form := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		form.Set(kv[i], kv[i+1])
	}
	if err := l.sim.AdminRequest(method, path, form); err != nil {
		t.Fatal(err)
	}
}

// observeFirewalls takes an adoption inventory with every guest's firewall and the cluster's objects.
func (l *lab) observeFirewalls(t *testing.T, cluster, node string) inventory.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := pve.New(ctx, pve.Config{BaseURL: l.srv.URL, TokenID: pvesim.DefaultRootTokenID,
		TokenSecret: pvesim.DefaultRootTokenSecret, ReadBackoff: time.Millisecond}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	inv, err := cl.Observe(ctx, pve.ObserveRequest{Cluster: cluster, Node: node, AllContent: true, AllFirewalls: true, ClusterFirewall: true})
	if err != nil {
		t.Fatalf("observe %s: %v", node, err)
	}
	return inventory.Cluster{Name: cluster, Nodes: []inventory.Node{inv}}
}

// A guest's firewall set up by hand is adopted into spec.firewall, and the adopted repository plans no
// firewall change against the cluster it came from; a firewall with a rule the manifest cannot carry is
// left out (not owned) and reported as a gap.
func TestAdoptedFirewallRoundTripsAndUncoveredRulesAreGaps(t *testing.T) {
	s := pvesim.DefaultSpec()
	s.Nodes = []pvesim.NodeSpec{{Name: "pve1"}}
	s.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Config: "cores: 1\nmemory: 1024\nname: web\nnet0: virtio=BC:24:11:AA:00:01,bridge=vmbr0,firewall=1\nscsi0: local-lvm:vm-100-disk-0,size=8G\n"},
		{VMID: 101, Type: "qemu", Node: "pve1", Config: "cores: 1\nmemory: 1024\nname: odd\nnet0: virtio=BC:24:11:AA:00:02,bridge=vmbr0\nscsi0: local-lvm:vm-101-disk-0,size=8G\n"},
		{VMID: 102, Type: "qemu", Node: "pve1", Config: "cores: 1\nmemory: 1024\nname: plain\nnet0: virtio=BC:24:11:AA:00:03,bridge=vmbr0\nscsi0: local-lvm:vm-102-disk-0,size=8G\n"},
	}
	l := newLab(t, s)
	const web = "/nodes/pve1/qemu/100/firewall"
	l.fwWrite(t, http.MethodPut, web+"/options", "enable", "1", "policy_in", "DROP", "log_level_in", "info")
	l.fwWrite(t, http.MethodPost, web+"/ipset", "name", "admins", "comment", "operators")
	l.fwWrite(t, http.MethodPost, web+"/ipset/admins", "cidr", "192.0.2.0/24")
	l.fwWrite(t, http.MethodPost, web+"/ipset/admins", "cidr", "192.0.2.9", "nomatch", "1", "comment", "printer")
	l.fwWrite(t, http.MethodPost, web+"/aliases", "name", "gw", "cidr", "192.0.2.1", "comment", "router")
	// Created in reverse: PVE puts a new rule first.
	l.fwWrite(t, http.MethodPost, web+"/rules", "type", "in", "action", "DROP", "proto", "udp", "dport", "53", "enable", "0")
	l.fwWrite(t, http.MethodPost, web+"/rules", "type", "in", "action", "ACCEPT", "proto", "tcp", "dport", "443", "dest", "gw", "enable", "1")
	l.fwWrite(t, http.MethodPost, web+"/rules", "type", "in", "action", "ACCEPT", "macro", "ssh", "source", "+admins", "comment", "ssh", "enable", "1")
	// A rule on a NIC the guest does not have: PVE takes it, the manifest cannot say it.
	l.fwWrite(t, http.MethodPost, "/nodes/pve1/qemu/101/firewall/rules", "type", "in", "action", "ACCEPT", "iface", "net3", "enable", "1")

	observed := l.observeFirewalls(t, "lab", "pve1")
	res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: observed})
	if err != nil {
		t.Fatal(err)
	}
	var content = map[string]string{}
	for _, m := range res.Manifests {
		content[m.Path] = string(m.Content)
	}
	checkGolden(t, filepath.Join("testdata", "firewall", "web.yaml"), []byte(content["vm/lab/web.yaml"]))
	if strings.Contains(content["vm/lab/odd.yaml"], "firewall:") || strings.Contains(content["vm/lab/plain.yaml"], "firewall:") {
		t.Errorf("a firewall that cannot be carried whole, or PVE's default one, was adopted:\n%s\n%s", content["vm/lab/odd.yaml"], content["vm/lab/plain.yaml"])
	}
	var gaps []string
	for _, g := range res.Gaps {
		if strings.HasPrefix(g.Key, "firewall") {
			gaps = append(gaps, g.Name+" "+g.Key+" "+g.Value+": "+g.Note)
		}
	}
	want := "odd firewall.rules[0].iface in ACCEPT -i net3: interface net3 is not one of the guest's NICs (net0); the guest's firewall is left out of the manifest (not owned) because a declared firewall is owned as a whole"
	if len(gaps) != 1 || gaps[0] != want {
		t.Errorf("firewall gaps:\n%s\nwant:\n%s", strings.Join(gaps, "\n"), want)
	}

	dir := t.TempDir()
	writeRepository(t, dir, "lab", []string{"pve1"}, res)
	p := planRepository(t, dir, "lab", observed, nil)
	for _, op := range p.Operations {
		if op.Action == plan.ActionApplyGuestFirewall {
			t.Errorf("the adopted firewall differs from the live one: %s %v", op.Reason, op.Changes)
		}
	}
}
