package plan

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/firewall"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/repo"
)

// The cluster's firewall objects (SecurityGroup, IPSet and Alias manifests) are cluster objects owned as
// pools are (see objects.go): the ownership marker in the comment and an ObjectRecord of their kind
// (manifest.Kind.ObjectKind) and PVE name. A declared object is owned as a whole: a group's rules become
// exactly the declared ones, in order (the executor makes the fewest position edits, with the digest of
// the list this plan observed as precondition), an IP set's entries the declared ones, an alias's address
// the declared one. Their operations run on the cluster's work queue, aliases before the IP sets that name
// them, IP sets and aliases before the groups whose rules name them, and all of them before the guest
// firewalls that use them; deletes come last, groups first.

// fwKinds are the firewall object kinds in the order they are created: what others name first.
var fwKinds = []manifest.Kind{manifest.KindAlias, manifest.KindIPSet, manifest.KindSecurityGroup}

// fwKindIndex is the position in fwKinds of an ownership inventory kind.
func fwKindIndex(objectKind string) int {
	return slices.IndexFunc(fwKinds, func(k manifest.Kind) bool { return k.ObjectKind() == objectKind })
}

// refKind is the manifest kind a rule's reference names.
func refKind(k firewall.RefKind) manifest.Kind {
	switch k {
	case firewall.RefGroup:
		return manifest.KindSecurityGroup
	case firewall.RefIPSet:
		return manifest.KindIPSet
	case firewall.RefAlias:
	}
	return manifest.KindAlias
}

// fwObject is one firewall object of the cluster as the planner compares it.
type fwObject struct {
	kind manifest.Kind
	name string
	// comment is the live comment (marker included) or the declared one (without).
	comment string
	rules   []firewall.Rule
	digest  string
	entries []fwIPSetEntry
	cidr    string
}

// fwKey is a firewall object's kind and the name PVE compares: an alias's and a group's in lower case.
func fwKey(kind manifest.Kind, name string) objectKey {
	if kind == manifest.KindAlias || kind == manifest.KindSecurityGroup {
		name = strings.ToLower(name)
	}
	return objectKey{kind.ObjectKind(), name}
}

// fwState is the differ's state of the cluster's firewall objects.
type fwState struct {
	// observed says the observe reported the objects with their contents.
	observed bool
	live     map[objectKey]fwObject
	declared map[objectKey]*manifest.Resource
	// units are the units of the objects this plan creates, claims or configures.
	units map[objectKey]*unit
}

func (d *differ) initFirewallObjects() {
	s := &d.fw
	s.live, s.declared, s.units = map[objectKey]fwObject{}, map[objectKey]*manifest.Resource{}, map[objectKey]*unit{}
	for _, r := range d.resources {
		if r.Kind.IsFirewallObject() {
			s.declared[fwKey(r.Kind, r.FirewallObjectName())] = r
		}
	}
	cf := d.clusterFirewall()
	if cf == nil || !cf.ObjectsRead {
		return
	}
	s.observed = true
	for _, g := range cf.Groups {
		o := fwObject{kind: manifest.KindSecurityGroup, name: g.Name, comment: g.Comment, digest: g.RulesDigest}
		for _, m := range g.Rules {
			o.rules = append(o.rules, firewall.RuleFromFields(m))
		}
		s.live[fwKey(o.kind, o.name)] = o
	}
	for _, set := range cf.IPSetObjects {
		o := fwObject{kind: manifest.KindIPSet, name: set.Name, comment: set.Comment}
		for _, e := range set.Entries {
			o.entries = append(o.entries, fwIPSetEntry(e))
		}
		s.live[fwKey(o.kind, o.name)] = o
	}
	for _, a := range cf.AliasObjects {
		s.live[fwKey(manifest.KindAlias, a.Name)] = fwObject{kind: manifest.KindAlias, name: a.Name, comment: a.Comment, cidr: a.CIDR}
	}
}

// declaredFWObject is a declared object in the form the planner compares.
func declaredFWObject(r *manifest.Resource) fwObject {
	o := fwObject{kind: r.Kind, name: r.FirewallObjectName()}
	switch s := r.Spec.(type) {
	case *manifest.SecurityGroupSpec:
		o.comment, o.rules = s.Comment, s.PVERules()
	case *manifest.IPSetSpec:
		o.comment = s.Comment
		o.entries = []fwIPSetEntry{}
		for _, e := range s.Entries {
			o.entries = append(o.entries, fwIPSetEntry(e))
		}
	case *manifest.AliasSpec:
		o.comment, o.cidr = s.Comment, s.CIDR
	}
	return o
}

// NeedsClusterFirewall reports whether a plan of the cluster needs the cluster's firewall objects read: a
// guest declares a firewall, the cluster's own firewall is managed, the repository declares firewall
// objects, or the ownership inventory records some (which a plan may prune).
func NeedsClusterFirewall(c *repo.Cluster, records []ObjectRecord) bool {
	if len(FirewallVMIDs(c)) > 0 || (c != nil && c.Config != nil && c.Config.Firewall.Managed()) {
		return true
	}
	if c != nil && slices.ContainsFunc(c.Resources, func(r *manifest.Resource) bool { return r.Kind.IsFirewallObject() }) {
		return true
	}
	return slices.ContainsFunc(records, func(r ObjectRecord) bool {
		return slices.ContainsFunc(fwKinds, func(k manifest.Kind) bool { return k.ObjectKind() == r.Kind })
	})
}

// fwProvider says who provides a name a rule uses.
type fwProvider int

const (
	fwNobody fwProvider = iota
	fwGit
	fwLive
)

// provider resolves a reference to a cluster object: git's declaration first, then the live cluster; the
// live cluster is unknown (ok false) when it was not observed.
func (d *differ) provider(ref firewall.Ref) (fwProvider, bool) {
	if d.fw.declared[fwKey(refKind(ref.Kind), ref.Name)] != nil {
		return fwGit, true
	}
	cf := d.clusterFirewall()
	if cf == nil {
		return fwNobody, false
	}
	if clusterHas(cf, ref) {
		return fwLive, true
	}
	return fwNobody, true
}

// checkFirewallObjects reports the firewall objects that cannot be planned: declared ones when the
// cluster's objects were not observed (unobserved), and names their rules or entries use that neither git,
// nor PVE, nor the live cluster provide (a name only the live cluster provides is a warning).
func (d *differ) checkFirewallObjects() (diags diag.List, unobserved bool) {
	s := &d.fw
	if len(s.declared) == 0 {
		return nil, false
	}
	if !s.observed {
		for _, k := range slices.SortedFunc(maps.Keys(s.declared), compareObjectKeys) {
			diags = append(diags, diagAt(s.declared[k], "kind", "the cluster's firewall objects were not observed (an executor that does not read them?); no firewall object is planned"))
		}
		return diags.Sorted(), true
	}
	for _, k := range slices.SortedFunc(maps.Keys(s.declared), compareObjectKeys) {
		r := s.declared[k]
		for _, ref := range r.FirewallObjectRefs() {
			diags = d.resolveFirewallRef(diags, r.Ref().String(), ref, diagAt(r, ref.Field, ""))
		}
	}
	return diags.Sorted(), false
}

// resolveFirewallRef checks one name a rule or entry uses, at the place dg points to: a name git declares
// is fine, one only the live cluster provides is a warning on owner, and one nobody provides is an error
// appended to diags.
func (d *differ) resolveFirewallRef(diags diag.List, owner string, ref manifest.FirewallRef, dg diag.Diagnostic) diag.List {
	switch p, _ := d.provider(ref.Ref); p {
	case fwGit:
	case fwLive:
		d.finding(FindingWarning, owner, ClusterScope, 0, ref.Field,
			fmt.Sprintf("%s (%s) is not declared in git; only the live cluster provides it", ref.Ref, location(dg)))
	case fwNobody:
		dg.Message = fmt.Sprintf("%s is neither declared in git (%s/), nor a PVE built-in, nor defined on the cluster", ref.Ref, fwRefRoot(ref.Ref))
		diags = append(diags, dg)
	}
	return diags
}

// fwRefRoot is the folder of the manifests that declare what a reference names.
func fwRefRoot(ref firewall.Ref) string {
	switch ref.Kind {
	case firewall.RefGroup:
		return manifest.KindSecurityGroup.Root()
	case firewall.RefIPSet:
		return manifest.KindIPSet.Root()
	case firewall.RefAlias:
	}
	return manifest.KindAlias.Root()
}

func compareObjectKeys(a, b objectKey) int {
	return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.id, b.id))
}

// fwOpID is the operation id of an action on a firewall object: fw-<kind>-<name>-<verb>.
func fwOpID(kind manifest.Kind, name string, a Action) string {
	return "fw-" + kind.ObjectKind() + "-" + name + "-" + strings.TrimSuffix(string(a), "-firewall-object")
}

// fwLevel orders the firewall objects before the guests (and the pools), what others name first; their
// deletes come after the guests', groups first.
func fwLevel(kind manifest.Kind, prune bool) int {
	i := slices.Index(fwKinds, kind)
	if prune {
		return manifest.MaxPoolLevels + len(fwKinds) - i
	}
	return -manifest.MaxPoolLevels - len(fwKinds) + i
}

// fwOp is an operation on a firewall object of the unit u, after the unit's last one.
func (d *differ) fwOp(u *unit, o fwObject, a Action, params []KV, reason string) *Operation {
	op := Operation{ID: d.opID(fwOpID(o.kind, o.name, a)), Cluster: d.cluster, Node: ClusterScope, Ref: u.ref.String(),
		Action: a, Params: append([]KV{{Key: "kind", Value: o.kind.ObjectKind()}, {Key: "name", Value: o.name}}, params...),
		Reason: reason}
	if len(u.ops) > 0 {
		op.DependsOn = []string{u.last()}
	}
	u.ops = append(u.ops, op)
	return &u.ops[len(u.ops)-1]
}

// contentParams are what a create or configure writes besides the comment: a group's rules, an IP set's
// entries, an alias's address.
func contentParams(o fwObject) []KV {
	switch o.kind {
	case manifest.KindSecurityGroup:
		rules := make([]map[string]string, len(o.rules))
		for i, r := range o.rules {
			rules[i] = r.Fields()
		}
		return []KV{{Key: "rules", Value: mustJSON(rules)}}
	case manifest.KindIPSet:
		return []KV{{Key: "entries", Value: mustJSON(o.entries)}}
	default:
		return []KV{{Key: "cidr", Value: o.cidr}}
	}
}

// contentChanges are the differences of an object's contents, live (nil: absent) against declared, and a
// group's rule changes.
func contentChanges(live *fwObject, want fwObject) ([]Change, []firewall.RuleChange) {
	var out []Change
	if live == nil {
		live = &fwObject{kind: want.kind}
	}
	var rules []firewall.RuleChange
	switch want.kind {
	case manifest.KindSecurityGroup:
		rules = firewall.Compare(live.rules, want.rules)
		for _, c := range rules {
			out = append(out, ruleChangeAt("rules", c))
		}
	case manifest.KindIPSet:
		byCIDR := func(es []fwIPSetEntry) map[string]fwIPSetEntry {
			m := map[string]fwIPSetEntry{}
			for _, e := range es {
				m[e.CIDR] = e
			}
			return m
		}
		l, w := byCIDR(live.entries), byCIDR(want.entries)
		for _, c := range unionNames(l, w) {
			le, inL := l[c]
			we, inW := w[c]
			if inL && inW && le == we {
				continue
			}
			ch := Change{Field: "entries." + c}
			if inL {
				ch.Before = entryText(le)
			}
			if inW {
				ch.After = entryText(we)
			}
			out = append(out, ch)
		}
	default:
		if live.cidr != want.cidr {
			out = append(out, Change{Field: "cidr", Before: live.cidr, After: want.cidr})
		}
	}
	return out, rules
}

func entryText(e fwIPSetEntry) string {
	p := e.CIDR
	if e.NoMatch {
		p = "!" + p
	}
	if e.Comment != "" {
		p += " (" + e.Comment + ")"
	}
	return p
}

// fwSummary says in a few words what changes in an object's contents.
func fwSummary(changes []Change, rules []firewall.RuleChange) string {
	entries := 0
	for _, c := range changes {
		if strings.HasPrefix(c.Field, "entries.") {
			entries++
		}
	}
	var parts []string
	if len(rules) > 0 {
		parts = append(parts, ruleCounts(rules)...)
	}
	if entries > 0 {
		parts = append(parts, fmt.Sprintf("%d entry change(s)", entries))
	}
	if slices.ContainsFunc(changes, func(c Change) bool { return c.Field == "cidr" }) {
		parts = append(parts, "address")
	}
	if slices.ContainsFunc(changes, func(c Change) bool { return c.Field == "comment" }) {
		parts = append(parts, "comment")
	}
	return strings.Join(parts, ", ")
}

// fwPlural names a firewall object kind in a sentence: "security groups".
func fwPlural(kind manifest.Kind) string {
	switch kind {
	case manifest.KindSecurityGroup:
		return "security groups"
	case manifest.KindIPSet:
		return "IP sets"
	default:
		return "aliases"
	}
}

// fwNoun is how a reason names an object: "security group web".
func fwNoun(o fwObject) string {
	switch o.kind {
	case manifest.KindSecurityGroup:
		return "security group " + o.name
	case manifest.KindIPSet:
		return "IP set " + o.name
	default:
		return "alias " + o.name
	}
}

// planFirewallObjects creates the declared firewall objects that are not live, claims the unmarked live
// ones (explicitly: the plan shows the claim) and converges the owned ones, aliases first, then IP sets,
// then groups, each after the objects it names that this plan writes.
func (d *differ) planFirewallObjects() {
	s := &d.fw
	if !s.observed {
		return
	}
	keys := slices.SortedFunc(maps.Keys(s.declared), func(a, b objectKey) int {
		return cmp.Or(cmp.Compare(fwKindIndex(a.kind), fwKindIndex(b.kind)), cmp.Compare(a.id, b.id))
	})
	for _, k := range keys {
		r := s.declared[k]
		want := declaredFWObject(r)
		ref := r.Ref()
		u := &unit{ref: ref, level: fwLevel(r.Kind, false), node: ClusterScope}
		live, found := s.live[k]
		marked := pveformat.MarkComment(want.comment)
		switch {
		case !found:
			content, _ := contentChanges(nil, want)
			changes := append([]Change{{Field: "comment", After: marked}}, content...)
			op := d.fwOp(u, want, ActionCreateFirewallObject, append([]KV{{Key: "comment", Value: want.comment}}, contentParams(want)...),
				fmt.Sprintf("%s: %s not on PVE; will create", ref, fwNoun(want)))
			op.Precondition.ExpectAbsent = true
			op.Changes = changes
			d.recordObject(r, want.name)
		case !pveformat.Marked(live.comment):
			want.name = live.name
			op := d.fwOp(u, want, ActionClaimFirewallObject, nil,
				fmt.Sprintf("%s: claim ownership of %s (add %s to its comment)", ref, fwNoun(want), pveformat.OwnershipMarker))
			op.Precondition.Expect = []KV{{Key: "comment", Value: live.comment}}
			op.Changes = []Change{{Field: "comment", Before: live.comment, After: pveformat.MarkComment(live.comment)}}
			d.recordObject(r, want.name)
			live.comment = pveformat.MarkComment(live.comment)
			d.configureFirewallObject(u, r, live, want)
		default:
			want.name = live.name
			if !d.objs.recorded(r.Kind.ObjectKind(), want.name) {
				// Marked but not recorded (the record was lost): the manifest declares it, so it is recorded.
				d.recordObject(r, want.name)
			}
			d.configureFirewallObject(u, r, live, want)
		}
		if len(u.ops) == 0 {
			continue
		}
		u.ops[0].DependsOn = append(d.fwDeps(r.FirewallObjectRefs()), u.ops[0].DependsOn...)
		s.units[k] = u
		d.addUnit(u)
	}
}

// configureFirewallObject converges an owned (or just claimed) object's comment and contents.
func (d *differ) configureFirewallObject(u *unit, r *manifest.Resource, live, want fwObject) {
	var changes []Change
	if pveformat.CommentText(live.comment) != want.comment {
		changes = append(changes, Change{Field: "comment", Before: live.comment, After: pveformat.MarkComment(want.comment)})
	}
	content, rules := contentChanges(&live, want)
	changes = append(changes, content...)
	if len(changes) == 0 {
		return
	}
	op := d.fwOp(u, want, ActionConfigureFirewallObject, append([]KV{{Key: "comment", Value: want.comment}}, contentParams(want)...),
		fmt.Sprintf("%s: %s drift: %s", r.Ref(), fwNoun(want), fwSummary(changes, rules)))
	op.Changes = changes
	if want.kind == manifest.KindSecurityGroup && live.digest != "" {
		op.Precondition.Expect = []KV{{Key: "rules-digest", Value: live.digest}}
	}
}

// fwDeps are the operations a write that names refs waits for: those of the named objects this plan
// writes.
func (d *differ) fwDeps(refs []manifest.FirewallRef) []string {
	var out []string
	for _, ref := range refs {
		if ref.Ref.Scope == "guest" {
			continue
		}
		if u := d.fw.units[fwKey(refKind(ref.Ref.Kind), ref.Ref.Name)]; u != nil {
			out = append(out, u.last())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// linkGuestFirewalls makes each guest's firewall operation wait for the firewall objects of the cluster
// its rules name that this plan creates or changes: a group is created before the rule that uses it.
func (d *differ) linkGuestFirewalls() {
	for _, u := range d.units {
		for i := range u.ops {
			op := &u.ops[i]
			if op.Action != ActionApplyGuestFirewall {
				continue
			}
			r := d.byRef[u.ref]
			if r == nil || r.Firewall() == nil {
				continue
			}
			deps := d.fwDeps(r.Firewall().ClusterRefs())
			if len(deps) == 0 {
				continue
			}
			op.DependsOn = append(op.DependsOn, deps...)
			slices.Sort(op.DependsOn)
			op.DependsOn = slices.Compact(op.DependsOn)
		}
	}
}

// fwUses lists, by key, who uses each cluster firewall object: the declared guests' rules, the declared
// groups and IP sets, and the managed cluster firewall's rules.
func (d *differ) fwUses() map[objectKey][]string {
	out := map[objectKey][]string{}
	add := func(user string, refs []manifest.FirewallRef) {
		for _, ref := range refs {
			k := fwKey(refKind(ref.Ref.Kind), ref.Ref.Name)
			if !slices.Contains(out[k], user) {
				out[k] = append(out[k], user)
			}
		}
	}
	for _, r := range d.resources {
		if f := r.Firewall(); f != nil {
			add(r.Ref().String(), f.ClusterRefs())
		}
		add(r.Ref().String(), r.FirewallObjectRefs())
	}
	if f := d.clusterFirewallConfig(); f != nil {
		add(d.clusterFirewallRef().String(), manifest.ClusterFirewallRefs("firewall.rules", f.Rules))
	}
	return out
}

// planFirewallObjectPrunes deletes the owned firewall objects no manifest declares (marker and record)
// within the prune budget and under the mass-prune latch (per kind); one a declared rule still names is
// reported and kept, and every other undeclared object is reported and never touched.
func (d *differ) planFirewallObjectPrunes() {
	s := &d.fw
	if !s.observed {
		return
	}
	uses := d.fwUses()
	deletes := map[manifest.Kind][]string{}
	for _, kind := range slices.Backward(fwKinds) {
		owned := 0
		var plannable []objectKey
		for _, k := range slices.SortedFunc(maps.Keys(s.live), compareObjectKeys) {
			o := s.live[k]
			if o.kind != kind {
				continue
			}
			marked, recorded := pveformat.Marked(o.comment), d.objs.recorded(k.kind, o.name)
			if marked && recorded {
				owned++
			}
			if s.declared[k] != nil {
				continue
			}
			ref := d.objs.recordRef(kind, o.name)
			switch {
			case !d.ownedUndeclared(ref, fwNoun(o), marked, recorded):
			case len(uses[k]) > 0:
				d.finding(FindingAnomaly, ref, ClusterScope, 0, "",
					fmt.Sprintf("%s is absent in git but %s still use(s) it; not deleted", fwNoun(o), strings.Join(uses[k], ", ")))
			default:
				plannable = append(plannable, k)
			}
		}
		prunes := make([]objectPrune, len(plannable))
		for i, k := range plannable {
			prunes[i] = objectPrune{ref: d.objs.recordRef(kind, s.live[k].name), what: fwNoun(s.live[k])}
		}
		d.pruneOwned(fwPlural(kind), owned, prunes, func(i int) {
			o, ref := s.live[plannable[i]], prunes[i].ref
			u := &unit{ref: refOf(ref), level: fwLevel(kind, true), node: ClusterScope, prune: true}
			op := d.fwOp(u, o, ActionDeleteFirewallObject, nil, fmt.Sprintf("%s: %s present on PVE (%s) but absent in git", ref, fwNoun(o), pveformat.OwnershipMarker))
			op.Ref = ref
			op.Precondition.Expect = []KV{{Key: "comment", Value: o.comment}}
			if o.kind == manifest.KindSecurityGroup && o.digest != "" {
				op.Precondition.Expect = append(op.Precondition.Expect, KV{Key: "rules-digest", Value: o.digest})
			}
			op.Changes = []Change{{Field: "comment", Before: o.comment}}
			// What may name the object goes first: an alias after the IP sets and groups, an IP set after the groups.
			for _, earlier := range fwKinds[slices.Index(fwKinds, kind)+1:] {
				op.DependsOn = append(op.DependsOn, deletes[earlier]...)
			}
			slices.Sort(op.DependsOn)
			deletes[kind] = append(deletes[kind], op.ID)
			d.addUnit(u)
		})
	}
}

// hashFirewallObjects writes what the plan's firewall objects are computed from into its content id.
func (d *differ) hashFirewallObjects(w func(...string)) {
	d.hashClusterFirewall(w)
	s := &d.fw
	if len(s.live) == 0 && len(s.declared) == 0 {
		return
	}
	w("firewall-objects", strconv.FormatBool(s.observed))
	for _, k := range slices.SortedFunc(maps.Keys(s.live), compareObjectKeys) {
		o := s.live[k]
		w("fw", k.kind, o.name, o.comment, o.digest, o.cidr)
		for _, r := range o.rules {
			w(r.String())
		}
		for _, e := range o.entries {
			w(entryText(e))
		}
	}
}

// fwObjectOf names the firewall object an operation writes to.
func fwObjectOf(op Operation) (kind, id string, ok bool) {
	kind, _ = op.Param("kind")
	id, _ = op.Param("name")
	return kind, id, kind != "" && id != ""
}
