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
	return &inventoryv1.GuestFirewall{Options: f.Options, Rules: rulesToProto(f.Rules), RulesDigest: f.RulesDigest,
		Ipsets: ipsetsToProto(f.IPSets), Aliases: aliasesToProto(f.Aliases)}
}

func guestFirewallFromProto(p *inventoryv1.GuestFirewall) *inventory.Firewall {
	if p == nil {
		return nil
	}
	f := &inventory.Firewall{Options: p.GetOptions(), Rules: rulesFromProto(p.GetRules()), RulesDigest: p.GetRulesDigest()}
	if f.Options == nil {
		f.Options = map[string]string{}
	}
	f.IPSets, f.Aliases = ipsetsFromProto(p.GetIpsets()), aliasesFromProto(p.GetAliases())
	return f
}

func clusterFirewallToProto(c *inventory.ClusterFirewall) *inventoryv1.ClusterFirewall {
	if c == nil {
		return nil
	}
	p := &inventoryv1.ClusterFirewall{Ipsets: c.IPSets, Aliases: c.Aliases, ObjectsRead: c.ObjectsRead,
		Options: c.Options, Rules: rulesToProto(c.Rules), RulesDigest: c.RulesDigest, ClusterRead: c.ClusterRead}
	for _, g := range c.Groups {
		p.Groups = append(p.Groups, &inventoryv1.FirewallGroup{Name: g.Name, Rules: rulesToProto(g.Rules),
			Comment: g.Comment, RulesDigest: g.RulesDigest})
	}
	p.IpsetObjects = ipsetsToProto(c.IPSetObjects)
	p.AliasObjects = aliasesToProto(c.AliasObjects)
	return p
}

func clusterFirewallFromProto(p *inventoryv1.ClusterFirewall) *inventory.ClusterFirewall {
	if p == nil {
		return nil
	}
	c := &inventory.ClusterFirewall{IPSets: p.GetIpsets(), Aliases: p.GetAliases(), ObjectsRead: p.GetObjectsRead(),
		Options: p.GetOptions(), Rules: rulesFromProto(p.GetRules()), RulesDigest: p.GetRulesDigest(), ClusterRead: p.GetClusterRead()}
	for _, g := range p.GetGroups() {
		c.Groups = append(c.Groups, inventory.FirewallGroup{Name: g.GetName(), Rules: rulesFromProto(g.GetRules()),
			Comment: g.GetComment(), RulesDigest: g.GetRulesDigest()})
	}
	c.IPSetObjects = ipsetsFromProto(p.GetIpsetObjects())
	c.AliasObjects = aliasesFromProto(p.GetAliasObjects())
	return c
}

func ipsetsToProto(sets []inventory.FirewallIPSet) []*inventoryv1.FirewallIPSet {
	var out []*inventoryv1.FirewallIPSet
	for _, s := range sets {
		ps := &inventoryv1.FirewallIPSet{Name: s.Name, Comment: s.Comment}
		for _, e := range s.Entries {
			ps.Entries = append(ps.Entries, &inventoryv1.FirewallIPSetEntry{Cidr: e.CIDR, Nomatch: e.NoMatch, Comment: e.Comment})
		}
		out = append(out, ps)
	}
	return out
}

func ipsetsFromProto(sets []*inventoryv1.FirewallIPSet) []inventory.FirewallIPSet {
	var out []inventory.FirewallIPSet
	for _, s := range sets {
		set := inventory.FirewallIPSet{Name: s.GetName(), Comment: s.GetComment()}
		for _, e := range s.GetEntries() {
			set.Entries = append(set.Entries, inventory.FirewallIPSetEntry{CIDR: e.GetCidr(), NoMatch: e.GetNomatch(), Comment: e.GetComment()})
		}
		out = append(out, set)
	}
	return out
}

func aliasesToProto(aliases []inventory.FirewallAlias) []*inventoryv1.FirewallAlias {
	var out []*inventoryv1.FirewallAlias
	for _, a := range aliases {
		out = append(out, &inventoryv1.FirewallAlias{Name: a.Name, Cidr: a.CIDR, Comment: a.Comment})
	}
	return out
}

func aliasesFromProto(aliases []*inventoryv1.FirewallAlias) []inventory.FirewallAlias {
	var out []inventory.FirewallAlias
	for _, a := range aliases {
		out = append(out, inventory.FirewallAlias{Name: a.GetName(), CIDR: a.GetCidr(), Comment: a.GetComment()})
	}
	return out
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
