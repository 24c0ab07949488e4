package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
)

// An operator's rollback (proxops rollback CLUSTER/GUEST [SNAPSHOT]) is a plan of its own: one rollback
// operation of one guest to one of ProxOps' own safety snapshots, signed and run like any plan. After it the
// guest is suspended from correction: the plans that follow report its drift from git and leave it alone,
// until a tree changes the guest's manifest or an operator resumes it.

// RequestedByParam is the parameter of an operator's rollback that names who asked for it; a rollback the
// run adds after a failed change has none.
const RequestedByParam = "requested-by"

// RejectRollback: an operator's rollback names a guest or snapshot ProxOps cannot roll back to.
const RejectRollback = "rollback_refused"

// RollbackRequest is an operator's request to roll one guest back.
type RollbackRequest struct {
	// Guest is the guest's Kind/name, its name, or its vmid.
	Guest string
	// Snapshot names the snapshot; empty means the newest of ProxOps' own snapshots of the guest.
	Snapshot string
	// RequestedBy is the operator who asked.
	RequestedBy string
}

// SuspendedGuest is a guest suspended from correction after an operator's rollback.
type SuspendedGuest struct {
	VMID int
	// Ref is the guest's Kind/name.
	Ref string
	// Snapshot is the snapshot it was rolled back to.
	Snapshot string
	// By is who asked for the rollback, At when it was done, RunID the run that did it.
	By    string
	At    time.Time
	RunID string
	// Manifest is the digest of the guest's manifest in the tree the rollback was planned with.
	Manifest string
}

// RollbackPlan plans an operator's rollback: the guest named by the request, rolled back to the snapshot it
// names (or to the newest of ProxOps' own), started again when it ran. A guest that is not found, a snapshot
// that does not exist, and a snapshot ProxOps did not take (its name lacks the prefix, or the ownership
// inventory holds no record of it) reject the plan with a diagnostic that says so: nothing is written.
func RollbackPlan(in Input, req RollbackRequest) (Plan, error) {
	if in.Cluster == nil {
		return Plan{}, fmt.Errorf("plan: no desired cluster")
	}
	d := newDiffer(in)
	refuse := func(format string, args ...any) error {
		return reject(d.cluster, RejectRollback, diag.List{{Severity: diag.Error, Ref: req.Guest,
			Message: fmt.Sprintf(format, args...)}})
	}
	ref, vmid, err := d.rollbackGuest(req.Guest)
	if err != nil {
		return Plan{}, refuse("%v", err)
	}
	lg, ok := d.live[vmid]
	if !ok {
		return Plan{}, refuse("%s (vmid %d) is not on any observed node of cluster %s", ref, vmid, d.cluster)
	}
	g := lg.g
	own := d.ownSnapshots(g)
	names := func(list []inventory.Snapshot) string {
		var out []string
		for _, s := range list {
			out = append(out, s.Name)
		}
		if len(out) == 0 {
			return "none"
		}
		return strings.Join(out, ", ")
	}
	var target inventory.Snapshot
	switch {
	case req.Snapshot == "" && len(own) == 0:
		return Plan{}, refuse("%s (vmid %d) has no snapshot ProxOps took (snapshots on PVE: %s); ProxOps rolls back only to its own",
			ref, vmid, names(g.Snapshots))
	case req.Snapshot == "":
		target = own[len(own)-1]
	default:
		sn, found := g.Snapshot(req.Snapshot)
		switch {
		case !found:
			return Plan{}, refuse("%s (vmid %d) has no snapshot %s (ProxOps' own: %s)", ref, vmid, req.Snapshot, names(own))
		case !IsOwnSnapshotName(sn.Name):
			return Plan{}, refuse("snapshot %s of %s (vmid %d) was not taken by ProxOps (its name does not start with %s); ProxOps rolls back only to its own snapshots (%s): roll back to it in PVE if you mean to",
				sn.Name, ref, vmid, SnapshotPrefix, names(own))
		case !slices.ContainsFunc(own, func(o inventory.Snapshot) bool { return o.Name == sn.Name }):
			return Plan{}, refuse("snapshot %s of %s (vmid %d) was not taken by ProxOps (the ownership inventory holds no record of it, or it is incomplete); ProxOps rolls back only to its own snapshots (%s): roll back to it in PVE if you mean to",
				sn.Name, ref, vmid, names(own))
		}
		target = sn
	}
	taken := "at an unknown time"
	if target.Time > 0 {
		taken = time.Unix(target.Time, 0).UTC().Format(time.RFC3339)
	}
	why := ""
	if target.Description != "" {
		why = " (" + target.Description + ")"
	}
	op := Operation{ID: guestOpID(g.Type, vmid, ActionRollback, ""), Action: ActionRollback, Cluster: d.cluster, Node: g.Node,
		VMID: vmid, GuestType: g.Type, Ref: ref,
		Params:  []KV{{Key: SnapshotNameParam, Value: target.Name}, {Key: RequestedByParam, Value: req.RequestedBy}},
		Reason:  fmt.Sprintf("%s: roll back to the snapshot %s taken %s%s, as %s asked", ref, target.Name, taken, why, req.RequestedBy),
		Changes: []Change{{Field: "state", Before: "current", After: "snapshot " + target.Name}}}
	if g.Running() {
		op.Params = append(op.Params, KV{Key: StartParam, Value: "1"})
	}
	d.finding(FindingWarning, ref, g.Node, vmid, "rollback",
		"what the guest wrote to its disks since the snapshot is lost; afterwards the guest is suspended from correction until a commit changes its manifest or an operator resumes it")
	p := Plan{Cluster: d.cluster, Operations: []Operation{op}, Findings: d.findings}
	for _, r := range d.resources {
		p.Resources = append(p.Resources, r.Ref().String())
	}
	p.ID = d.planID(p)
	return p, nil
}

// rollbackGuest finds the guest a rollback names: a declared guest by Kind/name, by name, or by vmid, else a
// guest of the ownership inventory by vmid or Kind/name.
func (d *differ) rollbackGuest(name string) (string, int, error) {
	if name == "" {
		return "", 0, fmt.Errorf("no guest named")
	}
	var found []*manifest.Resource
	for _, r := range d.resources {
		if !r.Kind.IsGuest() {
			continue
		}
		if r.Ref().String() == name || r.Ref().Name == name || strconv.Itoa(r.VMID()) == name {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 1:
		return found[0].Ref().String(), found[0].VMID(), nil
	case 0:
	default:
		var refs []string
		for _, r := range found {
			refs = append(refs, r.Ref().String())
		}
		return "", 0, fmt.Errorf("%q names %s: give the guest as Kind/name", name, strings.Join(refs, " and "))
	}
	for _, vmid := range sortedInts(d.owned) {
		o := d.owned[vmid]
		if o.Ref == name || strconv.Itoa(vmid) == name {
			return cmp.Or(o.Ref, strconv.Itoa(vmid)), vmid, nil
		}
	}
	return "", 0, fmt.Errorf("no guest %q in cluster %s (give its name, Kind/name or vmid)", name, d.cluster)
}

// suspendGuests takes the operations of the guests suspended after an operator's rollback out of the plan
// and reports, for each, that it is suspended and how it differs from git.
func (d *differ) suspendGuests() {
	if len(d.in.Suspended) == 0 {
		return
	}
	byVMID := map[int]SuspendedGuest{}
	for _, s := range d.in.Suspended {
		byVMID[s.VMID] = s
	}
	drift := map[int][]string{}
	dropped := map[string]bool{}
	d.units = slices.DeleteFunc(d.units, func(u *unit) bool {
		vmid := u.vmid
		if vmid == 0 && len(u.ops) > 0 {
			vmid = u.ops[0].VMID
		}
		if _, ok := byVMID[vmid]; !ok || u.prune {
			return false
		}
		for _, op := range u.ops {
			dropped[op.ID] = true
			drift[vmid] = append(drift[vmid], driftOf(op)...)
		}
		if d.unitOf[u.ref] == u {
			delete(d.unitOf, u.ref)
		}
		return true
	})
	d.records = slices.DeleteFunc(d.records, func(r Record) bool { return r.After != "" && dropped[r.After] })
	// What the latches would hold of them is gone with them.
	d.migrations = slices.DeleteFunc(d.migrations, func(id string) bool { return dropped[id] })
	d.fwHeld = slices.DeleteFunc(d.fwHeld, func(ref string) bool {
		return slices.ContainsFunc(d.in.Suspended, func(s SuspendedGuest) bool { return s.Ref == ref })
	})
	for _, vmid := range sortedInts(byVMID) {
		s := byVMID[vmid]
		lg, live := d.live[vmid]
		if !live {
			continue
		}
		msg := fmt.Sprintf("suspended from correction: rolled back to %s by %s", s.Snapshot, cmp.Or(s.By, "an operator"))
		if !s.At.IsZero() {
			msg += " at " + s.At.UTC().Format(time.RFC3339)
		}
		if len(drift[vmid]) == 0 {
			msg += "; no drift from git"
		} else {
			msg += "; drift from git, not corrected: " + strings.Join(slices.Compact(drift[vmid]), "; ")
		}
		msg += "; a commit that changes its manifest, or proxops resume " + d.cluster + "/" + shortName(s.Ref) + ", ends the suspension"
		d.finding(FindingSuspended, s.Ref, lg.g.Node, vmid, "", msg)
	}
}

// driftOf says what an operation would have changed: its changes, or its action.
func driftOf(op Operation) []string {
	if op.Action == ActionSnapshot || op.Action == ActionDeleteSnapshot {
		return nil
	}
	if len(op.Changes) == 0 {
		return []string{string(op.Action)}
	}
	var out []string
	for _, c := range op.Changes {
		out = append(out, fmt.Sprintf("%s: %s → %s", c.Field, cmp.Or(c.Before, "(none)"), cmp.Or(c.After, "(none)")))
	}
	return out
}

// shortName is the name of a Kind/name reference.
func shortName(ref string) string {
	if _, name, ok := strings.Cut(ref, "/"); ok {
		return name
	}
	return ref
}
