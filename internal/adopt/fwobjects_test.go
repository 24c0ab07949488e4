package adopt_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

// Adoption writes a SecurityGroup, IPSet or Alias manifest for each live firewall object of the cluster
// that git does not declare (the PVE name kept in spec.name when the manifest name cannot carry it, the
// comment without the marker, the rules in order); a group with a rule the model cannot carry is a gap and
// is not adopted; and the adopted manifests read back as valid manifests.
func TestAdoptionWritesTheClusterFirewallObjectsAndGapsWhatItCannotCarry(t *testing.T) {
	declared := &manifest.Resource{APIVersion: manifest.APIVersion, Kind: manifest.KindAlias,
		Metadata: manifest.Metadata{Name: "gw"}, Spec: &manifest.AliasSpec{CIDR: "192.0.2.1"}}
	cf := &inventory.ClusterFirewall{ObjectsRead: true,
		Groups: []inventory.FirewallGroup{
			{Name: "webservers", Comment: "web [proxops]", Rules: []map[string]string{
				{"type": "in", "action": "ACCEPT", "macro": "HTTPS", "enable": "1"},
				{"type": "in", "action": "DROP", "source": "+Office_Net", "log": "info", "enable": "0"}}},
			{Name: "odd", Rules: []map[string]string{{"type": "forward", "action": "ACCEPT", "enable": "1"}}},
			{Name: "future", Rules: []map[string]string{{"type": "in", "action": "ACCEPT", "enable": "1", "icmp-code": "3"}}},
		},
		IPSetObjects: []inventory.FirewallIPSet{{Name: "Office_Net", Comment: "the office", Entries: []inventory.FirewallIPSetEntry{
			{CIDR: "198.51.100.0/24"}, {CIDR: "198.51.100.9", NoMatch: true, Comment: "printer"}}}},
		AliasObjects: []inventory.FirewallAlias{{Name: "GW", CIDR: "192.0.2.1"}, {Name: "dns", CIDR: "192.0.2.53", Comment: "resolver"}},
	}
	in := adopt.Input{Cluster: "lab", Declared: []*manifest.Resource{declared}, Observed: inventory.Cluster{Name: "lab",
		Nodes: []inventory.Node{{Cluster: "lab", Node: "pve1", ClusterFirewall: cf}}}}
	res, err := adopt.Adopt(in)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, m := range res.Manifests {
		paths = append(paths, m.Path)
		if !m.Complete() {
			t.Errorf("%s is incomplete: %v", m.Path, m.Incomplete)
		}
		rs, diags := manifest.Parse(m.Path, m.Content)
		if diags.HasErrors() || len(rs) != 1 {
			t.Errorf("%s does not read back: %v\n%s", m.Path, diags, m.Content)
		}
	}
	want := []string{"alias/lab/dns.yaml", "ipset/lab/office-net.yaml", "securitygroup/lab/webservers.yaml"}
	if !slices.Equal(paths, want) {
		t.Fatalf("manifests %v; want %v (the declared alias gw, differing only in case, not adopted again)", paths, want)
	}
	content := map[string]string{}
	for _, m := range res.Manifests {
		content[m.Path] = string(m.Content)
	}
	for path, wants := range map[string][]string{
		"ipset/lab/office-net.yaml":         {"name: Office_Net", "comment: the office", "cidr: 198.51.100.9", "nomatch: true"},
		"securitygroup/lab/webservers.yaml": {"comment: web", "macro: HTTPS", "source: +Office_Net", "enable: false"},
		"alias/lab/dns.yaml":                {"cidr: 192.0.2.53", "comment: resolver"},
	} {
		for _, w := range wants {
			if !strings.Contains(content[path], w) {
				t.Errorf("%s lacks %q:\n%s", path, w, content[path])
			}
		}
	}
	if strings.Contains(content["securitygroup/lab/webservers.yaml"], "[proxops]") {
		t.Errorf("the marker was written into the manifest:\n%s", content["securitygroup/lab/webservers.yaml"])
	}
	var gaps []string
	for _, g := range res.Gaps {
		gaps = append(gaps, g.Kind+"/"+g.Name+" "+g.Key)
	}
	if want := []string{"SecurityGroup/future rules[0]", "SecurityGroup/odd rules[0]"}; !slices.Equal(gaps, want) {
		t.Fatalf("gaps %v; want %v", gaps, want)
	}
}

// The cluster's firewall objects made by hand on PVE, adopted and committed, plan to one claim each and
// nothing else: the adopted manifests say exactly what is live.
func TestAdoptedFirewallObjectsPlanToTheClaimOnly(t *testing.T) {
	l := newLab(t, pvesim.DefaultSpec())
	for _, w := range []struct{ path, form string }{
		{"/cluster/firewall/aliases", "name=gw&cidr=192.0.2.1&comment=the+gateway"},
		{"/cluster/firewall/ipset", "name=Office_Net&comment=the+office"},
		{"/cluster/firewall/ipset/Office_Net", "cidr=198.51.100.0/24"},
		{"/cluster/firewall/ipset/Office_Net", "cidr=198.51.100.9&nomatch=1&comment=printer"},
		{"/cluster/firewall/ipset/Office_Net", "cidr=gw"},
		{"/cluster/firewall/groups", "group=webservers&comment=web"},
		{"/cluster/firewall/groups/webservers", "type=in&action=ACCEPT&proto=tcp&dport=443&enable=1"},
		{"/cluster/firewall/groups/webservers", "type=in&action=ACCEPT&macro=SSH&source=%2BOffice_Net&enable=1"},
	} {
		params, err := url.ParseQuery(w.form)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.sim.AdminRequest(http.MethodPost, w.path, params); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := pve.New(ctx, pve.Config{BaseURL: l.srv.URL, TokenID: pvesim.DefaultRootTokenID,
		TokenSecret: pvesim.DefaultRootTokenSecret, ReadBackoff: time.Millisecond}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	n, err := cl.Observe(ctx, pve.ObserveRequest{Cluster: "lab", Node: "pve1", ClusterFirewall: true})
	if err != nil {
		t.Fatal(err)
	}
	observed := inventory.Cluster{Name: "lab", Nodes: []inventory.Node{n}}
	res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: observed})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeRepository(t, dir, "lab", []string{"pve1"}, res)
	p := planRepository(t, dir, "lab", observed, nil)
	var got []string
	for _, op := range p.Operations {
		got = append(got, string(op.Action)+" "+op.Ref)
	}
	want := []string{"claim-firewall-object Alias/gw", "claim-firewall-object IPSet/office-net", "claim-firewall-object SecurityGroup/webservers"}
	if !slices.Equal(got, want) {
		t.Fatalf("operations %v; want %v", got, want)
	}
	if w := l.writes(); len(w) != 8 {
		t.Errorf("writes beyond the test's own: %v", w)
	}
}
