package manifest

import (
	"maps"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/firewall"
	"github.com/proxops/proxops/internal/yamldecode"
)

// Firewall is a guest's PVE firewall (spec.firewall). Declared, it is owned as a whole: options not
// declared are PVE's defaults, and the live rules, IP sets and aliases become exactly the declared ones.
// Absent, ProxOps does not touch the guest's firewall.
type Firewall struct {
	// Enabled turns the guest's firewall on (PVE enable; default off).
	Enabled *bool `yaml:"enabled,omitempty"`
	// PolicyIn and PolicyOut are ACCEPT, DROP or REJECT (PVE's defaults: DROP in, ACCEPT out).
	PolicyIn    string `yaml:"policy-in,omitempty"`
	PolicyOut   string `yaml:"policy-out,omitempty"`
	LogLevelIn  string `yaml:"log-level-in,omitempty"`
	LogLevelOut string `yaml:"log-level-out,omitempty"`
	DHCP        *bool  `yaml:"dhcp,omitempty"`
	IPFilter    *bool  `yaml:"ipfilter,omitempty"`
	MACFilter   *bool  `yaml:"macfilter,omitempty"`
	NDP         *bool  `yaml:"ndp,omitempty"`
	RAdv        *bool  `yaml:"radv,omitempty"`
	// Rules in the order PVE evaluates them.
	Rules   []FirewallRule           `yaml:"rules,omitempty"`
	IPSets  map[string]FirewallIPSet `yaml:"ipsets,omitempty"`
	Aliases map[string]FirewallAlias `yaml:"aliases,omitempty"`
}

// FirewallRule is one rule, in PVE's terms.
type FirewallRule struct {
	// Type is in, out or group.
	Type string `yaml:"type"`
	// Action is ACCEPT, DROP or REJECT (with a macro, the macro's action), or a group rule's security group.
	Action   string `yaml:"action"`
	Macro    string `yaml:"macro,omitempty"`
	Source   string `yaml:"source,omitempty"`
	Dest     string `yaml:"dest,omitempty"`
	Proto    string `yaml:"proto,omitempty"`
	DPort    string `yaml:"dport,omitempty"`
	SPort    string `yaml:"sport,omitempty"`
	ICMPType string `yaml:"icmp-type,omitempty"`
	// Iface is one of the guest's NICs (netN).
	Iface   string `yaml:"iface,omitempty"`
	Log     string `yaml:"log,omitempty"`
	Comment string `yaml:"comment,omitempty"`
	// Enable defaults to true.
	Enable *bool `yaml:"enable,omitempty"`
}

// FirewallIPSet is one of the guest's IP sets.
type FirewallIPSet struct {
	Comment string               `yaml:"comment,omitempty"`
	Entries []FirewallIPSetEntry `yaml:"entries,omitempty"`
}

// FirewallIPSetEntry is an address or network of an IP set; nomatch excludes it.
type FirewallIPSetEntry struct {
	CIDR    string `yaml:"cidr"`
	NoMatch bool   `yaml:"nomatch,omitempty"`
	Comment string `yaml:"comment,omitempty"`
}

// FirewallAlias names an address or network.
type FirewallAlias struct {
	CIDR    string `yaml:"cidr"`
	Comment string `yaml:"comment,omitempty"`
}

// Firewall returns a guest's declared firewall, nil when it declares none (or is no guest).
func (r *Resource) Firewall() *Firewall { return r.guest().firewall }

// PVE is the rule as PVE stores it: the macro in PVE's spelling, enabled unless said otherwise.
func (fr FirewallRule) PVE() firewall.Rule {
	macro := fr.Macro
	if m, ok := firewall.CanonicalMacro(macro); ok {
		macro = m
	}
	return firewall.Rule{Type: fr.Type, Action: fr.Action, Macro: macro, Source: fr.Source, Dest: fr.Dest,
		Proto: fr.Proto, DPort: fr.DPort, SPort: fr.SPort, ICMPType: fr.ICMPType, Iface: fr.Iface, Log: fr.Log,
		Comment: fr.Comment, Enable: fr.Enable == nil || *fr.Enable}
}

// PVERules are the declared rules as PVE stores them.
func (f *Firewall) PVERules() []firewall.Rule {
	out := make([]firewall.Rule, len(f.Rules))
	for i, r := range f.Rules {
		out[i] = r.PVE()
	}
	return out
}

// FirewallOptionKeys are PVE's keys of a guest's firewall options.
var FirewallOptionKeys = []string{"enable", "dhcp", "ipfilter", "log_level_in", "log_level_out", "macfilter", "ndp",
	"policy_in", "policy_out", "radv"}

// PVEOptions are the declared options under PVE's keys, booleans as 0 or 1; an option not declared is
// absent (PVE's default).
func (f *Firewall) PVEOptions() map[string]string {
	m := map[string]string{}
	b := func(k string, v *bool) {
		if v != nil {
			m[k] = "0"
			if *v {
				m[k] = "1"
			}
		}
	}
	s := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	b("enable", f.Enabled)
	b("dhcp", f.DHCP)
	b("ipfilter", f.IPFilter)
	b("macfilter", f.MACFilter)
	b("ndp", f.NDP)
	b("radv", f.RAdv)
	s("policy_in", f.PolicyIn)
	s("policy_out", f.PolicyOut)
	s("log_level_in", f.LogLevelIn)
	s("log_level_out", f.LogLevelOut)
	return m
}

// FirewallRef is a name a guest's firewall uses that the guest does not define and PVE does not provide:
// a security group, or an IP set or alias of the cluster. Only the live cluster can say whether it exists.
type FirewallRef struct {
	Field string
	Ref   firewall.Ref
}

// ClusterRefs lists, in declaration order, the references of a guest's firewall that neither the guest's
// own IP sets and aliases nor PVE's built-ins resolve.
func (f *Firewall) ClusterRefs() []FirewallRef {
	var out []FirewallRef
	f.walkRefs(func(field string, ref firewall.Ref) {
		if ref.Kind == firewall.RefGroup || (ref.Scope != "guest" && !f.provides(ref)) {
			out = append(out, FirewallRef{Field: field, Ref: ref})
		}
	})
	return out
}

// provides reports whether the guest's own objects or PVE's built-ins resolve a reference.
func (f *Firewall) provides(ref firewall.Ref) bool {
	switch ref.Kind {
	case firewall.RefIPSet:
		if ref.Scope == "dc" {
			return ref.Name == "management" || ref.Name == "blacklist"
		}
		_, own := f.IPSets[ref.Name]
		return own || (ref.Scope == "" && firewall.BuiltinIPSet(ref.Name)) || (ref.Scope == "guest" && strings.HasPrefix(ref.Name, "ipfilter-net") && firewall.BuiltinIPSet(ref.Name))
	case firewall.RefAlias:
		if ref.Scope == "dc" {
			return false
		}
		for n := range f.Aliases {
			if strings.EqualFold(n, ref.Name) {
				return true
			}
		}
	case firewall.RefGroup:
		// Security groups are cluster-wide: a guest provides none.
	}
	return false
}

// walkRefs calls fn for every named object the firewall refers to: group rules, and IP sets and aliases in
// rule addresses and IP set entries.
func (f *Firewall) walkRefs(fn func(field string, ref firewall.Ref)) {
	for i, r := range f.Rules {
		p := yamldecode.Index("spec.firewall.rules", i)
		if r.Type == "group" && firewall.NameRE.MatchString(r.Action) {
			fn(p+".action", firewall.Ref{Kind: firewall.RefGroup, Name: r.Action})
		}
		for _, a := range []struct{ k, v string }{{"source", r.Source}, {"dest", r.Dest}} {
			if a.v == "" {
				continue
			}
			if ref, err := firewall.CheckAddress(a.v); err == nil && ref != nil {
				fn(p+"."+a.k, *ref)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.IPSets)) {
		for i, e := range f.IPSets[name].Entries {
			if _, err := firewall.CheckCIDR(e.CIDR); err == nil {
				continue
			}
			if ref, err := firewall.CheckAddress(e.CIDR); err == nil && ref != nil && ref.Kind == firewall.RefAlias {
				fn(yamldecode.Index(yamldecode.Join("spec.firewall.ipsets", name)+".entries", i)+".cidr", *ref)
			}
		}
	}
}

var (
	firewallPolicies = []string{"ACCEPT", "DROP", "REJECT"}
	ruleTypes        = []string{"in", "out", "group"}
)

// firewall checks a guest's declared firewall; nics are the guest's NIC slots.
func (c *checker) firewall(f *Firewall, nics []string) {
	if f == nil {
		return
	}
	const p = "spec.firewall"
	c.enum(p+".policy-in", f.PolicyIn, firewallPolicies...)
	c.enum(p+".policy-out", f.PolicyOut, firewallPolicies...)
	c.enum(p+".log-level-in", f.LogLevelIn, firewall.LogLevels...)
	c.enum(p+".log-level-out", f.LogLevelOut, firewall.LogLevels...)
	for _, name := range slices.Sorted(maps.Keys(f.IPSets)) {
		sp := yamldecode.Join(p+".ipsets", name)
		if !firewall.NameRE.MatchString(name) || len(name) > 64 {
			c.errorf(sp, "invalid IP set name %s (a letter, then letters, digits, - and _; at least two characters)", diag.Excerpt(name))
		}
		seen := map[string]bool{}
		for i, e := range f.IPSets[name].Entries {
			ep := yamldecode.Index(sp+".entries", i) + ".cidr"
			switch _, err := firewall.CheckCIDR(e.CIDR); {
			case e.CIDR == "":
				c.errorf(ep, "required")
			case err == nil:
			case firewall.NameRE.MatchString(e.CIDR):
				// An alias; resolved below with the rules' references.
			default:
				c.errorf(ep, "%v", err)
			}
			if seen[e.CIDR] {
				c.errorf(ep, "%s is listed twice", e.CIDR)
			}
			seen[e.CIDR] = true
		}
	}
	lower := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(f.Aliases)) {
		ap := yamldecode.Join(p+".aliases", name)
		if !firewall.NameRE.MatchString(name) || len(name) > 64 {
			c.errorf(ap, "invalid alias name %s (a letter, then letters, digits, - and _; at least two characters)", diag.Excerpt(name))
		}
		if first, dup := lower[strings.ToLower(name)]; dup {
			c.errorf(ap, "alias %s differs from %s only in case; PVE's alias names are case-insensitive", name, first)
		}
		lower[strings.ToLower(name)] = name
		a := f.Aliases[name]
		if a.CIDR == "" {
			c.errorf(ap+".cidr", "required")
		} else if _, err := firewall.CheckCIDR(a.CIDR); err != nil {
			c.errorf(ap+".cidr", "%v", err)
		}
	}
	for i, r := range f.Rules {
		c.firewallRule(yamldecode.Index(p+".rules", i), r, nics)
	}
	f.walkRefs(func(field string, ref firewall.Ref) {
		if ref.Scope == "guest" && !f.provides(ref) {
			c.errorf(field, "%s is not defined in spec.firewall (guest/ names the guest's own)", ref)
		}
	})
}

func (c *checker) firewallRule(p string, r FirewallRule, nics []string) {
	switch {
	case r.Type == "":
		c.errorf(p+".type", "required (in, out or group)")
	case !slices.Contains(ruleTypes, r.Type):
		c.errorf(p+".type", "invalid rule type %s (want in|out|group)", diag.Excerpt(r.Type))
	}
	switch {
	case r.Action == "" && r.Type == "group":
		c.errorf(p+".action", "required: the security group's name")
	case r.Action == "":
		c.errorf(p+".action", "required (ACCEPT, DROP or REJECT; with a macro, the macro's action)")
	case r.Type == "group":
		if !firewall.NameRE.MatchString(r.Action) {
			c.errorf(p+".action", "invalid security group name %s", diag.Excerpt(r.Action))
		}
		for _, k := range []struct{ f, v string }{{"macro", r.Macro}, {"source", r.Source}, {"dest", r.Dest},
			{"proto", r.Proto}, {"dport", r.DPort}, {"sport", r.SPort}, {"icmp-type", r.ICMPType}, {"log", r.Log}} {
			if k.v != "" {
				c.errorf(p+"."+k.f, "a group rule takes only the group (action), iface, comment and enable")
			}
		}
	case !slices.Contains(firewall.Actions, r.Action):
		c.errorf(p+".action", "invalid action %s (want ACCEPT|DROP|REJECT)", diag.Excerpt(r.Action))
	}
	if r.Macro != "" {
		if _, ok := firewall.CanonicalMacro(r.Macro); !ok {
			c.errorf(p+".macro", "unknown macro %s (PVE's macros are listed by pvesh get /cluster/firewall/macros)", diag.Excerpt(r.Macro))
		}
	}
	if r.Iface != "" {
		switch {
		case !firewall.GuestIfaceRE.MatchString(r.Iface):
			c.errorf(p+".iface", "invalid interface %s (a guest's rule names one of its NICs: netN)", diag.Excerpt(r.Iface))
		case !slices.Contains(nics, r.Iface):
			c.errorf(p+".iface", "interface %s is not one of the guest's NICs (%s)", r.Iface, orNone(nics))
		}
	}
	if r.Proto != "" {
		if err := firewall.CheckProto(r.Proto); err != nil {
			c.errorf(p+".proto", "%v", err)
		}
	}
	for _, port := range []struct{ f, v string }{{"dport", r.DPort}, {"sport", r.SPort}} {
		switch {
		case port.v == "":
		case r.Proto == "":
			c.errorf(p+"."+port.f, "needs proto (tcp, udp, dccp or sctp)")
		case !firewall.ProtoHasPorts(r.Proto):
			c.errorf(p+"."+port.f, "protocol %s does not support ports", r.Proto)
		default:
			if err := firewall.CheckPorts(port.v); err != nil {
				c.errorf(p+"."+port.f, "%v", err)
			}
		}
	}
	if r.ICMPType != "" {
		switch {
		case !firewall.IsICMP(r.Proto):
			c.errorf(p+".icmp-type", "needs proto icmp or icmpv6")
		case r.DPort != "":
			c.errorf(p+".icmp-type", "cannot be given with dport")
		default:
			if err := firewall.CheckICMPType(r.Proto, r.ICMPType); err != nil {
				c.errorf(p+".icmp-type", "%v", err)
			}
		}
	}
	for _, a := range []struct{ f, v string }{{"source", r.Source}, {"dest", r.Dest}} {
		if a.v == "" {
			continue
		}
		if _, err := firewall.CheckAddress(a.v); err != nil {
			c.errorf(p+"."+a.f, "%v", err)
		}
	}
	c.enum(p+".log", r.Log, firewall.LogLevels...)
	if strings.ContainsAny(r.Comment, "\r\n") {
		c.errorf(p+".comment", "must be a single line")
	}
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "it declares none"
	}
	return strings.Join(list, ", ")
}

func cloneFirewall(f *Firewall) *Firewall {
	if f == nil {
		return nil
	}
	out := *f
	out.Enabled, out.DHCP, out.IPFilter = clonePtr(f.Enabled), clonePtr(f.DHCP), clonePtr(f.IPFilter)
	out.MACFilter, out.NDP, out.RAdv = clonePtr(f.MACFilter), clonePtr(f.NDP), clonePtr(f.RAdv)
	out.Rules = make([]FirewallRule, len(f.Rules))
	for i, r := range f.Rules {
		r.Enable = clonePtr(r.Enable)
		out.Rules[i] = r
	}
	if f.IPSets != nil {
		out.IPSets = make(map[string]FirewallIPSet, len(f.IPSets))
		for n, s := range f.IPSets {
			s.Entries = slices.Clone(s.Entries)
			out.IPSets[n] = s
		}
	}
	out.Aliases = maps.Clone(f.Aliases)
	return &out
}
