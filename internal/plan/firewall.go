package plan

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/firewall"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/repo"
)

// A guest's firewall (spec.firewall). Absent, it is not owned: nothing is read or written. Declared, it is
// owned as a whole: one apply-guest-firewall operation per guest makes the live options, rules, IP sets and
// aliases the declared ones whenever anything differs. The operation carries the whole declaration (the
// executor computes the position edits against the list it reads, see internal/pve/firewall.go) and the
// digest of the rule list the plan observed, so a concurrent edit is detected rather than overwritten.

// FirewallLockout is the mark of a firewall operation the plan holds for confirmation: it would leave the
// guest's firewall dropping every inbound connection.
const FirewallLockout = "held: could lock everyone out"

// FirewallVMIDs lists, sorted, the guests whose manifests declare a firewall: the only guests whose
// firewall an observe reads.
func FirewallVMIDs(c *repo.Cluster) []int {
	var out []int
	if c == nil {
		return nil
	}
	for _, r := range c.Resources {
		if r.Kind.IsGuest() && r.Firewall() != nil {
			out = append(out, r.VMID())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// clusterFirewall is the cluster's firewall objects as any observed node reported them.
func (d *differ) clusterFirewall() *inventory.ClusterFirewall {
	for _, n := range d.in.Observed.Nodes {
		if n.ClusterFirewall != nil {
			return n.ClusterFirewall
		}
	}
	return nil
}

// checkFirewallRefs resolves the names declared firewalls use that the guest does not provide: by a
// SecurityGroup, IPSet or Alias manifest, else by the live cluster; an error (with the reference's position)
// when neither has it, a warning when only the live cluster does (git does not declare it: a change made by
// hand there breaks the rule).
func (d *differ) checkFirewallRefs() diag.List {
	var out diag.List
	cf := d.clusterFirewall()
	for _, r := range d.resources {
		f := r.Firewall()
		if f == nil {
			continue
		}
		for _, ref := range f.ClusterRefs() {
			dg := diagAt(r, ref.Field, "")
			if ref.Ref.Scope != "guest" && d.fw.declared[fwKey(refKind(ref.Ref.Kind), ref.Ref.Name)] != nil {
				continue // declared in git
			}
			if cf == nil {
				d.finding(FindingWarning, r.Ref().String(), r.Node(), r.VMID(), ref.Field,
					fmt.Sprintf("%s (%s): the cluster's firewall objects were not observed, so whether it exists is unknown", ref.Ref, location(dg)))
				continue
			}
			if !clusterHas(cf, ref.Ref) {
				dg.Message = fmt.Sprintf("%s is neither declared in spec.firewall or in git (%s/), nor a PVE built-in, nor defined on the cluster", ref.Ref, fwRefRoot(ref.Ref))
				out = append(out, dg)
				continue
			}
			d.finding(FindingWarning, r.Ref().String(), r.Node(), r.VMID(), ref.Field,
				fmt.Sprintf("%s (%s) is not declared in git; only the live cluster provides it", ref.Ref, location(dg)))
		}
	}
	return out.Sorted()
}

func location(dg diag.Diagnostic) string {
	return fmt.Sprintf("%s:%d:%d", dg.File, dg.Line, dg.Column)
}

func clusterHas(cf *inventory.ClusterFirewall, ref firewall.Ref) bool {
	switch ref.Kind {
	case firewall.RefGroup:
		return slices.ContainsFunc(cf.Groups, func(g inventory.FirewallGroup) bool { return strings.EqualFold(g.Name, ref.Name) })
	case firewall.RefIPSet:
		return slices.Contains(cf.IPSets, ref.Name)
	case firewall.RefAlias:
		return slices.ContainsFunc(cf.Aliases, func(a string) bool { return strings.EqualFold(a, ref.Name) })
	}
	return false
}

// fwIPSet and fwAlias are the JSON the executor reads from the ipsets and aliases parameters.
type fwIPSet struct {
	Name    string         `json:"name"`
	Comment string         `json:"comment,omitempty"`
	Entries []fwIPSetEntry `json:"entries"`
}

type fwIPSetEntry struct {
	CIDR    string `json:"cidr"`
	NoMatch bool   `json:"nomatch,omitempty"`
	Comment string `json:"comment,omitempty"`
}

type fwAlias struct {
	Name    string `json:"name"`
	CIDR    string `json:"cidr"`
	Comment string `json:"comment,omitempty"`
}

// optionFields are the manifest's names of PVE's firewall option keys.
var optionFields = map[string]string{"enable": "enabled", "policy_in": "policy-in", "policy_out": "policy-out",
	"log_level_in": "log-level-in", "log_level_out": "log-level-out"}

func optionField(k string) string {
	if f, ok := optionFields[k]; ok {
		return "firewall." + f
	}
	return "firewall." + k
}

// fwDiff is how a live firewall (a guest's or the cluster's) differs from the declared one.
type fwDiff struct {
	// values are the options to write (an empty value deletes one); changes show them, then the rule changes.
	values         []KV
	changes        []Change
	optionsChanged bool
	// live are the live rules; ruleChanges how the declared ones differ from them.
	live        []firewall.Rule
	ruleChanges []firewall.RuleChange
}

// diffFirewall compares the options of keys and the rules of a live firewall with the declared ones.
func diffFirewall(keys []string, want, have map[string]string, haveRules []map[string]string, declared []firewall.Rule) fwDiff {
	var fd fwDiff
	for _, k := range keys {
		w, isDeclared := want[k]
		cur, present := have[k]
		switch {
		case isDeclared && cur != w:
			fd.values = append(fd.values, KV{Key: k, Value: w})
			fd.changes = append(fd.changes, Change{Field: optionField(k), Before: cur, After: w})
		case !isDeclared && present:
			fd.values = append(fd.values, KV{Key: k, Value: ""})
			fd.changes = append(fd.changes, Change{Field: optionField(k), Before: cur, After: ""})
		}
	}
	fd.optionsChanged = len(fd.changes) > 0
	fd.live = make([]firewall.Rule, len(haveRules))
	for i, m := range haveRules {
		fd.live[i] = firewall.RuleFromFields(m)
	}
	fd.ruleChanges = firewall.Compare(fd.live, declared)
	for _, c := range fd.ruleChanges {
		fd.changes = append(fd.changes, ruleChange(c))
	}
	return fd
}

// firewallOp returns the operation that makes a guest's firewall the declared one (live is nil for a guest
// this plan creates), or false when nothing differs. held says it would lock everyone out.
func (d *differ) firewallOp(r *manifest.Resource, live *inventory.Firewall, node string, vmid int) (Operation, bool, string) {
	f := r.Firewall()
	if live == nil {
		live = &inventory.Firewall{}
	}
	declRules := f.PVERules()
	want := f.PVEOptions()
	fd := diffFirewall(manifest.FirewallOptionKeys, want, live.Options, live.Rules, declRules)
	changes, values, optionsChanged, liveRules, ruleChanges := fd.changes, fd.values, fd.optionsChanged, fd.live, fd.ruleChanges

	sets := declaredIPSets(f)
	liveSets := observedIPSets(live)
	for _, n := range unionNames(sets, liveSets) {
		w, cur := sets[n], liveSets[n]
		if !sameIPSet(w, cur) {
			changes = append(changes, Change{Field: "firewall.ipsets." + n, Before: ipsetText(cur), After: ipsetText(w)})
		}
	}
	aliases := declaredAliases(f)
	liveAliases := observedAliases(live)
	for _, n := range unionNames(aliases, liveAliases) {
		w, cur := aliases[n], liveAliases[n]
		if w == nil || cur == nil || *w != *cur {
			changes = append(changes, Change{Field: "firewall.aliases." + aliasName(w, cur), Before: aliasText(cur), After: aliasText(w)})
		}
	}
	if len(changes) == 0 {
		return Operation{}, false, ""
	}

	rulesJSON := make([]map[string]string, len(declRules))
	for i, rr := range declRules {
		rulesJSON[i] = rr.Fields()
	}
	setList := make([]fwIPSet, 0, len(sets))
	for _, n := range slices.Sorted(maps.Keys(sets)) {
		setList = append(setList, *sets[n])
	}
	aliasList := make([]fwAlias, 0, len(aliases))
	for _, n := range slices.Sorted(maps.Keys(aliases)) {
		aliasList = append(aliasList, *aliases[n])
	}
	op := Operation{ID: d.opID(guestOpID(guestType(r.Kind), vmid, ActionApplyGuestFirewall, "")), Cluster: d.cluster,
		Node: node, VMID: vmid, GuestType: guestType(r.Kind), Ref: r.Ref().String(), Action: ActionApplyGuestFirewall,
		Values: values, Changes: changes,
		Params: []KV{{Key: "rules", Value: mustJSON(rulesJSON)}, {Key: "ipsets", Value: mustJSON(setList)},
			{Key: "aliases", Value: mustJSON(aliasList)}}}
	if live.RulesDigest != "" {
		op.Precondition.Expect = []KV{{Key: "rules-digest", Value: live.RulesDigest}}
	}
	op.Reason = fmt.Sprintf("%s: firewall %s", r.Ref(), firewallSummary(optionsChanged, ruleChanges, changes))

	groups := d.firewallGroups()
	locked, why := firewall.GuestLockout(firewall.Guest{Enabled: want["enable"] == "1", PolicyIn: want["policy_in"],
		Rules: declRules, Groups: groups})
	wasLocked, _ := firewall.GuestLockout(firewall.Guest{Enabled: live.Options["enable"] == "1",
		PolicyIn: live.Options["policy_in"], Rules: liveRules, Groups: groups})
	if locked && !wasLocked {
		op.Reason += " (" + FirewallLockout + ")"
		return op, true, why
	}
	return op, true, ""
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic("plan: " + err.Error())
	}
	return string(b)
}

// firewallSummary says in a few words what the operation changes.
func firewallSummary(options bool, rules []firewall.RuleChange, all []Change) string {
	var parts []string
	if options {
		parts = append(parts, "options")
	}
	parts = append(parts, ruleCounts(rules)...)
	sets, aliases := 0, 0
	for _, c := range all {
		switch {
		case strings.HasPrefix(c.Field, "firewall.ipsets."):
			sets++
		case strings.HasPrefix(c.Field, "firewall.aliases."):
			aliases++
		}
	}
	if sets > 0 {
		parts = append(parts, fmt.Sprintf("%d IP set(s)", sets))
	}
	if aliases > 0 {
		parts = append(parts, fmt.Sprintf("%d alias(es)", aliases))
	}
	return "drift: " + strings.Join(parts, ", ")
}

// ruleCounts counts rule changes by kind: "2 rules added", "1 rule moved".
func ruleCounts(rules []firewall.RuleChange) []string {
	count := map[firewall.ChangeKind]int{}
	for _, c := range rules {
		count[c.Kind]++
	}
	var parts []string
	for _, k := range []firewall.ChangeKind{firewall.Added, firewall.Changed, firewall.Moved, firewall.Removed} {
		if n := count[k]; n > 0 {
			word := "rules"
			if n == 1 {
				word = "rule"
			}
			parts = append(parts, fmt.Sprintf("%d %s %s", n, word, k))
		}
	}
	return parts
}

// ruleChange shows one rule change of a guest's firewall.
func ruleChange(c firewall.RuleChange) Change { return ruleChangeAt("firewall.rules", c) }

// ruleChangeAt shows one rule change of the rule list at field: the declared position in the field, where a
// rule came from in brackets; a removed rule shows its live position.
func ruleChangeAt(field string, c firewall.RuleChange) Change {
	switch c.Kind {
	case firewall.Added:
		return Change{Field: fmt.Sprintf("%s[%d]", field, c.To), After: c.After.String()}
	case firewall.Removed:
		return Change{Field: field, Before: fmt.Sprintf("[%d] %s", c.From, c.Before.String())}
	case firewall.Moved:
		return Change{Field: fmt.Sprintf("%s[%d]", field, c.To), Before: fmt.Sprintf("[%d]", c.From), After: c.After.String()}
	case firewall.Changed:
	}
	before := c.Before.String()
	if c.From != c.To {
		before = fmt.Sprintf("[%d] %s", c.From, before)
	}
	return Change{Field: fmt.Sprintf("%s[%d]", field, c.To), Before: before, After: c.After.String()}
}

// firewallGroups are the cluster's security groups by lower-case name, for the lock-out check: the
// declared ones as declared (what they hold once the plan ran), the others as live.
func (d *differ) firewallGroups() map[string][]firewall.Rule {
	out := map[string][]firewall.Rule{}
	if cf := d.clusterFirewall(); cf != nil {
		for _, g := range cf.Groups {
			for _, m := range g.Rules {
				out[strings.ToLower(g.Name)] = append(out[strings.ToLower(g.Name)], firewall.RuleFromFields(m))
			}
		}
	}
	for _, r := range d.resources {
		if g := r.SecurityGroup(); g != nil {
			out[strings.ToLower(r.FirewallObjectName())] = g.PVERules()
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func declaredIPSets(f *manifest.Firewall) map[string]*fwIPSet {
	out := map[string]*fwIPSet{}
	for n, s := range f.IPSets {
		set := &fwIPSet{Name: n, Comment: s.Comment, Entries: []fwIPSetEntry{}}
		for _, e := range s.Entries {
			set.Entries = append(set.Entries, fwIPSetEntry(e))
		}
		out[n] = set
	}
	return out
}

func observedIPSets(f *inventory.Firewall) map[string]*fwIPSet {
	out := map[string]*fwIPSet{}
	for _, s := range f.IPSets {
		set := &fwIPSet{Name: s.Name, Comment: s.Comment, Entries: []fwIPSetEntry{}}
		for _, e := range s.Entries {
			set.Entries = append(set.Entries, fwIPSetEntry(e))
		}
		out[s.Name] = set
	}
	return out
}

// sameIPSet compares two IP sets, their entries as a set (PVE keeps them by address).
func sameIPSet(a, b *fwIPSet) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Comment != b.Comment || len(a.Entries) != len(b.Entries) {
		return false
	}
	for _, e := range a.Entries {
		if !slices.Contains(b.Entries, e) {
			return false
		}
	}
	return true
}

func ipsetText(s *fwIPSet) string {
	if s == nil {
		return ""
	}
	entries := slices.Clone(s.Entries)
	slices.SortFunc(entries, func(a, b fwIPSetEntry) int { return cmp.Compare(a.CIDR, b.CIDR) })
	var parts []string
	for _, e := range entries {
		p := e.CIDR
		if e.NoMatch {
			p = "!" + p
		}
		if e.Comment != "" {
			p += " (" + e.Comment + ")"
		}
		parts = append(parts, p)
	}
	out := "[" + strings.Join(parts, ", ") + "]"
	if s.Comment != "" {
		out += " # " + s.Comment
	}
	return out
}

// Aliases are keyed by lower-case name: PVE's alias names are case-insensitive.
func declaredAliases(f *manifest.Firewall) map[string]*fwAlias {
	out := map[string]*fwAlias{}
	for n, a := range f.Aliases {
		out[strings.ToLower(n)] = &fwAlias{Name: n, CIDR: a.CIDR, Comment: a.Comment}
	}
	return out
}

func observedAliases(f *inventory.Firewall) map[string]*fwAlias {
	out := map[string]*fwAlias{}
	for _, a := range f.Aliases {
		out[strings.ToLower(a.Name)] = &fwAlias{Name: a.Name, CIDR: a.CIDR, Comment: a.Comment}
	}
	return out
}

func aliasName(a, b *fwAlias) string {
	if a != nil {
		return a.Name
	}
	return b.Name
}

func aliasText(a *fwAlias) string {
	if a == nil {
		return ""
	}
	out := a.Name + " = " + a.CIDR
	if a.Comment != "" {
		out += " # " + a.Comment
	}
	return out
}

func unionNames[V any](a, b map[string]V) []string {
	names := slices.Collect(maps.Keys(a))
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// planGuestFirewall is the update step of an existing guest: its firewall after its config.
func (d *differ) planGuestFirewall(s *guestUpdate) error {
	if s.r.Firewall() == nil {
		return nil
	}
	if s.g.Firewall == nil {
		d.finding(FindingAnomaly, s.ref.String(), s.g.Node, s.g.VMID, "spec.firewall",
			"the guest's firewall was not observed (an executor that does not read firewalls?); it is not planned")
		return nil
	}
	op, ok, why := d.firewallOp(s.r, s.g.Firewall, s.g.Node, s.g.VMID)
	if !ok {
		return nil
	}
	d.add(s, op)
	d.holdFirewall(s.r, s.g.Node, why)
	return nil
}

// planCreatedFirewall applies the declared firewall of a guest this plan creates before the guest first
// runs: a create that would start the guest creates it stopped, the firewall is applied, then it starts.
func (d *differ) planCreatedFirewall(r *manifest.Resource, u *unit) {
	if r.Firewall() == nil || len(u.ops) == 0 {
		return
	}
	op, ok, why := d.firewallOp(r, nil, r.Node(), r.VMID())
	if !ok {
		return
	}
	first := &u.ops[0]
	started := false
	for i, v := range first.Values {
		if v.Key == "start" && v.Value == "1" {
			first.Values[i].Value = "0"
			started = true
		}
	}
	op.DependsOn = []string{u.last()}
	u.ops = append(u.ops, op)
	d.holdFirewall(r, r.Node(), why)
	if started {
		t := guestType(r.Kind)
		u.ops = append(u.ops, Operation{ID: d.opID(guestOpID(t, r.VMID(), ActionStart, "")), Cluster: d.cluster,
			Node: r.Node(), VMID: r.VMID(), GuestType: t, Ref: r.Ref().String(), Action: ActionStart,
			DependsOn: []string{op.ID}, Reason: fmt.Sprintf("%s: start once its firewall is applied", r.Ref()),
			Changes: []Change{{Field: "power", Before: "stopped", After: "running"}}})
	}
}

// holdFirewall holds the plan for confirmation when a firewall operation could lock everyone out.
func (d *differ) holdFirewall(r *manifest.Resource, node, why string) {
	if why == "" {
		return
	}
	d.fwHeld = append(d.fwHeld, r.Ref().String())
	d.finding(FindingWarning, r.Ref().String(), node, r.VMID(), "spec.firewall",
		why+"; the plan is held until it is confirmed")
}
