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
	"github.com/proxops/proxops/internal/repo"
)

// Cluster objects are what belongs to no node and cannot carry the guests' ownership tag: resource pools
// now, and every later kind of the same nature. They share one ownership model, keyed by kind and id:
//
//   - ProxOps owns an object only when its comment carries the ownership marker (pveformat.OwnershipMarker)
//     AND the ownership inventory holds an ObjectRecord of its kind and id. The executor checks both again on
//     the object it reads right before each write.
//   - The planner asks for the record of every object it creates, claims or finds marked and declared
//     (Plan.ObjectRecords); the planner service writes them before the plan's first operation is dispatched
//     and removes a record once its object's delete succeeded (ObjectOf names the object of an operation).
//   - An unmarked live object that a manifest declares (the same id) is claimed only through an explicit,
//     shown claim operation that adds the marker while the comment is still the one the plan observed.
//   - An owned object no manifest declares is deleted, within the prune budget and under the mass-prune
//     latch, as guests are; any other undeclared object is reported and never touched.
//   - Their operations run on the cluster's work queue (Node is ClusterScope).

// ObjectRecord is one cluster object of the ownership inventory (KV proxops_owned, key
// <cluster>.obj.<kind>.<id>).
type ObjectRecord struct {
	// Kind is the ownership inventory's kind of the object (manifest.Kind.ObjectKind: pool).
	Kind string
	// ID is PVE's id of the object.
	ID string
	// Ref is the Kind/name the object is declared as.
	Ref string
}

// CompareObjectRecords orders records by kind, then id.
func CompareObjectRecords(a, b ObjectRecord) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID), cmp.Compare(a.Ref, b.Ref))
}

// ObjectOf names the cluster object an operation writes to (its ownership inventory kind and id), for the
// actions on cluster objects other than a guest's membership.
func ObjectOf(op Operation) (kind, id string, ok bool) {
	switch op.Action {
	case ActionCreatePool, ActionConfigurePool, ActionClaimPool, ActionDeletePool:
		id, _ := op.Param("poolid")
		return manifest.KindPool.ObjectKind(), id, id != ""
	case ActionCreateBackupJob, ActionConfigureBackupJob, ActionDeleteBackupJob:
		id, _ := op.Param("id")
		return manifest.KindBackupJob.ObjectKind(), id, id != ""
	case ActionCreateHAResource, ActionConfigureHAResource, ActionDeleteHAResource:
		id, _ := op.Param("sid")
		return manifest.ObjectKindHAResource, id, id != ""
	case ActionCreateHARule, ActionConfigureHARule, ActionDeleteHARule:
		id, _ := op.Param("rule")
		return manifest.KindHARule.ObjectKind(), id, id != ""
	case ActionClaimClusterObject:
		switch obj, _ := op.Param("object"); obj {
		case backupObject:
			id, _ := op.Param("id")
			return manifest.KindBackupJob.ObjectKind(), id, id != ""
		case "ha-resource":
			id, _ := op.Param("sid")
			return manifest.ObjectKindHAResource, id, id != ""
		case "ha-rule":
			id, _ := op.Param("rule")
			return manifest.KindHARule.ObjectKind(), id, id != ""
		}
		return "", "", false
	case ActionCreateFirewallObject, ActionConfigureFirewallObject, ActionClaimFirewallObject, ActionDeleteFirewallObject:
		return fwObjectOf(op)
	default:
		// A guest's or an artifact's action, and a pool's membership (which writes to the guest's pool,
		// named by the operation's guest), name no cluster object of their own.
		return "", "", false
	}
}

// objectKey is a cluster object's kind and id.
type objectKey struct{ kind, id string }

// objects is the differ's state of the cluster objects.
type objects struct {
	observed bool
	pools    map[string]inventory.Pool
	// memberOf is the pool each live guest is in.
	memberOf map[int]string
	records  map[objectKey]ObjectRecord
	// declared maps a pool id to its resolved manifest.
	declared map[string]*manifest.Resource
	// units are the units of the pools this plan creates, claims or configures, by id.
	units map[string]*unit
	// ownedAfter says a pool is ProxOps' once this plan's pool operations ran.
	ownedAfter map[string]bool
	// leaving are the vmids this plan moves out of their live pool or deletes.
	leaving map[int]bool
	// pruned counts the deletions of this plan, guests and objects alike (the prune budget).
	pruned int
	write  []ObjectRecord

	// jobsObserved says the backup jobs were read; jobs are the live ones and declaredJobs the resolved
	// manifests, by id.
	jobsObserved bool
	jobs         map[string]inventory.BackupJob
	declaredJobs map[string]*manifest.Resource
}

func (d *differ) initObjects() {
	o := &d.objs
	o.pools, o.memberOf = map[string]inventory.Pool{}, map[int]string{}
	o.records, o.declared = map[objectKey]ObjectRecord{}, map[string]*manifest.Resource{}
	o.units, o.ownedAfter, o.leaving = map[string]*unit{}, map[string]bool{}, map[int]bool{}
	pools, ok := d.in.Observed.Pools()
	o.observed = ok
	for _, p := range pools {
		p.Members = slices.Sorted(slices.Values(p.Members))
		o.pools[p.ID] = p
		for _, vmid := range p.Members {
			if _, dup := o.memberOf[vmid]; !dup {
				o.memberOf[vmid] = p.ID
			}
		}
	}
	for _, r := range d.in.OwnedObjects {
		k := objectKey{r.Kind, r.ID}
		if prev, dup := o.records[k]; !dup || CompareObjectRecords(r, prev) < 0 {
			o.records[k] = r
		}
	}
	for _, r := range d.resources {
		if p := r.Pool(); p != nil {
			o.declared[p.ID] = r
		}
	}
	o.initBackupJobs(d.in.Observed, d.resources)
}

func (o *objects) recorded(kind, id string) bool {
	_, ok := o.records[objectKey{kind, id}]
	return ok
}

// ownedNow reports whether a live pool is ProxOps' as observed: marked and recorded.
func (o *objects) ownedNow(id string) bool {
	p, ok := o.pools[id]
	return ok && pveformat.Marked(p.Comment) && o.recorded(manifest.KindPool.ObjectKind(), id)
}

// checkObjects reports, positioned, what the repository declares that the live cluster objects contradict:
// a nested pool whose parent is neither declared nor live, a guest in a pool that is neither. Without an
// observation of the pools nothing that uses them can be planned.
func (d *differ) checkObjects() (diags diag.List, observeFailed bool) {
	o := &d.objs
	uses := len(o.declared) > 0
	for _, r := range d.resources {
		uses = uses || r.GuestPool() != ""
	}
	if !uses {
		return nil, false
	}
	if !o.observed {
		for _, r := range d.resources {
			field := "spec.pool"
			if r.Pool() != nil {
				field = "kind"
			} else if r.GuestPool() == "" {
				continue
			}
			diags = append(diags, diagAt(r, field, "the cluster's resource pools were not observed (an executor that does not read them?); nothing that uses pools is planned"))
		}
		return diags.Sorted(), true
	}
	known := func(id string) bool {
		_, live := o.pools[id]
		return live || o.declared[id] != nil
	}
	for _, id := range slices.Sorted(maps.Keys(o.declared)) {
		r := o.declared[id]
		if parent := manifest.PoolParent(id); parent != "" && !known(parent) {
			field := "spec.id"
			if r.Pool().ID == r.Metadata.Name && !r.Source.Positions.Has("spec.id") {
				field = "metadata.name"
			}
			diags = append(diags, diagAt(r, field, "pool %s is nested in pool %s, which is neither declared (pool/) nor on PVE; declare the parent pool", id, parent))
		}
	}
	for _, r := range d.resources {
		if id := r.GuestPool(); id != "" && !known(id) {
			diags = append(diags, diagAt(r, "spec.pool", "pool %s is neither declared (pool/) nor on PVE; declare it, or fix the id", id))
		}
	}
	return diags.Sorted(), false
}

// poolLevel orders the pools before every other resource, a parent before its children.
func poolLevel(id string) int { return strings.Count(id, "/") - manifest.MaxPoolLevels }

// poolOpID is the operation id of an action on a pool: pool-<id>-<verb>.
func poolOpID(id string, a Action) string {
	return "pool-" + id + "-" + strings.TrimSuffix(string(a), "-pool")
}

// poolOp is an operation on a pool of the unit u, after the unit's last one.
func (d *differ) poolOp(u *unit, id string, a Action, params []KV, reason string) *Operation {
	return d.objectOp(u, poolOpID(id, a), "poolid", id, a, params, reason)
}

// objectOp appends to the unit u, after its last operation, an operation on the cluster object the parameter
// idParam names.
func (d *differ) objectOp(u *unit, opID, idParam, id string, a Action, params []KV, reason string) *Operation {
	op := Operation{ID: d.opID(opID), Cluster: d.cluster, Node: ClusterScope, Ref: u.ref.String(), Action: a,
		Params: append([]KV{{Key: idParam, Value: id}}, params...), Reason: reason}
	if len(u.ops) > 0 {
		op.DependsOn = []string{u.last()}
	}
	u.ops = append(u.ops, op)
	return &u.ops[len(u.ops)-1]
}

// recordObject asks for the ownership record of a declared cluster object.
func (d *differ) recordObject(r *manifest.Resource, id string) {
	d.objs.write = append(d.objs.write, ObjectRecord{Kind: r.Kind.ObjectKind(), ID: id, Ref: r.Ref().String()})
}

// planPools creates the declared pools that are not live, claims the unmarked live ones (explicitly: the
// plan shows the claim), and converges the comment of the owned ones; parents first.
func (d *differ) planPools() {
	o := &d.objs
	if !o.observed {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(o.declared)) {
		r := o.declared[id]
		want := r.Pool().Comment
		ref := r.Ref()
		u := &unit{ref: ref, level: poolLevel(id), node: ClusterScope}
		live, found := o.pools[id]
		switch {
		case !found:
			op := d.poolOp(u, id, ActionCreatePool, []KV{{Key: "comment", Value: want}},
				fmt.Sprintf("%s: pool %s not on PVE; will create", ref, id))
			op.Precondition.ExpectAbsent = true
			op.Changes = []Change{{Field: "comment", After: pveformat.MarkComment(want)}}
			d.recordObject(r, id)
		case !pveformat.Marked(live.Comment):
			op := d.poolOp(u, id, ActionClaimPool, nil,
				fmt.Sprintf("%s: claim ownership of pool %s (add %s to its comment)", ref, id, pveformat.OwnershipMarker))
			op.Precondition.Expect = []KV{{Key: "comment", Value: live.Comment}}
			op.Changes = []Change{{Field: "comment", Before: live.Comment, After: pveformat.MarkComment(live.Comment)}}
			d.recordObject(r, id)
			if pveformat.CommentText(live.Comment) != want {
				claimed := pveformat.MarkComment(live.Comment)
				op := d.poolOp(u, id, ActionConfigurePool, []KV{{Key: "comment", Value: want}}, fmt.Sprintf("%s: comment drift", ref))
				op.Precondition.Expect = []KV{{Key: "comment", Value: claimed}}
				op.Changes = []Change{{Field: "comment", Before: claimed, After: pveformat.MarkComment(want)}}
			}
		default:
			if !o.recorded(r.Kind.ObjectKind(), id) {
				// Marked but not recorded (the record was lost): the manifest declares it, so it is recorded.
				d.recordObject(r, id)
			}
			if pveformat.CommentText(live.Comment) != want {
				op := d.poolOp(u, id, ActionConfigurePool, []KV{{Key: "comment", Value: want}}, fmt.Sprintf("%s: comment drift", ref))
				op.Precondition.Expect = []KV{{Key: "comment", Value: live.Comment}}
				op.Changes = []Change{{Field: "comment", Before: live.Comment, After: pveformat.MarkComment(want)}}
			}
		}
		o.ownedAfter[id] = true
		if len(u.ops) == 0 {
			continue
		}
		if parent := o.units[manifest.PoolParent(id)]; parent != nil {
			u.ops[0].DependsOn = append([]string{parent.last()}, u.ops[0].DependsOn...)
		}
		o.units[id] = u
		d.addUnit(u)
	}
}

// poolDeps are the operations a write of a guest's membership in pool id waits for: the pool's own.
func (d *differ) poolDeps(ids ...string) []string {
	var out []string
	for _, id := range ids {
		if u := d.objs.units[id]; u != nil {
			out = append(out, u.last())
		}
	}
	return out
}

// planPoolMembership converges an existing guest's pool: it adds the guest to the pool its manifest names,
// moving it out of its live pool (as PVE's allow-move does). An absent spec.pool leaves the membership
// alone. Only pools ProxOps owns (after this plan) are written to.
func (d *differ) planPoolMembership(s *guestUpdate) error {
	want := s.r.GuestPool()
	o := &d.objs
	if want == "" || !o.observed {
		return nil
	}
	vmid := s.g.VMID
	from := o.memberOf[vmid]
	if from == want {
		return nil
	}
	ref := s.ref.String()
	switch {
	case !o.ownedAfter[want]:
		d.finding(FindingAnomaly, ref, s.g.Node, vmid, "spec.pool",
			fmt.Sprintf("pool %s is not ProxOps' (not declared under pool/); ProxOps does not add guests to it: declare the pool, or add the guest by hand", want))
		return nil
	case from != "" && !o.ownedAfter[from] && !o.ownedNow(from):
		d.finding(FindingAnomaly, ref, s.g.Node, vmid, "spec.pool",
			fmt.Sprintf("the guest is in pool %s, which ProxOps does not own; it is not moved to pool %s: move it by hand", from, want))
		return nil
	}
	reason := fmt.Sprintf("%s: add to pool %s", ref, want)
	if from != "" {
		reason = fmt.Sprintf("%s: move from pool %s to pool %s", ref, from, want)
		o.leaving[vmid] = true
	}
	op := d.add(s, Operation{ID: d.opID(guestOpID(s.g.Type, vmid, ActionSetPoolMembers, "")), Action: ActionSetPoolMembers,
		Params: []KV{{Key: "poolid", Value: want}, {Key: "node", Value: s.g.Node}}, Reason: reason,
		Changes: []Change{{Field: "pool", Before: from, After: want}}})
	op.Node = ClusterScope
	op.DependsOn = append(op.DependsOn, d.poolDeps(want, from)...)
	return nil
}

// planCreatedGuestPools makes the create of a guest in a pool this plan provisions wait for the pool (the
// create carries pool=), and adds a cloned VM to its pool after the clone (a clone's pool= is not used).
func (d *differ) planCreatedGuestPools() {
	for _, r := range d.resources {
		want := r.GuestPool()
		u := d.unitOf[r.Ref()]
		if want == "" || u == nil || len(u.ops) == 0 {
			continue
		}
		first := &u.ops[0]
		switch first.Action {
		case ActionCreate:
			first.DependsOn = append(first.DependsOn, d.poolDeps(want)...)
		case ActionClone:
			if !d.objs.ownedAfter[want] {
				d.finding(FindingAnomaly, r.Ref().String(), r.Node(), r.VMID(), "spec.pool",
					fmt.Sprintf("pool %s is not ProxOps' (not declared under pool/); ProxOps does not add the clone to it: declare the pool, or add the guest by hand", want))
				continue
			}
			deps := append([]string{first.ID}, d.poolDeps(want)...)
			u.ops = append(u.ops, Operation{ID: d.opID(guestOpID(inventory.QEMU, r.VMID(), ActionSetPoolMembers, "")),
				Cluster: d.cluster, Node: ClusterScope, VMID: r.VMID(), GuestType: inventory.QEMU, Ref: r.Ref().String(),
				Action: ActionSetPoolMembers, DependsOn: deps, Params: []KV{{Key: "poolid", Value: want}, {Key: "node", Value: r.Node()}},
				Reason: fmt.Sprintf("%s: add to pool %s", r.Ref(), want), Changes: []Change{{Field: "pool", After: want}}})
		default:
			// A guest that exists: planPoolMembership converged its pool with its update.
		}
	}
}

// planObjectPrunes deletes the owned pools no manifest declares (marker and record), children first, within
// the prune budget and under the mass-prune latch; a pool that would still hold guests or child pools is
// reported, and every other undeclared pool is reported and never touched.
func (d *differ) planObjectPrunes() {
	o := &d.objs
	if !o.observed {
		return
	}
	kind := manifest.KindPool
	pruneUnits := map[int]string{}
	for _, u := range d.units {
		if u.prune && u.vmid > 0 {
			pruneUnits[u.vmid] = u.last()
		}
	}
	owned := 0
	var cands []string
	for _, id := range slices.Sorted(maps.Keys(o.pools)) {
		p := o.pools[id]
		ref := "Pool/" + id
		marked, recorded := pveformat.Marked(p.Comment), o.recorded(kind.ObjectKind(), id)
		if marked && recorded {
			owned++
		}
		if o.declared[id] != nil {
			continue
		}
		if d.ownedUndeclared(ref, "pool "+id, marked, recorded) {
			cands = append(cands, id)
		}
	}
	// Children before parents: the deepest first, then by id.
	slices.SortFunc(cands, func(a, b string) int {
		return cmp.Or(cmp.Compare(strings.Count(b, "/"), strings.Count(a, "/")), cmp.Compare(a, b))
	})
	deleting := map[string]bool{}
	var plannable []string
	for _, id := range cands {
		var staying []string
		for _, vmid := range o.pools[id].Members {
			if _, pruned := pruneUnits[vmid]; !pruned && !o.leaving[vmid] {
				staying = append(staying, strconv.Itoa(vmid))
			}
		}
		var children []string
		for _, other := range slices.Sorted(maps.Keys(o.pools)) {
			if manifest.PoolParent(other) == id && !deleting[other] {
				children = append(children, other)
			}
		}
		ref := o.recordRef(kind, id)
		switch {
		case len(staying) > 0:
			d.finding(FindingAnomaly, ref, ClusterScope, 0, "",
				fmt.Sprintf("pool %s is absent in git but still holds guests %s; PVE deletes only an empty pool: move them out (spec.pool) or delete them; not deleted", id, strings.Join(staying, ", ")))
			continue
		case len(children) > 0:
			d.finding(FindingAnomaly, ref, ClusterScope, 0, "",
				fmt.Sprintf("pool %s is absent in git but has child pools %s that stay; not deleted", id, strings.Join(children, ", ")))
			continue
		}
		deleting[id] = true
		plannable = append(plannable, id)
	}
	prunes := make([]objectPrune, len(plannable))
	for i, id := range plannable {
		prunes[i] = objectPrune{ref: o.recordRef(kind, id), what: "pool " + id}
	}
	d.pruneOwned("pools", owned, prunes, func(i int) {
		id, ref := plannable[i], prunes[i].ref
		u := &unit{ref: refOf(ref), level: manifest.MaxPoolLevels - strings.Count(id, "/"), node: ClusterScope, prune: true}
		op := d.poolOp(u, id, ActionDeletePool, nil, fmt.Sprintf("%s: pool %s present on PVE (%s) but absent in git", ref, id, pveformat.OwnershipMarker))
		op.Ref = ref
		op.Precondition.Expect = []KV{{Key: "comment", Value: o.pools[id].Comment}}
		for _, vmid := range o.pools[id].Members {
			if dep, ok := pruneUnits[vmid]; ok {
				op.DependsOn = append(op.DependsOn, dep)
			}
		}
		for _, pu := range d.units {
			if pu.prune && len(pu.ops) > 0 && pu.ops[0].Action == ActionDeletePool && manifest.PoolParent(poolIDOf(pu.ops[0])) == id {
				op.DependsOn = append(op.DependsOn, pu.last())
			}
		}
		slices.Sort(op.DependsOn)
		op.DependsOn = slices.Compact(op.DependsOn)
		d.addUnit(u)
	})
}

// ownedUndeclared says whether a live object no manifest declares is ProxOps' own (marked and recorded), a
// delete a plan may make; it reports one that is not as skipped: unmarked, never touched; marked without a
// record, never deleted. what names it in messages ("pool web").
func (d *differ) ownedUndeclared(ref, what string, marked, recorded bool) bool {
	switch {
	case !marked:
		d.finding(FindingSkipped, ref, ClusterScope, 0, "", fmt.Sprintf("live %s without the %s marker; never touched", what, pveformat.OwnershipMarker))
		return false
	case !recorded:
		d.finding(FindingSkipped, ref, ClusterScope, 0, "",
			fmt.Sprintf("%s carries the %s marker but has no ownership record; never deleted", what, pveformat.OwnershipMarker))
		return false
	}
	return true
}

// ObjectsNeeded says which cluster objects, besides the pools, planning a cluster needs observed. Clusters that
// declare none of a kind and own none are not asked for it (requests fewer per plan).
type ObjectsNeeded struct {
	// HA: a manifest declares spec.ha or an HARule, or the ownership inventory holds an HA object.
	HA bool
	// BackupJobs: a BackupJob manifest, or an owned backup job ProxOps may have to prune.
	BackupJobs bool
	// ClusterFirewall: the cluster's firewall objects and its own firewall (NeedsClusterFirewall).
	ClusterFirewall bool
}

// NeededObjects says which cluster objects planning a cluster needs observed.
func NeededObjects(c *repo.Cluster, records []ObjectRecord) ObjectsNeeded {
	var n ObjectsNeeded
	for _, r := range c.Resources {
		n.HA = n.HA || r.HARule() != nil || (r.Kind.IsGuest() && r.GuestHA() != nil)
		n.BackupJobs = n.BackupJobs || r.Kind == manifest.KindBackupJob
	}
	for _, r := range records {
		n.HA = n.HA || r.Kind == manifest.ObjectKindHAResource || r.Kind == manifest.KindHARule.ObjectKind()
		n.BackupJobs = n.BackupJobs || r.Kind == manifest.KindBackupJob.ObjectKind()
	}
	n.ClusterFirewall = NeedsClusterFirewall(c, records)
	return n
}

// objectPrune is the delete of an owned cluster object a plan would make: the object's record ref, and what
// names it in messages ("pool web").
type objectPrune struct{ ref, what string }

// pruneOwned applies the mass-prune latch (over the owned objects of one kind, plural naming them) and the
// prune budget to the deletes a plan would make. add plans the delete of prunes[i] for each one the plan
// carries now, in order; the latch then holds it. The others are reported as deferred.
func (d *differ) pruneOwned(plural string, owned int, prunes []objectPrune, add func(i int)) {
	held := len(prunes) >= 3 && 2*len(prunes) > owned
	if held {
		d.heldWhy = append(d.heldWhy, fmt.Sprintf("it would prune %d of %d owned %s", len(prunes), owned, plural))
	}
	budget := d.in.Settings.PruneBudget
	for i, p := range prunes {
		if budget > 0 && d.objs.pruned >= budget {
			d.finding(FindingDeferredPrune, p.ref, ClusterScope, 0, "",
				fmt.Sprintf("prune deferred (budget %d per plan): %s present on PVE (%s) but absent in git", budget, p.what, pveformat.OwnershipMarker))
			continue
		}
		d.objs.pruned++
		add(i)
		if held {
			d.held = append(d.held, p.ref)
		}
	}
}

func poolIDOf(op Operation) string {
	id, _ := op.Param("poolid")
	return id
}

// recordRef is the Kind/name an object was recorded as, or Kind/id when the record names none.
func (o *objects) recordRef(kind manifest.Kind, id string) string {
	if r, ok := o.records[objectKey{kind.ObjectKind(), id}]; ok && r.Ref != "" {
		return r.Ref
	}
	return string(kind) + "/" + id
}

// objectRecords are the records the plan asks for, sorted.
func (d *differ) objectRecords() []ObjectRecord {
	out := slices.Clone(d.objs.write)
	slices.SortFunc(out, CompareObjectRecords)
	return slices.CompactFunc(out, func(a, b ObjectRecord) bool { return CompareObjectRecords(a, b) == 0 })
}

// hashObjects writes what the plan's cluster objects are computed from into its content id.
func (d *differ) hashObjects(w func(...string)) {
	d.hashFirewallObjects(w)
	o := &d.objs
	o.hashBackupJobs(w)
	if len(o.pools) == 0 && len(o.records) == 0 && len(o.declared) == 0 {
		return
	}
	w("pools", strconv.FormatBool(o.observed))
	for _, id := range slices.Sorted(maps.Keys(o.pools)) {
		p := o.pools[id]
		w("pool", p.ID, p.Comment)
		for _, m := range p.Members {
			w(strconv.Itoa(m))
		}
	}
	keys := slices.SortedFunc(maps.Keys(o.records), func(a, b objectKey) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.id, b.id))
	})
	for _, k := range keys {
		r := o.records[k]
		w("object", r.Kind, r.ID, r.Ref)
	}
	for _, r := range d.objectRecords() {
		w("record-object", r.Kind, r.ID, r.Ref)
	}
}

// Operation finds an operation of the plan by id.
func (p Plan) Operation(id string) (Operation, bool) {
	for _, op := range p.Operations {
		if op.ID == id {
			return op, true
		}
	}
	return Operation{}, false
}
