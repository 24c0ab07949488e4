package manifest_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/firewall"
	"github.com/proxops/proxops/internal/manifest"
)

const firewallVM = `apiVersion: proxops/v1alpha1
kind: VM
metadata: {name: web}
spec:
  node: pve1
  vmid: 100
  cpu: {type: host}
  networks:
    - {bridge: vmbr0}
  firewall:
    enabled: true
    policy-in: DROP
    rules:
`

func TestFirewallRulesAreCheckedWithTheirPositions(t *testing.T) {
	src := firewallVM + `      - {type: in, action: ACCEPT, macro: Sshh}
      - {type: in, action: ACCEPT, proto: tcp, dport: "443:80"}
      - {type: in, action: ACCEPT, source: +guest/office}
      - {type: in, action: ACCEPT, iface: net1, proto: udp, dport: "53"}
      - {type: in, action: accept, source: 10.0.0.0/33}
      - {type: out, action: DROP, dport: "25"}
    ipsets:
      trusted:
        entries:
          - {cidr: 192.0.2.0/24}
          - {cidr: 300.0.0.1}
    aliases:
      gw: {cidr: 192.0.2.1}
`
	_, diags := manifest.Parse("vm/web.yaml", []byte(src))
	want := `vm/web.yaml:14:43: VM/web: spec.firewall.rules[0].macro: unknown macro "Sshh" (PVE's macros are listed by pvesh get /cluster/firewall/macros)
vm/web.yaml:15:55: VM/web: spec.firewall.rules[1].dport: backwards range 443:80 not allowed, did you mean 80:443?
vm/web.yaml:16:44: VM/web: spec.firewall.rules[2].source: IP set +guest/office is not defined in spec.firewall (guest/ names the guest's own)
vm/web.yaml:17:43: VM/web: spec.firewall.rules[3].iface: interface net1 is not one of the guest's NICs (net0)
vm/web.yaml:18:28: VM/web: spec.firewall.rules[4].action: invalid action "accept" (want ACCEPT|DROP|REJECT)
vm/web.yaml:18:44: VM/web: spec.firewall.rules[4].source: invalid network "10.0.0.0/33"
vm/web.yaml:19:42: VM/web: spec.firewall.rules[5].dport: needs proto (tcp, udp, dccp or sctp)
vm/web.yaml:24:20: VM/web: spec.firewall.ipsets.trusted.entries[1].cidr: invalid IP address or network "300.0.0.1"`
	if diff := cmp.Diff(want, lines(diags)); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}
}

func TestFirewallNamesOnlyTheLiveClusterCanResolveAreListed(t *testing.T) {
	src := firewallVM + `      - {type: group, action: webservers}
      - {type: in, action: ACCEPT, source: +trusted}
      - {type: in, action: ACCEPT, source: +management}
      - {type: in, action: ACCEPT, source: +office}
      - {type: in, action: ACCEPT, source: gw, dest: dc/lan}
      - {type: in, action: DROP, source: +ipfilter-net0}
    ipsets:
      trusted: {entries: [{cidr: 192.0.2.0/24}, {cidr: gw}, {cidr: vpn}]}
    aliases:
      gw: {cidr: 192.0.2.1}
`
	rs, diags := manifest.Parse("vm/web.yaml", []byte(src))
	if len(diags) != 0 {
		t.Fatalf("diagnostics:\n%s", lines(diags))
	}
	got := rs[0].Firewall().ClusterRefs()
	want := []manifest.FirewallRef{
		{Field: "spec.firewall.rules[0].action", Ref: firewall.Ref{Kind: firewall.RefGroup, Name: "webservers"}},
		{Field: "spec.firewall.rules[3].source", Ref: firewall.Ref{Kind: firewall.RefIPSet, Name: "office"}},
		{Field: "spec.firewall.rules[4].dest", Ref: firewall.Ref{Kind: firewall.RefAlias, Scope: "dc", Name: "lan"}},
		{Field: "spec.firewall.ipsets.trusted.entries[2].cidr", Ref: firewall.Ref{Kind: firewall.RefAlias, Name: "vpn"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cluster references (-want +got):\n%s", diff)
	}
}

func TestFirewallRulesAreEnabledUnlessSaidAndMacrosTakePVEsSpelling(t *testing.T) {
	src := firewallVM + `      - {type: in, action: ACCEPT, macro: ssh}
      - {type: in, action: DROP, enable: false}
`
	rs, diags := manifest.Parse("vm/web.yaml", []byte(src))
	if len(diags) != 0 {
		t.Fatalf("diagnostics:\n%s", lines(diags))
	}
	r := manifest.Resolve(rs[0])
	got := r.Firewall().PVERules()
	want := []firewall.Rule{{Type: "in", Action: "ACCEPT", Macro: "SSH", Enable: true}, {Type: "in", Action: "DROP"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"enable": "1", "policy_in": "DROP"}, r.Firewall().PVEOptions()); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

// An ICMP type is checked against its rule's protocol, as PVE checks it: an ICMPv6 name in an icmp rule (or
// the reverse) is refused in git rather than by PVE mid-apply; numbers suit both.
func TestFirewallICMPTypesAreCheckedAgainstTheRulesProtocol(t *testing.T) {
	src := firewallVM + `      - {type: in, action: ACCEPT, proto: icmp, icmp-type: echo-request}
      - {type: in, action: ACCEPT, proto: icmp, icmp-type: neighbor-solicitation}
      - {type: in, action: ACCEPT, proto: icmpv6, icmp-type: neighbor-solicitation}
      - {type: in, action: ACCEPT, proto: ipv6-icmp, icmp-type: any}
      - {type: in, action: ACCEPT, proto: icmpv6, icmp-type: "135/0"}
      - {type: in, action: ACCEPT, proto: icmp, icmp-type: "256"}
`
	_, diags := manifest.Parse("vm/web.yaml", []byte(src))
	want := `vm/web.yaml:15:60: VM/web: spec.firewall.rules[1].icmp-type: invalid icmp-type "neighbor-solicitation" for proto icmp
vm/web.yaml:17:65: VM/web: spec.firewall.rules[3].icmp-type: invalid icmp-type "any" for proto ipv6-icmp
vm/web.yaml:19:60: VM/web: spec.firewall.rules[5].icmp-type: invalid icmp-type "256" for proto icmp`
	if diff := cmp.Diff(want, lines(diags)); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}
}
