package inventory

import "maps"

// Firewall is a guest's firewall as PVE reports it; it is read only for the guests that need it (those
// whose manifests declare a firewall, and every guest for an adoption).
type Firewall struct {
	// Options are …/firewall/options under PVE's keys (enable, policy_in, …), values as text.
	Options map[string]string
	// Rules are the rules in order, each its properties as text (without pos and digest).
	Rules []map[string]string
	// RulesDigest is the digest of the rule list.
	RulesDigest string
	// IPSets and Aliases are sorted by name.
	IPSets  []FirewallIPSet
	Aliases []FirewallAlias
}

// FirewallIPSet is an IP set with its entries.
type FirewallIPSet struct {
	Name    string
	Comment string
	Entries []FirewallIPSetEntry
}

// FirewallIPSetEntry is an address or network of an IP set; NoMatch excludes it.
type FirewallIPSetEntry struct {
	CIDR    string
	NoMatch bool
	Comment string
}

// FirewallAlias names an address or network.
type FirewallAlias struct {
	Name    string
	CIDR    string
	Comment string
}

// ClusterFirewall holds the cluster's firewall objects a guest's rules may name: the security groups with
// their rules, the names of the IP sets and of the aliases (each sorted).
type ClusterFirewall struct {
	Groups  []FirewallGroup
	IPSets  []string
	Aliases []string
	// IPSetObjects and AliasObjects are the IP sets and aliases with what they hold, sorted by name, and
	// ObjectsRead says the observe reported them (with the groups' comments and digests): the planner then
	// manages the cluster's SecurityGroup, IPSet and Alias manifests.
	IPSetObjects []FirewallIPSet
	AliasObjects []FirewallAlias
	ObjectsRead  bool
	// Options, Rules and RulesDigest are the cluster's own (datacenter) firewall: its options under PVE's
	// keys, its rules in order (without pos and digest) and their digest; ClusterRead says they were read.
	Options     map[string]string
	Rules       []map[string]string
	RulesDigest string
	ClusterRead bool
}

// FirewallGroup is a security group with its rules, its comment (the ownership marker included) and the
// digest of its rule list.
type FirewallGroup struct {
	Name        string
	Comment     string
	Rules       []map[string]string
	RulesDigest string
}

// Clone returns a deep copy.
func (f *Firewall) Clone() *Firewall {
	if f == nil {
		return nil
	}
	out := *f
	out.Options = maps.Clone(f.Options)
	out.Rules = cloneMaps(f.Rules)
	out.IPSets = make([]FirewallIPSet, len(f.IPSets))
	for i, s := range f.IPSets {
		s.Entries = append([]FirewallIPSetEntry(nil), s.Entries...)
		out.IPSets[i] = s
	}
	out.Aliases = append([]FirewallAlias(nil), f.Aliases...)
	return &out
}

func cloneMaps(ms []map[string]string) []map[string]string {
	if ms == nil {
		return nil
	}
	out := make([]map[string]string, len(ms))
	for i, m := range ms {
		out[i] = maps.Clone(m)
	}
	return out
}
