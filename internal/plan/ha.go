package plan

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
)

// High availability: a guest's spec.ha is its HA resource (vm:<vmid>, ct:<vmid>), an HARule manifest a PVE 9
// HA rule. Both are cluster objects with the ownership model of objects.go (the comment marker and the
// ownership record, kinds haresource and harule); an HA resource's record names the guest's manifest. While HA
// manages a guest (every requested state but ignored), its run state is the resource's: the plan changes it
// through the resource, never with a start or stop of its own, and the executor waits for HA to act.

// haState is the differ's state of the cluster's HA stack.
type haState struct {
	// live is what the HA stack holds, nil when it was not observed.
	live *inventory.HA
	// major is the PVE release's major version (0: unknown).
	major int
	// guests are the guests that declare spec.ha, by sid.
	guests map[string]*manifest.Resource
	// rules are the declared HA rules by id, and the sids of each rule's guests.
	rules map[string]*manifest.Resource
	sids  map[string][]string
	// resourceOps is, by sid, the last operation of this plan on the HA resource: what a rule naming it waits
	// for.
	resourceOps map[string]string
}

func (d *differ) initHA() {
	h := &d.ha
	h.live = d.in.Observed.HA()
	for _, n := range d.in.Observed.Nodes {
		major, _, _ := strings.Cut(n.PVEVersion, ".")
		if v, err := strconv.Atoi(major); err == nil && v > 0 {
			h.major = v
			break
		}
	}
	h.guests, h.rules, h.sids, h.resourceOps = map[string]*manifest.Resource{}, map[string]*manifest.Resource{}, map[string][]string{}, map[string]string{}
	for _, r := range d.resources {
		if r.Kind.IsGuest() && r.GuestHA() != nil {
			h.guests[manifest.HASID(r.Kind, r.VMID())] = r
		}
	}
	for _, r := range d.resources {
		s := r.HARule()
		if s == nil {
			continue
		}
		h.rules[s.ID] = r
		var sids []string
		for _, entry := range s.Resources {
			if g, _ := manifest.FindHAGuest(entry, d.resources); g != nil {
				sids = append(sids, manifest.HASID(g.Kind, g.VMID()))
			}
		}
		slices.Sort(sids)
		h.sids[s.ID] = slices.Compact(sids)
	}
}

// liveResource is the observed HA resource of a sid.
func (h *haState) liveResource(sid string) (inventory.HAResource, bool) { return h.live.Resource(sid) }

// checkHA reports, positioned, what the repository declares about HA that the live cluster contradicts: HA
// that was not observed (nothing that uses it is planned), rules on a PVE 8 cluster, failback before PVE 9,
// and a guest that its rules would place elsewhere than spec.node.
func (d *differ) checkHA() (diags diag.List, observeFailed bool) {
	h := &d.ha
	if len(h.guests) == 0 && len(h.rules) == 0 {
		return nil, false
	}
	if h.live == nil {
		for _, r := range d.resources {
			switch {
			case r.HARule() != nil:
				diags = append(diags, diagAt(r, "kind", "the cluster's HA resources and rules were not observed (an executor that does not read them?); nothing that uses HA is planned"))
			case r.Kind.IsGuest() && r.GuestHA() != nil:
				diags = append(diags, diagAt(r, "spec.ha", "the cluster's HA resources and rules were not observed (an executor that does not read them?); nothing that uses HA is planned"))
			}
		}
		return diags.Sorted(), true
	}
	release := "an older release"
	if h.major > 0 {
		release = "PVE " + strconv.Itoa(h.major)
	}
	for _, id := range slices.Sorted(maps.Keys(h.rules)) {
		if !h.live.RulesRead {
			diags = append(diags, diagAt(h.rules[id], "kind", "HA rules need PVE 9: the cluster runs %s, which has HA groups instead (ProxOps does not manage HA groups); remove the rule or upgrade the cluster", release))
		}
	}
	for _, sid := range slices.Sorted(maps.Keys(h.guests)) {
		r := h.guests[sid]
		if r.GuestHA().Failback != nil && h.major > 0 && h.major < 9 {
			diags = append(diags, diagAt(r, "spec.ha.failback", "the cluster runs %s, whose HA resources have no failback (PVE 9 has it; PVE 8 sets it on HA groups); remove it", release))
		}
	}
	diags = append(diags, d.checkHAPlacement()...)
	return diags.Sorted(), false
}

// haRuleView is one HA rule as the placement check reads it, declared or live.
type haRuleView struct {
	id, typ, affinity string
	sids, nodes       []string
	strict, disable   bool
	declared          bool
}

// haRulesInForce are the rules that hold after this plan: the declared ones, and the live ones no manifest
// declares and ProxOps does not delete (those it does not own).
func (d *differ) haRulesInForce() []haRuleView {
	h := &d.ha
	var out []haRuleView
	for _, id := range slices.Sorted(maps.Keys(h.rules)) {
		s := h.rules[id].HARule()
		var nodes []string
		for _, n := range s.Nodes {
			e := n.Node
			if n.Priority != nil {
				e += ":" + strconv.Itoa(*n.Priority)
			}
			nodes = append(nodes, e)
		}
		out = append(out, haRuleView{id: id, typ: s.Type, affinity: s.Affinity, sids: h.sids[id], nodes: nodes,
			strict: s.Strict, disable: s.Disable, declared: true})
	}
	if h.live != nil {
		for _, r := range h.live.Rules {
			if h.rules[r.ID] != nil || (pveformat.Marked(r.Comment) && d.objs.recorded(manifest.KindHARule.ObjectKind(), r.ID)) {
				continue
			}
			out = append(out, haRuleView{id: r.ID, typ: r.Type, affinity: r.Affinity, sids: r.Resources, nodes: r.Nodes,
				strict: r.Strict, disable: r.Disable})
		}
	}
	return out
}

// haPreferred is where a node-affinity rule lets HA run its resources: the highest-priority nodes among the
// available ones (no priority is 0). binding says a resource must be on one of them: always for a strict
// rule, and for a non-strict one while any of its nodes is available (otherwise HA may use any node).
func haPreferred(entries []string, available func(string) bool, strict bool) (nodes []string, binding bool) {
	best := -1
	for _, e := range entries {
		name, pri, _ := strings.Cut(e, ":")
		p, err := strconv.Atoi(pri)
		if err != nil {
			p = 0
		}
		if !available(name) {
			continue
		}
		switch {
		case p > best:
			best, nodes = p, []string{name}
		case p == best:
			nodes = append(nodes, name)
		}
	}
	slices.Sort(nodes)
	return slices.Compact(nodes), strict || len(nodes) > 0
}

// available reports whether a node is one of the cluster's observed nodes.
func (d *differ) available(node string) bool { return d.node(node) != nil }

// checkHAPlacement reports the HA-managed guests that the rules in force would place elsewhere than their
// spec.node: a node-affinity rule whose preferred nodes leave it out, a positive resource-affinity rule with a
// guest declared on another node, a negative one with a guest declared on the same node.
func (d *differ) checkHAPlacement() diag.List {
	h := &d.ha
	var diags diag.List
	rules := d.haRulesInForce()
	for _, sid := range slices.Sorted(maps.Keys(h.guests)) {
		r := h.guests[sid]
		if !r.GuestHA().Manages() {
			continue
		}
		node := r.Node()
		for _, rule := range rules {
			if rule.disable || !slices.Contains(rule.sids, sid) {
				continue
			}
			origin := "live HA rule " + rule.id
			if rule.declared {
				origin = "HA rule " + rule.id + " (" + h.rules[rule.id].Source.File + ")"
			}
			switch rule.typ {
			case manifest.HARuleNodeAffinity:
				nodes, binding := haPreferred(rule.nodes, d.available, rule.strict)
				kind := "node-affinity"
				if rule.strict {
					kind = "strict node-affinity"
				}
				if binding && !slices.Contains(nodes, node) {
					diags = append(diags, diagAt(r, "spec.node", "conflicts with %s (%s): HA places the guest on [%s], not on %s; change spec.node or the rule",
						origin, kind, strings.Join(nodes, " "), node))
				}
			case manifest.HARuleResourceAffinity:
				for _, other := range rule.sids {
					og := h.guests[other]
					if other == sid || og == nil {
						continue
					}
					switch {
					case rule.affinity == manifest.AffinityPositive && og.Node() != node:
						diags = append(diags, diagAt(r, "spec.node", "conflicts with %s (positive resource-affinity): HA keeps the guest with %s, declared on %s, not on %s",
							origin, og.Ref(), og.Node(), node))
					case rule.affinity == manifest.AffinityNegative && og.Node() == node:
						diags = append(diags, diagAt(r, "spec.node", "conflicts with %s (negative resource-affinity): HA keeps the guest apart from %s, declared on the same node %s",
							origin, og.Ref(), node))
					}
				}
			}
		}
	}
	return diags
}

// haResourceWant is what a guest's spec.ha asks of its HA resource, in PVE's option names.
func haResourceWant(h *manifest.GuestHA) []KV {
	out := []KV{{Key: "state", Value: h.HAState()}}
	if h.MaxRestart != nil {
		out = append(out, KV{Key: "max_restart", Value: strconv.Itoa(*h.MaxRestart)})
	}
	if h.MaxRelocate != nil {
		out = append(out, KV{Key: "max_relocate", Value: strconv.Itoa(*h.MaxRelocate)})
	}
	if h.Failback != nil {
		out = append(out, KV{Key: "failback", Value: boolFlag(*h.Failback)})
	}
	return out
}

func boolFlag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// haResourceLive is a live HA resource's options as haResourceWant names them.
func haResourceLive(r inventory.HAResource) map[string]string {
	return map[string]string{"state": r.State, "max_restart": strconv.Itoa(r.MaxRestart), "max_relocate": strconv.Itoa(r.MaxRelocate),
		"failback": boolFlag(r.Failback)}
}

// haAdder appends an operation on a guest's HA resource to the guest's unit.
type haAdder func(op Operation) *Operation

// planHAResource makes a guest's HA resource what its spec.ha says: create it, claim an unmarked one
// (explicitly), converge an owned one; node is the guest's node (the executor checks the guest's ownership
// there, and waits there for HA to act).
func (d *differ) planHAResource(r *manifest.Resource, node string, add haAdder) {
	h := r.GuestHA()
	if h == nil || d.ha.live == nil {
		return
	}
	ref, vmid, t := r.Ref(), r.VMID(), guestType(r.Kind)
	sid := manifest.HASID(r.Kind, vmid)
	kind := manifest.ObjectKindHAResource
	want := haResourceWant(h)
	record := func() {
		d.objs.write = append(d.objs.write, ObjectRecord{Kind: kind, ID: sid, Ref: ref.String()})
	}
	base := []KV{{Key: "sid", Value: sid}, {Key: "node", Value: node}}
	live, found := d.ha.liveResource(sid)
	if !found {
		var changes []Change
		for _, kv := range want {
			changes = append(changes, Change{Field: kv.Key, After: kv.Value})
		}
		changes = append(changes, Change{Field: "comment", After: pveformat.MarkComment(h.Comment)})
		op := add(Operation{ID: d.opID(guestOpID(t, vmid, ActionCreateHAResource, "")), Action: ActionCreateHAResource,
			Params: append(append(base, want...), KV{Key: "comment", Value: h.Comment}),
			Reason: fmt.Sprintf("%s: HA resource %s not on PVE; will create (HA %s)", ref, sid, haActs(h.HAState())), Changes: changes})
		op.Precondition.ExpectAbsent = true
		d.ha.resourceOps[sid] = op.ID
		record()
		return
	}
	comment := live.Comment
	if !pveformat.Marked(comment) {
		op := add(Operation{ID: d.opID(guestOpID(t, vmid, ActionClaimClusterObject, "ha")), Action: ActionClaimClusterObject,
			Params:  []KV{{Key: "object", Value: "ha-resource"}, {Key: "sid", Value: sid}},
			Reason:  fmt.Sprintf("%s: claim ownership of HA resource %s (add %s to its comment)", ref, sid, pveformat.OwnershipMarker),
			Changes: []Change{{Field: "comment", Before: comment, After: pveformat.MarkComment(comment)}}})
		op.Precondition.Expect = []KV{{Key: "comment", Value: comment}}
		d.ha.resourceOps[sid] = op.ID
		record()
		comment = pveformat.MarkComment(comment)
	} else if !d.objs.recorded(kind, sid) {
		// Marked but not recorded (the record was lost): the manifest declares it, so it is recorded.
		record()
	}
	have := haResourceLive(live)
	var params []KV
	var changes []Change
	for _, kv := range want {
		if have[kv.Key] != kv.Value {
			params = append(params, kv)
			changes = append(changes, Change{Field: kv.Key, Before: have[kv.Key], After: kv.Value})
		}
	}
	if pveformat.CommentText(comment) != h.Comment {
		changes = append(changes, Change{Field: "comment", Before: comment, After: pveformat.MarkComment(h.Comment)})
	}
	if len(changes) == 0 {
		return
	}
	reason := fmt.Sprintf("%s: HA resource %s drift", ref, sid)
	if slices.ContainsFunc(params, func(kv KV) bool { return kv.Key == "state" }) {
		reason = fmt.Sprintf("%s: HA resource %s drift (HA %s)", ref, sid, haActs(h.HAState()))
	}
	op := add(Operation{ID: d.opID(guestOpID(t, vmid, ActionConfigureHAResource, "")), Action: ActionConfigureHAResource,
		Params: append(append(base, params...), KV{Key: "comment", Value: h.Comment}), Reason: reason, Changes: changes})
	op.Precondition.Expect = []KV{{Key: "comment", Value: comment}}
	d.ha.resourceOps[sid] = op.ID
}

// haActs says what HA does to the guest for a requested state.
func haActs(state string) string {
	switch state {
	case manifest.HAStarted:
		return "starts the guest"
	case manifest.HAStopped, manifest.HADisabled:
		return "stops the guest"
	default:
		return "leaves the guest alone"
	}
}

// planGuestHA is the update step of an existing guest's HA resource, after its other writes.
func (d *differ) planGuestHA(s *guestUpdate) error {
	node := s.g.Node
	if s.moveTo != "" {
		// The executor finds the guest where this plan moves it.
		node = s.moveTo
	}
	changesState := false
	d.planHAResource(s.r, node, func(op Operation) *Operation {
		o := d.add(s, op)
		o.Node = ClusterScope
		changesState = changesState || op.Action == ActionCreateHAResource || slices.ContainsFunc(op.Params, func(kv KV) bool { return kv.Key == "state" })
		return o
	})
	h := s.r.GuestHA()
	if h == nil || !h.Manages() || changesState || s.g.Template {
		return nil
	}
	// HA was asked for this run state already and has not reached it: it failed (its error state, restarts
	// used up) or is about to act. ProxOps does not start or stop the guest behind HA's back.
	want := h.RunState()
	if running := s.g.Running(); (want == manifest.StateStarted) != running {
		is := "stopped"
		if running {
			is = "running"
		}
		d.finding(FindingAnomaly, s.ref.String(), s.g.Node, s.g.VMID, "spec.ha.state",
			fmt.Sprintf("HA resource %s asks HA for %s, but the guest is %s: HA has not acted yet or failed (see ha-manager status); ProxOps does not start or stop a guest HA manages",
				manifest.HASID(s.r.Kind, s.g.VMID), h.HAState(), is))
	}
	return nil
}

// haRunsIt reports whether HA keeps the guest's run state after this plan: its manifest declares spec.ha in a
// state HA acts on.
func haRunsIt(r *manifest.Resource) bool { return r.GuestHA().Manages() }

// planCreatedGuestHA makes each guest this plan creates an HA resource after its creation: HA, not a start of
// the plan's own, then starts it (or keeps it stopped).
func (d *differ) planCreatedGuestHA() {
	for _, r := range d.resources {
		u := d.unitOf[r.Ref()]
		if !r.Kind.IsGuest() || r.GuestHA() == nil || u == nil || len(u.ops) == 0 {
			continue
		}
		if a := u.ops[0].Action; a != ActionCreate && a != ActionClone {
			continue
		}
		if haRunsIt(r) {
			dropStarts(u)
		}
		ref, vmid, t := r.Ref(), r.VMID(), guestType(r.Kind)
		d.planHAResource(r, r.Node(), func(op Operation) *Operation {
			op.Cluster, op.Node, op.VMID, op.GuestType, op.Ref = d.cluster, ClusterScope, vmid, t, ref.String()
			op.DependsOn = []string{u.last()}
			u.ops = append(u.ops, op)
			return &u.ops[len(u.ops)-1]
		})
	}
}

// dropStarts removes a created guest's start operations from its unit (HA starts it); what depended on a
// start depends on what the start depended on.
func dropStarts(u *unit) {
	removed := map[string][]string{}
	var kept []Operation
	for _, op := range u.ops {
		if op.Action == ActionStart {
			removed[op.ID] = op.DependsOn
			continue
		}
		kept = append(kept, op)
	}
	for i := range kept {
		var deps []string
		for _, dep := range kept[i].DependsOn {
			if up, ok := removed[dep]; ok {
				deps = append(deps, up...)
			} else {
				deps = append(deps, dep)
			}
		}
		kept[i].DependsOn = deps
	}
	u.ops = kept
}

// haRuleWant is what an HARule asks of its PVE rule, in PVE's option names (resources and nodes
// comma-separated, booleans as 0 and 1), in a fixed order.
func haRuleWant(s *manifest.HARuleSpec, sids []string) []KV {
	out := []KV{{Key: "resources", Value: strings.Join(sids, ",")}}
	switch s.Type {
	case manifest.HARuleNodeAffinity:
		out = append(out, KV{Key: "nodes", Value: s.NodeList()}, KV{Key: "strict", Value: boolFlag(s.Strict)})
	case manifest.HARuleResourceAffinity:
		out = append(out, KV{Key: "affinity", Value: s.Affinity})
	}
	return append(out, KV{Key: "disable", Value: boolFlag(s.Disable)})
}

// haRuleLive is a live rule's options as haRuleWant names them; resources and nodes sorted, as the
// comparison takes them.
func haRuleLive(r inventory.HARule) map[string]string {
	return map[string]string{"resources": strings.Join(slices.Sorted(slices.Values(r.Resources)), ","),
		"nodes": strings.Join(slices.Sorted(slices.Values(r.Nodes)), ","), "strict": boolFlag(r.Strict),
		"affinity": r.Affinity, "disable": boolFlag(r.Disable)}
}

// sortedList sorts a comma-separated list.
func sortedList(v string) string {
	if v == "" {
		return ""
	}
	return strings.Join(slices.Sorted(slices.Values(strings.Split(v, ","))), ",")
}

// haRuleOpID is the operation id of an action on an HA rule: harule-<id>-<verb>.
func haRuleOpID(id, verb string) string { return "harule-" + id + "-" + verb }

// haRuleOp is an operation on an HA rule of the unit u, after the unit's last one.
func (d *differ) haRuleOp(u *unit, id, verb string, a Action, params []KV, reason string) *Operation {
	return d.objectOp(u, haRuleOpID(id, verb), "rule", id, a, params, reason)
}

// planHARules creates the declared HA rules that are not live, claims the unmarked live ones (explicitly),
// and converges the owned ones, each after the writes of this plan to the HA resources it names.
func (d *differ) planHARules() {
	h := &d.ha
	if h.live == nil || !h.live.RulesRead {
		return
	}
	kind := manifest.KindHARule.ObjectKind()
	for _, id := range slices.Sorted(maps.Keys(h.rules)) {
		r := h.rules[id]
		s := r.HARule()
		ref := r.Ref()
		u := &unit{ref: ref, level: d.level(ref) + 1, node: ClusterScope}
		want := haRuleWant(s, h.sids[id])
		var live *inventory.HARule
		for i := range h.live.Rules {
			if h.live.Rules[i].ID == id {
				live = &h.live.Rules[i]
			}
		}
		record := func() { d.objs.write = append(d.objs.write, ObjectRecord{Kind: kind, ID: id, Ref: ref.String()}) }
		if live == nil {
			var params []KV
			var changes []Change
			for _, kv := range want {
				if kv.Value != "0" && kv.Value != "" {
					params = append(params, kv)
					changes = append(changes, Change{Field: kv.Key, After: kv.Value})
				}
			}
			changes = append(changes, Change{Field: "comment", After: pveformat.MarkComment(s.Comment)})
			op := d.haRuleOp(u, id, "create", ActionCreateHARule, append(append([]KV{{Key: "type", Value: s.Type}}, params...), KV{Key: "comment", Value: s.Comment}),
				fmt.Sprintf("%s: HA rule %s not on PVE; will create", ref, id))
			op.Precondition.ExpectAbsent = true
			op.Changes = changes
			record()
		} else {
			if live.Type != s.Type {
				d.finding(FindingAnomaly, ref.String(), ClusterScope, 0, "spec.type",
					fmt.Sprintf("HA rule %s is a %s rule on PVE, the manifest declares a %s rule; PVE does not change a rule's type: delete the rule by hand or give the manifest another id", id, live.Type, s.Type))
				continue
			}
			comment := live.Comment
			if !pveformat.Marked(comment) {
				op := d.haRuleOp(u, id, "claim", ActionClaimClusterObject, []KV{{Key: "object", Value: "ha-rule"}},
					fmt.Sprintf("%s: claim ownership of HA rule %s (add %s to its comment)", ref, id, pveformat.OwnershipMarker))
				op.Precondition.Expect = []KV{{Key: "comment", Value: comment}}
				op.Changes = []Change{{Field: "comment", Before: comment, After: pveformat.MarkComment(comment)}}
				record()
				comment = pveformat.MarkComment(comment)
			} else if !d.objs.recorded(kind, id) {
				record()
			}
			have := haRuleLive(*live)
			var params []KV
			var changes []Change
			for _, kv := range want {
				cur := have[kv.Key]
				if sortedList(kv.Value) != cur {
					params = append(params, kv)
					changes = append(changes, Change{Field: kv.Key, Before: cur, After: kv.Value})
				}
			}
			if pveformat.CommentText(comment) != s.Comment {
				changes = append(changes, Change{Field: "comment", Before: comment, After: pveformat.MarkComment(s.Comment)})
			}
			if len(changes) > 0 {
				op := d.haRuleOp(u, id, "configure", ActionConfigureHARule, append(append([]KV{{Key: "type", Value: s.Type}}, params...), KV{Key: "comment", Value: s.Comment}),
					fmt.Sprintf("%s: HA rule %s drift", ref, id))
				op.Precondition.Expect = []KV{{Key: "comment", Value: comment}}
				op.Changes = changes
			}
		}
		if len(u.ops) == 0 {
			continue
		}
		var deps []string
		for _, sid := range h.sids[id] {
			if dep := h.resourceOps[sid]; dep != "" {
				deps = append(deps, dep)
			}
		}
		slices.Sort(deps)
		u.ops[0].DependsOn = append(slices.Compact(deps), u.ops[0].DependsOn...)
		d.addUnit(u)
	}
}

// haPruneCandidate is an owned HA object no manifest declares.
type haPruneCandidate struct {
	kind    string
	id, ref string
	comment string
}

// planHAPrunes deletes the owned HA rules and HA resources no manifest declares (marker and record), rules
// first, within the prune budget and under the mass-prune latch; every other undeclared one is reported and
// never touched. The HA resource of a guest this plan deletes goes with the guest.
func (d *differ) planHAPrunes() {
	h := &d.ha
	if h.live == nil {
		return
	}
	pruning := map[int]bool{}
	for _, u := range d.units {
		if u.prune && u.vmid > 0 {
			pruning[u.vmid] = true
		}
	}
	ruleKind, resKind := manifest.KindHARule.ObjectKind(), manifest.ObjectKindHAResource
	var cands []haPruneCandidate
	owned := 0
	consider := func(kind, id, noun, comment string, declared bool, ref string) {
		marked, recorded := pveformat.Marked(comment), d.objs.recorded(kind, id)
		if marked && recorded {
			owned++
		}
		if !declared && d.ownedUndeclared(ref, noun+" "+id, marked, recorded) {
			cands = append(cands, haPruneCandidate{kind: kind, id: id, ref: ref, comment: comment})
		}
	}
	if h.live.RulesRead {
		for _, r := range h.live.Rules {
			consider(ruleKind, r.ID, "HA rule", r.Comment, h.rules[r.ID] != nil, d.haRecordRef(ruleKind, r.ID, "HARule/"+r.ID))
		}
	}
	for _, r := range h.live.Resources {
		_, id, _ := strings.Cut(r.SID, ":")
		vmid, _ := strconv.Atoi(id)
		if pruning[vmid] {
			continue
		}
		// The resource is named by its sid: the guest's manifest, which may still exist, no longer declares it.
		consider(resKind, r.SID, "HA resource", r.Comment, h.guests[r.SID] != nil, "HAResource/"+r.SID)
	}
	noun := func(c haPruneCandidate) string {
		if c.kind == resKind {
			return "HA resource"
		}
		return "HA rule"
	}
	prunes := make([]objectPrune, len(cands))
	for i, c := range cands {
		prunes[i] = objectPrune{ref: c.ref, what: noun(c) + " " + c.id}
	}
	var ruleDeletes []string
	d.pruneOwned("HA objects", owned, prunes, func(i int) {
		c := cands[i]
		u := &unit{ref: refOf(c.ref), level: 1, node: ClusterScope, prune: true}
		reason := fmt.Sprintf("%s: %s present on PVE (%s) but absent in git", c.ref, prunes[i].what, pveformat.OwnershipMarker)
		var op Operation
		if c.kind == ruleKind {
			op = Operation{ID: d.opID(haRuleOpID(c.id, "delete")), Action: ActionDeleteHARule, Params: []KV{{Key: "rule", Value: c.id}}}
			ruleDeletes = append(ruleDeletes, op.ID)
		} else {
			_, id, _ := strings.Cut(c.id, ":")
			vmid, _ := strconv.Atoi(id)
			t := inventory.QEMU
			if strings.HasPrefix(c.id, "ct:") {
				t = inventory.LXC
			}
			u.level = 2
			op = Operation{ID: d.opID(guestOpID(t, vmid, ActionDeleteHAResource, "")), Action: ActionDeleteHAResource,
				Params: []KV{{Key: "sid", Value: c.id}}, DependsOn: slices.Clone(ruleDeletes)}
		}
		op.Cluster, op.Node, op.Ref, op.Reason = d.cluster, ClusterScope, c.ref, reason
		op.Precondition.Expect = []KV{{Key: "comment", Value: c.comment}}
		u.ops = []Operation{op}
		d.addUnit(u)
	})
}

// haRecordRef is the Kind/name an HA object was recorded as, else fallback.
func (d *differ) haRecordRef(kind, id, fallback string) string {
	if r, ok := d.objs.records[objectKey{kind, id}]; ok && r.Ref != "" {
		return r.Ref
	}
	return fallback
}

// hashHA writes what the plan's HA objects are computed from into its content id.
func (d *differ) hashHA(w func(...string)) {
	h := d.ha.live
	if h == nil {
		return
	}
	w("ha", strconv.FormatBool(h.RulesRead), strconv.Itoa(d.ha.major))
	for _, r := range h.Resources {
		w("ha-resource", r.SID, r.State, r.Comment, strconv.Itoa(r.MaxRestart), strconv.Itoa(r.MaxRelocate), strconv.FormatBool(r.Failback), r.Group)
	}
	rules := slices.Clone(h.Rules)
	slices.SortFunc(rules, func(a, b inventory.HARule) int { return cmp.Compare(a.ID, b.ID) })
	for _, r := range rules {
		w("ha-rule", r.ID, r.Type, strings.Join(r.Resources, ","), strings.Join(r.Nodes, ","), strconv.FormatBool(r.Strict), r.Affinity,
			strconv.FormatBool(r.Disable), r.Comment)
	}
}
