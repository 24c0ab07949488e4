package manifest

import (
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/firewall"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/yamldecode"
)

// The cluster's firewall objects as manifests: a security group (/cluster/firewall/groups), an IP set
// (/cluster/firewall/ipset) and an alias (/cluster/firewall/aliases). Each is PVE's object of spec.name
// (metadata.name when absent), owned as a whole like a pool: its comment carries the ownership marker, which
// ProxOps adds, and the ownership inventory records it.

// SecurityGroupSpec is the spec of a SecurityGroup.
type SecurityGroupSpec struct {
	// Name is PVE's name of the group (at most 18 characters; PVE keeps it in lower case); defaults to
	// metadata.name.
	Name string `yaml:"name,omitempty"`
	// Comment is the group's comment without the ownership marker.
	Comment string `yaml:"comment,omitempty"`
	// Rules are the group's rules in the order PVE evaluates them: in or out rules, as a guest's (no group
	// rules, no iface).
	Rules []FirewallRule `yaml:"rules,omitempty"`
}

// IPSetSpec is the spec of an IPSet: an IP set of the cluster.
type IPSetSpec struct {
	// Name is PVE's name of the IP set; defaults to metadata.name.
	Name    string               `yaml:"name,omitempty"`
	Comment string               `yaml:"comment,omitempty"`
	Entries []FirewallIPSetEntry `yaml:"entries,omitempty"`
}

// AliasSpec is the spec of an Alias: a name of the cluster for an address or network.
type AliasSpec struct {
	// Name is PVE's name of the alias (case-insensitive in PVE); defaults to metadata.name.
	Name    string `yaml:"name,omitempty"`
	CIDR    string `yaml:"cidr"`
	Comment string `yaml:"comment,omitempty"`
}

// SecurityGroup returns the spec of a SecurityGroup, else nil.
func (r *Resource) SecurityGroup() *SecurityGroupSpec {
	s, _ := r.Spec.(*SecurityGroupSpec)
	return s
}

// IPSet returns the spec of an IPSet, else nil.
func (r *Resource) IPSet() *IPSetSpec {
	s, _ := r.Spec.(*IPSetSpec)
	return s
}

// Alias returns the spec of an Alias, else nil.
func (r *Resource) Alias() *AliasSpec {
	s, _ := r.Spec.(*AliasSpec)
	return s
}

// FirewallObjectName is the PVE name of a SecurityGroup, IPSet or Alias (spec.name, else metadata.name);
// "" for other kinds.
func (r *Resource) FirewallObjectName() string {
	var n string
	switch s := r.Spec.(type) {
	case *SecurityGroupSpec:
		n = s.Name
	case *IPSetSpec:
		n = s.Name
	case *AliasSpec:
		n = s.Name
	default:
		return ""
	}
	if n == "" {
		n = r.Metadata.Name
	}
	return n
}

// FirewallObjectNameField is the field that gives a firewall object its name: spec.name, else
// metadata.name.
func (r *Resource) FirewallObjectNameField() string {
	if r.Source.Positions.Has("spec.name") {
		return "spec.name"
	}
	return "metadata.name"
}

// PVERules are a security group's rules as PVE stores them.
func (s *SecurityGroupSpec) PVERules() []firewall.Rule {
	out := make([]firewall.Rule, len(s.Rules))
	for i, r := range s.Rules {
		out[i] = r.PVE()
	}
	return out
}

// FirewallObjectRefs lists, in declaration order, the names of other firewall objects of the cluster a
// SecurityGroup's rules or an IPSet's entries use (an IP set or an alias), with the field naming each.
func (r *Resource) FirewallObjectRefs() []FirewallRef {
	var out []FirewallRef
	switch s := r.Spec.(type) {
	case *SecurityGroupSpec:
		// A group holds no group rule (validation refuses one): its references are its rules' addresses.
		out = ClusterFirewallRefs("spec.rules", s.Rules)
	case *IPSetSpec:
		for i, e := range s.Entries {
			if _, err := firewall.CheckCIDR(e.CIDR); err == nil {
				continue
			}
			if ref, err := firewall.CheckAddress(e.CIDR); err == nil && ref != nil && ref.Kind == firewall.RefAlias && ref.Scope != "guest" {
				out = append(out, FirewallRef{Field: yamldecode.Index("spec.entries", i) + ".cidr", Ref: *ref})
			}
		}
	}
	return out
}

// Maximum name lengths of PVE's firewall objects.
const (
	maxGroupName = 18
	maxFWName    = 64
)

// fwObjectName checks a firewall object's PVE name.
func (c *checker) fwObjectName(name, what string, maxLen int) {
	field := c.r.FirewallObjectNameField()
	switch {
	case !firewall.NameRE.MatchString(name):
		c.errorf(field, "invalid %s name %s (a letter, then letters, digits, - and _; at least two characters)", what, diag.Excerpt(name))
	case len(name) > maxLen:
		c.errorf(field, "%s name %s is longer than %d characters", what, diag.Excerpt(name), maxLen)
	}
}

// fwObjectComment checks a firewall object's comment.
func (c *checker) fwObjectComment(comment string) {
	if strings.ContainsAny(comment, "\r\n") {
		c.errorf("spec.comment", "must be a single line")
	}
	if pveformat.Marked(comment) {
		c.errorf("spec.comment", "must not contain the ownership marker %s: ProxOps adds it", pveformat.OwnershipMarker)
	}
}

// securityGroup checks a SecurityGroup's spec: its name, comment and rules (no group rules, no iface; a
// reference to the guest's own objects has no meaning in a group).
func (c *checker) securityGroup(r *Resource, s *SecurityGroupSpec) {
	name := r.FirewallObjectName()
	c.fwObjectName(name, "security group", maxGroupName)
	if name != strings.ToLower(name) {
		c.errorf(r.FirewallObjectNameField(), "security group name %s has capitals; PVE keeps group names in lower case: write %s", diag.Excerpt(name), strings.ToLower(name))
	}
	c.fwObjectComment(s.Comment)
	for i, rule := range s.Rules {
		p := yamldecode.Index("spec.rules", i)
		if rule.Type == "group" {
			c.errorf(p+".type", "a security group cannot contain a group rule (want in|out)")
			continue
		}
		if rule.Iface != "" {
			c.errorf(p+".iface", "a security group's rule takes no iface (PVE refuses -i for it)")
			rule.Iface = ""
		}
		c.firewallRule(p, rule, nil)
		for _, a := range []struct{ k, v string }{{"source", rule.Source}, {"dest", rule.Dest}} {
			if ref, err := firewall.CheckAddress(a.v); a.v != "" && err == nil && ref != nil && ref.Scope == "guest" {
				c.errorf(p+"."+a.k, "%s: a security group has no guest of its own (guest/ names a guest's object)", ref)
			}
		}
	}
}

// ipSet checks an IPSet's spec: its name, comment and entries (an address, a network, or an alias of the
// cluster; each once).
func (c *checker) ipSet(r *Resource, s *IPSetSpec) {
	c.fwObjectName(r.FirewallObjectName(), "IP set", maxFWName)
	c.fwObjectComment(s.Comment)
	seen := map[string]bool{}
	for i, e := range s.Entries {
		p := yamldecode.Index("spec.entries", i)
		switch _, err := firewall.CheckCIDR(e.CIDR); {
		case e.CIDR == "":
			c.errorf(p+".cidr", "required")
		case err == nil:
		case firewall.NameRE.MatchString(strings.TrimPrefix(e.CIDR, "dc/")):
			// An alias of the cluster: resolved by the planner with the other references.
		default:
			c.errorf(p+".cidr", "%v", err)
		}
		if seen[e.CIDR] {
			c.errorf(p+".cidr", "%s is listed twice", e.CIDR)
		}
		seen[e.CIDR] = true
		if strings.ContainsAny(e.Comment, "\r\n") {
			c.errorf(p+".comment", "must be a single line")
		}
	}
}

// alias checks an Alias's spec: its name, address and comment.
func (c *checker) alias(r *Resource, s *AliasSpec) {
	c.fwObjectName(r.FirewallObjectName(), "alias", maxFWName)
	c.fwObjectComment(s.Comment)
	if s.CIDR == "" {
		c.errorf("spec.cidr", "required (an address or a network)")
	} else if _, err := firewall.CheckCIDR(s.CIDR); err != nil {
		c.errorf("spec.cidr", "%v", err)
	}
}

// resolveFirewallObject returns a copy of a firewall object's spec with its name set.
func resolveFirewallObject(r *Resource) Spec {
	name := r.FirewallObjectName()
	switch s := r.Spec.(type) {
	case *SecurityGroupSpec:
		g := *s
		g.Name = name
		g.Rules = slices.Clone(s.Rules)
		for i := range g.Rules {
			g.Rules[i].Enable = clonePtr(g.Rules[i].Enable)
		}
		return &g
	case *IPSetSpec:
		set := *s
		set.Name = name
		set.Entries = slices.Clone(s.Entries)
		return &set
	case *AliasSpec:
		a := *s
		a.Name = name
		return &a
	}
	return r.Spec
}

// FieldProblem is one problem of a value outside a manifest: the field's path and what is wrong.
type FieldProblem struct {
	Field   string
	Message string
}

// CheckClusterFirewallRules checks the rules of the cluster's own (datacenter) firewall, listed at prefix,
// as pve-firewall does: a guest's rule forms and group rules, an iface that is a host interface, no guest/
// names. It returns every problem by field.
func CheckClusterFirewallRules(prefix string, rules []FirewallRule) []FieldProblem {
	c := &checker{r: &Resource{}}
	for i, r := range rules {
		p := yamldecode.Index(prefix, i)
		if r.Iface != "" && !firewall.IfaceRE.MatchString(r.Iface) {
			c.errorf(p+".iface", "invalid interface %s (a host interface, e.g. vmbr0)", diag.Excerpt(r.Iface))
		}
		r.Iface = ""
		c.firewallRule(p, r, nil)
		for _, a := range []struct{ k, v string }{{"source", r.Source}, {"dest", r.Dest}} {
			if ref, err := firewall.CheckAddress(a.v); a.v != "" && err == nil && ref != nil && ref.Scope == "guest" {
				c.errorf(p+"."+a.k, "%s: the cluster's firewall has no guest of its own (guest/ names a guest's object)", ref)
			}
		}
	}
	out := make([]FieldProblem, 0, len(c.diags))
	for _, d := range c.diags {
		out = append(out, FieldProblem{Field: d.Field, Message: d.Message})
	}
	return out
}

// ClusterFirewallRefs lists, in order, the names of the cluster's firewall objects that rules of the
// cluster's own firewall (listed at prefix) use: security groups, IP sets and aliases.
func ClusterFirewallRefs(prefix string, rules []FirewallRule) []FirewallRef {
	var out []FirewallRef
	for i, r := range rules {
		p := yamldecode.Index(prefix, i)
		if r.Type == "group" && firewall.NameRE.MatchString(r.Action) {
			out = append(out, FirewallRef{Field: p + ".action", Ref: firewall.Ref{Kind: firewall.RefGroup, Name: r.Action}})
		}
		for _, a := range []struct{ k, v string }{{"source", r.Source}, {"dest", r.Dest}} {
			if a.v == "" {
				continue
			}
			ref, err := firewall.CheckAddress(a.v)
			if err != nil || ref == nil || ref.Scope == "guest" {
				continue
			}
			if ref.Kind == firewall.RefIPSet && (ref.Name == "management" || ref.Name == "blacklist") {
				continue
			}
			out = append(out, FirewallRef{Field: p + "." + a.k, Ref: *ref})
		}
	}
	return out
}
