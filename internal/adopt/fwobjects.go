package adopt

import (
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/firewall"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
)

// The cluster's firewall objects are adopted as SecurityGroup, IPSet and Alias manifests, one per live
// object no manifest declares, with the comment without the ownership marker: committed, each plans a claim
// (the marker added), as an adopted pool does. A security group is owned as a whole, so one with a rule the
// model cannot carry (a property it does not know, or a form the manifest refuses) is not adopted: each such
// rule is a gap, and the group stays PVE's until a manifest declares it.

// clusterFirewall is the cluster's firewall objects as the first node that read them reports them.
func (r *run) clusterFirewall() *inventory.ClusterFirewall {
	for _, n := range r.nodes {
		if n.ClusterFirewall != nil && n.ClusterFirewall.ObjectsRead {
			return n.ClusterFirewall
		}
	}
	return nil
}

// declaredFirewallObject reports whether a manifest declares the firewall object (an alias's and a group's
// name compared without case, as PVE does).
func (r *run) declaredFirewallObject(kind manifest.Kind, name string) bool {
	for _, d := range r.in.Declared {
		if d.Kind != kind {
			continue
		}
		n := d.FirewallObjectName()
		if n == name || (kind != manifest.KindIPSet && strings.EqualFold(n, name)) {
			return true
		}
	}
	return false
}

// adoptFirewallObject names, validates and emits one adopted firewall object.
func (r *run) adoptFirewallObject(kind manifest.Kind, liveName string, spec manifest.Spec, setName func(string)) error {
	name := r.objectName(kind, liveName, strings.ToLower(string(kind)))
	if name != liveName {
		setName(liveName)
	}
	return r.emitObject(kind, name, spec, strings.ToLower(string(kind))+" "+liveName)
}

// objectName names the manifest of an adopted cluster object after its live id (fallback when the id
// gives no usable name), unique among the manifests of its kind.
func (r *run) objectName(kind manifest.Kind, id, fallback string) string {
	base := Name(id)
	if base == "" {
		base = fallback
	}
	return r.namers[kind].assign(base, id)
}

// emitObject writes the manifest of an adopted cluster object; incomplete are what adoption could not fill
// in, before what validation finds. what names the object in the report.
func (r *run) emitObject(kind manifest.Kind, name string, spec manifest.Spec, what string, incomplete ...string) error {
	res := &manifest.Resource{APIVersion: manifest.APIVersion, Kind: kind, Metadata: manifest.Metadata{Name: name}, Spec: spec}
	m := Manifest{Path: Path(kind, r.in.Cluster, name), Resource: res, Incomplete: incomplete}
	for _, d := range validationDiags(res) {
		m.Incomplete = append(m.Incomplete, diagText(d))
	}
	return r.emit(m, what)
}

// adoptFirewallObjects writes the manifests of the cluster's undeclared aliases, IP sets and security
// groups.
func (r *run) adoptFirewallObjects() error {
	cf := r.clusterFirewall()
	if cf == nil {
		return nil
	}
	for _, a := range cf.AliasObjects {
		if r.declaredFirewallObject(manifest.KindAlias, a.Name) {
			continue
		}
		spec := &manifest.AliasSpec{CIDR: a.CIDR, Comment: pveformat.CommentText(a.Comment)}
		if err := r.adoptFirewallObject(manifest.KindAlias, a.Name, spec, func(n string) { spec.Name = n }); err != nil {
			return err
		}
	}
	for _, s := range cf.IPSetObjects {
		if r.declaredFirewallObject(manifest.KindIPSet, s.Name) {
			continue
		}
		spec := &manifest.IPSetSpec{Comment: pveformat.CommentText(s.Comment)}
		for _, e := range s.Entries {
			spec.Entries = append(spec.Entries, manifest.FirewallIPSetEntry(e))
		}
		if err := r.adoptFirewallObject(manifest.KindIPSet, s.Name, spec, func(n string) { spec.Name = n }); err != nil {
			return err
		}
	}
	for _, g := range cf.Groups {
		if r.declaredFirewallObject(manifest.KindSecurityGroup, g.Name) {
			continue
		}
		spec, gaps := groupSpec(g)
		if len(gaps) > 0 {
			r.res.Gaps = append(r.res.Gaps, gaps...)
			continue
		}
		if err := r.adoptFirewallObject(manifest.KindSecurityGroup, g.Name, spec, func(n string) { spec.Name = n }); err != nil {
			return err
		}
	}
	return nil
}

// groupSpec is a live security group as a manifest's spec, or the gaps of the rules it cannot carry.
func groupSpec(g inventory.FirewallGroup) (*manifest.SecurityGroupSpec, []inventory.Gap) {
	var gaps []inventory.Gap
	gap := func(i int, value, note string) {
		gaps = append(gaps, inventory.Gap{Setting: inventory.Setting{Kind: string(manifest.KindSecurityGroup), Name: g.Name,
			Key: "rules[" + strconv.Itoa(i) + "]", Value: value},
			Note: note + "; the security group is not adopted (not owned) because a declared group is owned as a whole"})
	}
	check := func(rules []manifest.FirewallRule) []manifest.FieldProblem {
		probe := &manifest.Resource{APIVersion: manifest.APIVersion, Kind: manifest.KindSecurityGroup,
			Metadata: manifest.Metadata{Name: "probe"}, Spec: &manifest.SecurityGroupSpec{Name: g.Name, Rules: rules}}
		var out []manifest.FieldProblem
		for _, d := range validationDiags(probe) {
			out = append(out, manifest.FieldProblem{Field: d.Field, Message: d.Message})
		}
		return out
	}
	rules, ok := carryRules(g.Rules, "spec.rules", check, gap)
	if !ok {
		return nil, gaps
	}
	return &manifest.SecurityGroupSpec{Comment: pveformat.CommentText(g.Comment), Rules: rules}, nil
}

// carryRules is a live rule list (a security group's, the cluster's own) as manifest rules, whole or not at
// all. Each rule the model cannot carry is a gap (gap takes its index, its text and why): a property the
// model does not know, what check (the model's own validation, whose fields name a rule as list[N]) refuses,
// or a list that does not read back as PVE reports it. ok is false when there is any gap.
func carryRules(live []map[string]string, list string, check func([]manifest.FirewallRule) []manifest.FieldProblem,
	gap func(i int, value, note string)) (rules []manifest.FirewallRule, ok bool) {
	ok = true
	pve := make([]firewall.Rule, len(live))
	for i, m := range live {
		pve[i] = firewall.RuleFromFields(m)
		if unknown := unknownRuleKeys(m); len(unknown) > 0 {
			gap(i, pve[i].String(), "rule property "+strings.Join(unknown, ", ")+" is not in the manifest model")
			ok = false
			continue
		}
		rules = append(rules, manifestRule(pve[i]))
	}
	if !ok {
		return nil, false
	}
	for _, p := range check(rules) {
		if i, found := indexAfter(p.Field, list); found {
			gap(i, pve[i].String(), p.Message)
			ok = false
		}
	}
	if !ok {
		return nil, false
	}
	back := make([]firewall.Rule, len(rules))
	for i, r := range rules {
		back[i] = r.PVE()
	}
	if !slices.Equal(back, pve) {
		gap(0, "", "the rules do not read back as PVE reports them")
		return nil, false
	}
	return rules, true
}
