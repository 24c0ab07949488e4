package wire

import (
	inventoryv1 "github.com/proxops/proxops/internal/gen/proxops/inventory/v1"
	"github.com/proxops/proxops/internal/inventory"
)

func rulesToProto(rules []map[string]string) []*inventoryv1.FirewallRule {
	out := make([]*inventoryv1.FirewallRule, 0, len(rules))
	for _, r := range rules {
		out = append(out, &inventoryv1.FirewallRule{Fields: r})
	}
	return out
}

func rulesFromProto(rules []*inventoryv1.FirewallRule) []map[string]string {
	var out []map[string]string
	for _, r := range rules {
		f := r.GetFields()
		if f == nil {
			f = map[string]string{}
		}
		out = append(out, f)
	}
	return out
}

func guestFirewallToProto(f *inventory.Firewall) *inventoryv1.GuestFirewall {
	if f == nil {
		return nil
	}
	p := &inventoryv1.GuestFirewall{Options: f.Options, Rules: rulesToProto(f.Rules), RulesDigest: f.RulesDigest}
	for _, s := range f.IPSets {
		ps := &inventoryv1.FirewallIPSet{Name: s.Name, Comment: s.Comment}
		for _, e := range s.Entries {
			ps.Entries = append(ps.Entries, &inventoryv1.FirewallIPSetEntry{Cidr: e.CIDR, Nomatch: e.NoMatch, Comment: e.Comment})
		}
		p.Ipsets = append(p.Ipsets, ps)
	}
	for _, a := range f.Aliases {
		p.Aliases = append(p.Aliases, &inventoryv1.FirewallAlias{Name: a.Name, Cidr: a.CIDR, Comment: a.Comment})
	}
	return p
}

func guestFirewallFromProto(p *inventoryv1.GuestFirewall) *inventory.Firewall {
	if p == nil {
		return nil
	}
	f := &inventory.Firewall{Options: p.GetOptions(), Rules: rulesFromProto(p.GetRules()), RulesDigest: p.GetRulesDigest()}
	if f.Options == nil {
		f.Options = map[string]string{}
	}
	for _, s := range p.GetIpsets() {
		set := inventory.FirewallIPSet{Name: s.GetName(), Comment: s.GetComment()}
		for _, e := range s.GetEntries() {
			set.Entries = append(set.Entries, inventory.FirewallIPSetEntry{CIDR: e.GetCidr(), NoMatch: e.GetNomatch(), Comment: e.GetComment()})
		}
		f.IPSets = append(f.IPSets, set)
	}
	for _, a := range p.GetAliases() {
		f.Aliases = append(f.Aliases, inventory.FirewallAlias{Name: a.GetName(), CIDR: a.GetCidr(), Comment: a.GetComment()})
	}
	return f
}

func clusterFirewallToProto(c *inventory.ClusterFirewall) *inventoryv1.ClusterFirewall {
	if c == nil {
		return nil
	}
	p := &inventoryv1.ClusterFirewall{Ipsets: c.IPSets, Aliases: c.Aliases}
	for _, g := range c.Groups {
		p.Groups = append(p.Groups, &inventoryv1.FirewallGroup{Name: g.Name, Rules: rulesToProto(g.Rules)})
	}
	return p
}

func clusterFirewallFromProto(p *inventoryv1.ClusterFirewall) *inventory.ClusterFirewall {
	if p == nil {
		return nil
	}
	c := &inventory.ClusterFirewall{IPSets: p.GetIpsets(), Aliases: p.GetAliases()}
	for _, g := range p.GetGroups() {
		c.Groups = append(c.Groups, inventory.FirewallGroup{Name: g.GetName(), Rules: rulesFromProto(g.GetRules())})
	}
	return c
}

func vmidsToProto(v []int) []int64 {
	var out []int64
	for _, x := range v {
		out = append(out, int64(x))
	}
	return out
}

func vmidsFromProto(v []int64) []int {
	var out []int
	for _, x := range v {
		out = append(out, int(x))
	}
	return out
}
