package adopt

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/firewall"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
)

// A guest's firewall is adopted when it is not PVE's default (enabled, or any option, rule, IP set or
// alias). A declared firewall is owned as a whole, so a firewall the model cannot carry entirely (a rule
// with a property or a form it does not know) is left out of the manifest: every rule it cannot carry is a
// gap, and the guest's firewall stays PVE's (not owned) until the manifest declares one.

// ruleKeys are the rule properties the model carries; ipversion PVE derives itself.
var ruleKeys = append(firewall.Keys(), "ipversion")

// firewall returns the manifest's spec.firewall for the guest's observed firewall, nil when it is PVE's
// default or cannot be carried whole (its gaps are recorded). res is the manifest so far, for its NICs.
func (c *guest) firewall(res *manifest.Resource) *manifest.Firewall {
	live := c.g.Firewall
	if live == nil || (len(live.Options) == 0 && len(live.Rules) == 0 && len(live.IPSets) == 0 && len(live.Aliases) == 0) {
		return nil
	}
	f := &manifest.Firewall{}
	var uncovered []inventory.Gap
	gap := func(key, value, note string) {
		uncovered = append(uncovered, inventory.Gap{Setting: inventory.Setting{Kind: string(c.kind), Name: c.name,
			Node: c.g.Node, VMID: c.g.VMID, Key: key, Value: value}, Note: note})
	}
	for _, k := range slices.Sorted(maps.Keys(live.Options)) {
		v := live.Options[k]
		b := func() *bool { return manifest.Bool(v == "1") }
		switch k {
		case "enable":
			f.Enabled = b()
		case "dhcp":
			f.DHCP = b()
		case "ipfilter":
			f.IPFilter = b()
		case "macfilter":
			f.MACFilter = b()
		case "ndp":
			f.NDP = b()
		case "radv":
			f.RAdv = b()
		case "policy_in":
			f.PolicyIn = v
		case "policy_out":
			f.PolicyOut = v
		case "log_level_in":
			f.LogLevelIn = v
		case "log_level_out":
			f.LogLevelOut = v
		default:
			gap("firewall.options."+k, v, "a firewall option the manifest model does not carry")
		}
	}
	for i, m := range live.Rules {
		unknown := unknownRuleKeys(m)
		r := firewall.RuleFromFields(m)
		if len(unknown) > 0 {
			gap("firewall.rules["+strconv.Itoa(i)+"]", r.String(), "rule property "+strings.Join(unknown, ", ")+" is not in the manifest model")
			continue
		}
		f.Rules = append(f.Rules, manifestRule(r))
	}
	for _, s := range live.IPSets {
		if f.IPSets == nil {
			f.IPSets = map[string]manifest.FirewallIPSet{}
		}
		set := manifest.FirewallIPSet{Comment: s.Comment}
		for _, e := range s.Entries {
			set.Entries = append(set.Entries, manifest.FirewallIPSetEntry(e))
		}
		f.IPSets[s.Name] = set
	}
	for _, a := range live.Aliases {
		if f.Aliases == nil {
			f.Aliases = map[string]manifest.FirewallAlias{}
		}
		f.Aliases[a.Name] = manifest.FirewallAlias{CIDR: a.CIDR, Comment: a.Comment}
	}
	if len(uncovered) == 0 {
		// The rules must pass the manifest's own checks (a macro, a port form, an interface it knows).
		probe := *res
		switch s := res.Spec.(type) {
		case *manifest.VMSpec:
			v := *s
			v.Firewall = f
			probe.Spec = &v
		case *manifest.LXCSpec:
			v := *s
			v.Firewall = f
			probe.Spec = &v
		}
		for _, d := range validationDiags(&probe) {
			if after, ok := strings.CutPrefix(d.Field, "spec."); ok && strings.HasPrefix(after, "firewall") {
				value := ""
				if i, ok := ruleIndex(after); ok {
					value = firewall.RuleFromFields(live.Rules[i]).String()
				}
				gap(after, value, d.Message)
			}
		}
	}
	if len(uncovered) == 0 && !slices.Equal(f.PVERules(), liveRules(live)) {
		gap("firewall.rules", "", "the rules do not read back as PVE reports them")
	}
	if len(uncovered) > 0 {
		for i := range uncovered {
			uncovered[i].Note += "; the guest's firewall is left out of the manifest (not owned) because a declared firewall is owned as a whole"
		}
		c.gaps = append(c.gaps, uncovered...)
		return nil
	}
	return f
}

// manifestRule is a live rule as a manifest writes it (enable only when false).
func manifestRule(r firewall.Rule) manifest.FirewallRule {
	fr := manifest.FirewallRule{Type: r.Type, Action: r.Action, Macro: r.Macro, Source: r.Source, Dest: r.Dest,
		Proto: r.Proto, DPort: r.DPort, SPort: r.SPort, ICMPType: r.ICMPType, Iface: r.Iface, Log: r.Log, Comment: r.Comment}
	if !r.Enable {
		fr.Enable = manifest.Bool(false)
	}
	return fr
}

// unknownRuleKeys lists, sorted, the properties of a live rule the model does not carry.
func unknownRuleKeys(m map[string]string) []string {
	var unknown []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(ruleKeys, k) {
			unknown = append(unknown, k)
		}
	}
	return unknown
}

// ruleIndex reads N from "firewall.rules[N]…".
func ruleIndex(field string) (int, bool) { return indexAfter(field, "firewall.rules") }

// indexAfter reads N from a field path list+"[N]…".
func indexAfter(field, list string) (int, bool) {
	rest, ok := strings.CutPrefix(field, list+"[")
	if !ok {
		return 0, false
	}
	n, _, ok := strings.Cut(rest, "]")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil
}

func liveRules(f *inventory.Firewall) []firewall.Rule {
	out := make([]firewall.Rule, len(f.Rules))
	for i, m := range f.Rules {
		out[i] = firewall.RuleFromFields(m)
	}
	return out
}

// setFirewall writes the adopted firewall into the manifest's spec.
func setFirewall(res *manifest.Resource, f *manifest.Firewall) {
	switch s := res.Spec.(type) {
	case *manifest.VMSpec:
		s.Firewall = f
	case *manifest.LXCSpec:
		s.Firewall = f
	}
}
