package plan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pvewire"
)

// Safety snapshots: before a change that restarts a guest, changes its disks or moves it, the plan takes a
// snapshot named proxops-<short plan id> that the change depends on. ProxOps calls a snapshot its own only
// when both hold: the name starts with SnapshotPrefix, and the ownership inventory holds a SnapshotRecord of
// it (written by the planner before it dispatches the snapshot). It deletes or rolls back to no other.

// Rollback policies (reconcile.rollback).
const (
	// RollbackOnFailure rolls a guest back to its safety snapshot when the protected change fails.
	RollbackOnFailure = "on-failure"
	// RollbackNever keeps the snapshot and reports it.
	RollbackNever = "never"
)

// The parameters of a snapshot operation that tell the run what to do when the change it protects fails:
// roll back (RollbackParam=on-failure), then start the guest again (StartParam=1).
const (
	RollbackParam = "rollback"
	StartParam    = "start"
)

// SnapshotPrefix starts the name of every snapshot ProxOps takes.
const SnapshotPrefix = "proxops-"

// SnapshotNameParam is the snapshot operations' parameter naming the snapshot. A snapshot operation of a plan
// carries no name: the run that dispatches it names it (SnapshotName of the plan id), since the plan's id is
// the hash of its operations.
const SnapshotNameParam = "snapname"

// IsOwnSnapshotName reports whether a snapshot name has ProxOps' prefix (one half of ownership).
func IsOwnSnapshotName(name string) bool {
	return strings.HasPrefix(name, SnapshotPrefix) && len(name) > len(SnapshotPrefix)
}

// SnapshotName is the name of the safety snapshots a plan's run takes: proxops- and the first 12 letters and
// digits of the plan id, a valid PVE snapshot name. It follows from the plan's content, as everything the
// status reports does, so two runs of the same history report the same names; a later plan of a guest with a
// snapshot observes it (its config names it as parent), so it has another id and another name.
func SnapshotName(planID string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(planID) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
		if b.Len() == 12 {
			break
		}
	}
	return SnapshotPrefix + b.String()
}

// ForRun names a snapshot operation for the run of plan planID that dispatches it: the name SnapshotName of
// the plan id, and a description that says which plan and commit took it before which change. A rollback the
// run added after a failure gets the same name. Any other operation is returned as it is.
func (o Operation) ForRun(planID, commit string) Operation {
	if o.Action == ActionRollback {
		if name, _ := o.Param(SnapshotNameParam); name == "" {
			params := []KV{{Key: SnapshotNameParam, Value: SnapshotName(planID)}}
			for _, kv := range o.Params {
				if kv.Key != SnapshotNameParam {
					params = append(params, kv)
				}
			}
			o.Params = params
		}
		return o
	}
	if o.Action != ActionSnapshot {
		return o
	}
	change, _ := o.Param("description")
	if len(commit) > 12 {
		commit = commit[:12]
	}
	params := []KV{{Key: SnapshotNameParam, Value: SnapshotName(planID)},
		{Key: "description", Value: fmt.Sprintf("ProxOps safety snapshot, plan %s, commit %s: before %s", planID, commit, change)}}
	for _, kv := range o.Params {
		if kv.Key != SnapshotNameParam && kv.Key != "description" {
			params = append(params, kv)
		}
	}
	o.Params = params
	return o
}

// SnapshotRecord is the ownership inventory's record of a safety snapshot (KV proxops_owned under
// <cluster>.obj.snapshot.<vmid>/<name>).
type SnapshotRecord struct {
	VMID int
	Name string
	// Ref and Node are the guest's.
	Ref  string
	Node string
	// RunID and Commit are the run that took it and the commit it applied; Change what it protected.
	RunID      string
	Commit     string
	Change     string
	RecordedAt time.Time
}

// SnapshotObjectID is the id of a snapshot record among the inventory's objects: <vmid>/<name>.
func SnapshotObjectID(vmid int, name string) string {
	return strconv.Itoa(vmid) + "/" + name
}

// protect adds the safety snapshots of one guest's update to its unit (the last update step):
//
//   - before a template conversion, which PVE refuses for a guest with snapshots, it deletes ProxOps' own
//     snapshots of the guest first and reports the change as unprotected;
//   - before a protected change (policy disruptive: a restart, a disk resize or a disk written; always: any
//     change) it takes a snapshot the change depends on, when every volume of the guest can be snapshotted,
//     and otherwise says why it cannot;
//   - for a guest the plan leaves alone (converged), it deletes its own snapshots older than the retention
//     and those beyond the number to keep.
func (d *differ) protect(s *guestUpdate) {
	own := d.ownSnapshots(s.g)
	if len(s.u.ops) == 0 {
		d.pruneSnapshots(s, own)
		return
	}
	policy := d.snapshotPolicy(s.r)
	if slices.ContainsFunc(s.u.ops, func(o Operation) bool { return o.Action == ActionMarkTemplate }) {
		d.removeSnapshotsBeforeTemplate(s, own)
		if policy != manifest.SnapshotsNever {
			d.finding(FindingWarning, s.ref.String(), s.g.Node, s.g.VMID, "spec.snapshots",
				"not protected by a snapshot: PVE does not convert a guest with snapshots to a template")
		}
		return
	}
	if policy == manifest.SnapshotsNever || s.g.Template {
		// PVE takes no snapshot of a template; its changes need no restart anyway.
		return
	}
	var change []string
	for _, o := range s.u.ops {
		if what, ok := protectedChange(s.g.Type, o, policy); ok && !slices.Contains(change, what) {
			change = append(change, what)
		}
	}
	if len(change) == 0 {
		return
	}
	if why := d.unprotectable(s.g); why != "" {
		d.finding(FindingWarning, s.ref.String(), s.g.Node, s.g.VMID, "spec.snapshots", "not protected by a snapshot: "+why)
		return
	}
	op := Operation{ID: d.opID(guestOpID(s.g.Type, s.g.VMID, ActionSnapshot, "")), Action: ActionSnapshot,
		Params: []KV{{Key: "description", Value: strings.Join(change, "; ")}},
		Reason: fmt.Sprintf("%s: safety snapshot before %s", s.ref, strings.Join(change, ", "))}
	if p := s.r.GuestSnapshots(); p != nil && p.VMState && s.g.Type == inventory.QEMU && s.running {
		op.Params = append(op.Params, KV{Key: "vmstate", Value: "1"})
	}
	if d.in.Settings.Rollback == RollbackOnFailure {
		op.Params = append(op.Params, KV{Key: RollbackParam, Value: RollbackOnFailure})
		if s.g.Running() {
			op.Params = append(op.Params, KV{Key: StartParam, Value: "1"})
		}
	}
	d.insertFirst(s, op)
}

// protectedChange says whether an operation is a change the policy protects, and names it.
func protectedChange(t inventory.GuestType, o Operation, policy string) (string, bool) {
	switch o.Action {
	case ActionShutdown, ActionStop:
		return "restart", true
	case ActionResize:
		disk, _ := o.Param("disk")
		return "grow " + disk, true
	case ActionConfigure:
		var disks []string
		for _, kv := range o.Values {
			if !pvewire.IsVolumeKey(t, kv.Key) {
				continue
			}
			if dr := pvewire.ParseDrive(kv.Value); t == inventory.QEMU && (dr.IsCDROM() || dr.IsCloudInit()) {
				continue // a cdrom or the cloud-init drive holds no data of the guest's
			}
			disks = append(disks, kv.Key)
		}
		for _, k := range o.Delete {
			if pvewire.IsVolumeKey(t, k) {
				disks = append(disks, k)
			}
		}
		if len(disks) > 0 {
			return "change " + strings.Join(disks, ", "), true
		}
		if policy == manifest.SnapshotsAlways {
			return "config change", true
		}
	case ActionStart, ActionResume, ActionRegenerateCloudInit:
		if policy == manifest.SnapshotsAlways {
			return string(o.Action), true
		}
	default:
		// Creations, deletions, moves (protected before they run, see insertFirst), snapshot operations
		// themselves and cluster-object operations change no existing guest's disks or run state.
	}
	return "", false
}

// snapshotPolicy is the guest's policy (spec.snapshots.policy), else the cluster's.
func (d *differ) snapshotPolicy(r *manifest.Resource) string {
	if p := r.GuestSnapshots(); p != nil && p.Policy != "" {
		return p.Policy
	}
	if d.in.Settings.Snapshots != "" {
		return d.in.Settings.Snapshots
	}
	return manifest.SnapshotsDisruptive
}

// ownSnapshots are the complete snapshots of a guest that ProxOps took: named with its prefix and recorded
// in the ownership inventory. Oldest first.
func (d *differ) ownSnapshots(g *inventory.Guest) []inventory.Snapshot {
	var out []inventory.Snapshot
	for _, sn := range g.Snapshots {
		if sn.State != "" || !IsOwnSnapshotName(sn.Name) {
			continue
		}
		if slices.ContainsFunc(d.in.SnapshotRecords, func(r SnapshotRecord) bool { return r.VMID == g.VMID && r.Name == sn.Name }) {
			out = append(out, sn)
		}
	}
	inventory.SortSnapshots(out)
	return out
}

// unprotectable says why a guest cannot be snapshotted, from the storage types and volume formats PVE
// snapshots (pve-storage volume_has_feature): qcow2 on file storages; raw, qcow2 and subvolumes on Btrfs;
// every volume on LVM-thin, ZFS and Ceph RBD; nothing on LVM (thick) or iSCSI, nor a bind mount. Empty when
// it can be.
func (d *differ) unprotectable(g *inventory.Guest) string {
	cur := g.Current()
	keys := make([]string, 0, len(cur))
	for k := range cur {
		if pvewire.IsVolumeKey(g.Type, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var why []string
	for _, k := range keys {
		var storage, volume, format string
		if g.Type == inventory.LXC {
			m := pvewire.ParseMountPoint(cur[k])
			if m.IsBind() {
				why = append(why, fmt.Sprintf("%s is a bind mount (%s), which PVE cannot snapshot", k, m.Volume))
				continue
			}
			storage, volume = m.Storage(), m.Volume
		} else {
			dr := pvewire.ParseDrive(cur[k])
			if dr.IsCDROM() || dr.IsEmpty() || dr.IsCloudInit() {
				continue
			}
			storage, volume = dr.Storage(), dr.File
			format, _ = dr.Props.Get("format")
		}
		if format == "" {
			format = volumeFormat(volume)
		}
		st, ok := d.storageOf(g.Node, storage)
		if !ok {
			why = append(why, fmt.Sprintf("the storage %s of %s is not observed on node %s", storage, k, g.Node))
			continue
		}
		if r := snapshotRefusal(st.Type, format); r != "" {
			why = append(why, fmt.Sprintf("%s is %s", k, fmt.Sprintf(r, st.ID, st.Type, format)))
		}
	}
	return strings.Join(why, "; ")
}

// snapshotRefusal is the reason a volume of a format on a storage type cannot be snapshotted, with verbs
// for the storage id, its type and the format; empty when it can.
func snapshotRefusal(typ, format string) string {
	switch typ {
	case "dir", "nfs", "cifs", "glusterfs", "cephfs":
		if format == "qcow2" {
			return ""
		}
		return "on %s (%s) as %s: PVE snapshots only qcow2 volumes on file storages"
	case "btrfs":
		if format == "qcow2" || format == "raw" || format == "subvol" {
			return ""
		}
		return "on %s (%s) as %s, which PVE cannot snapshot there"
	case "lvmthin", "zfspool", "zfs", "rbd":
		return ""
	case "lvm":
		return "on %s (%s, thick) as %s: PVE cannot snapshot thick LVM volumes"
	}
	return "on %s (%s) as %s: PVE cannot snapshot volumes on that storage type"
}

// volumeFormat is a volume's format as its name shows it (raw when it has no suffix; subvol for a
// container's subvolume).
func volumeFormat(volid string) string {
	_, name, _ := strings.Cut(volid, ":")
	switch {
	case strings.HasSuffix(name, ".qcow2"):
		return "qcow2"
	case strings.HasSuffix(name, ".vmdk"):
		return "vmdk"
	case strings.Contains(name, "subvol-") && !strings.HasSuffix(name, ".raw"):
		return "subvol"
	}
	return "raw"
}

func (d *differ) storageOf(node, id string) (inventory.Storage, bool) {
	n := d.node(node)
	if n == nil {
		return inventory.Storage{}, false
	}
	for _, st := range n.Storages {
		if st.ID == id {
			return st, true
		}
	}
	return inventory.Storage{}, false
}

// deleteOwnSnapshot is the removal of one of ProxOps' own snapshots of the guest, for the reason why.
func (d *differ) deleteOwnSnapshot(s *guestUpdate, name, why string) Operation {
	return Operation{ID: d.opID(guestOpID(s.g.Type, s.g.VMID, ActionDeleteSnapshot, name)), Action: ActionDeleteSnapshot,
		Params:  []KV{{Key: SnapshotNameParam, Value: name}},
		Reason:  fmt.Sprintf("%s: remove ProxOps' snapshot %s: %s", s.ref, name, why),
		Changes: []Change{{Field: "snapshot " + name, Before: "present", After: "(none)"}}}
}

// foreignSnapshots are the names of the guest's snapshots that are not among own, in the observed order.
func foreignSnapshots(g *inventory.Guest, own []inventory.Snapshot) []string {
	var out []string
	for _, sn := range g.Snapshots {
		if !slices.ContainsFunc(own, func(o inventory.Snapshot) bool { return o.Name == sn.Name }) {
			out = append(out, sn.Name)
		}
	}
	return out
}

// removeSnapshotsBeforeTemplate deletes ProxOps' own snapshots of a guest before its template conversion.
// A snapshot someone else took blocks the conversion too; it is reported, never deleted.
func (d *differ) removeSnapshotsBeforeTemplate(s *guestUpdate, own []inventory.Snapshot) {
	for i := len(own) - 1; i >= 0; i-- {
		d.insertFirst(s, d.deleteOwnSnapshot(s, own[i].Name, "PVE does not convert a guest with snapshots to a template"))
	}
	if foreign := foreignSnapshots(s.g, own); len(foreign) > 0 {
		d.finding(FindingAnomaly, s.ref.String(), s.g.Node, s.g.VMID, "kind",
			fmt.Sprintf("snapshots ProxOps did not take (%s) block the conversion to a template; ProxOps never deletes them: remove them by hand", strings.Join(foreign, ", ")))
	}
}

// pruneSnapshots deletes the own snapshots of a guest the plan leaves alone: those older than the
// retention, and the oldest beyond the number to keep. They do not count against the prune budget.
func (d *differ) pruneSnapshots(s *guestUpdate, own []inventory.Snapshot) {
	retention, keep := d.in.Settings.SnapshotRetention, d.in.Settings.SnapshotKeep
	if retention <= 0 {
		retention = 24 * time.Hour
	}
	if keep <= 0 {
		keep = 3
	}
	for i, sn := range own {
		beyond := len(own)-i > keep
		expired := !d.in.Now.IsZero() && sn.Time > 0 && !time.Unix(sn.Time, 0).Add(retention).After(d.in.Now)
		if !beyond && !expired {
			continue
		}
		why := fmt.Sprintf("older than the retention (%s)", retention)
		if beyond {
			why = fmt.Sprintf("more than %d kept", keep)
		}
		d.add(s, Operation{ID: d.opID(guestOpID(s.g.Type, s.g.VMID, ActionDeleteSnapshot, sn.Name)), Action: ActionDeleteSnapshot,
			Params:  []KV{{Key: SnapshotNameParam, Value: sn.Name}},
			Reason:  fmt.Sprintf("%s: remove ProxOps' snapshot %s: the guest converged, %s", s.ref, sn.Name, why),
			Changes: []Change{{Field: "snapshot " + sn.Name, Before: "present", After: "(none)"}}})
	}
}

// insertFirst puts an operation at the head of a guest's unit, after a claim (the guest must be ProxOps'
// first) and after a move (the operation runs where the guest then is, s.g.Node, the move's target), and
// makes the next operation depend on it. The first write after it no longer holds the observed
// digest (a snapshot or its removal rewrites the config file): it checks the values it changes instead.
func (d *differ) insertFirst(s *guestUpdate, op Operation) {
	u := s.u
	at := 0
	for i, o := range u.ops {
		if o.Action == ActionClaimTag || o.Action.Moves() {
			at = i + 1
		}
	}
	op.Cluster, op.Node, op.VMID, op.GuestType, op.Ref = d.cluster, s.g.Node, s.g.VMID, s.g.Type, s.ref.String()
	if at > 0 {
		op.DependsOn = []string{u.ops[at-1].ID}
	}
	if at < len(u.ops) {
		u.ops[at].DependsOn = []string{op.ID}
	}
	u.ops = slices.Insert(u.ops, at, op)
	for i := at + 1; i < len(u.ops); i++ {
		p := &u.ops[i].Precondition
		if p.Digest == "" {
			continue
		}
		p.Digest = ""
		for _, kv := range u.ops[i].Values {
			p.Expect = append(p.Expect, KV{Key: kv.Key, Value: s.eff[kv.Key]})
		}
		for _, k := range u.ops[i].Delete {
			p.Expect = append(p.Expect, KV{Key: k, Value: s.eff[k]})
		}
		if disk, ok := u.ops[i].Param("disk"); ok {
			p.Expect = append(p.Expect, KV{Key: disk, Value: s.eff[disk]})
		}
		if u.ops[i].Action == ActionMarkTemplate {
			p.Expect = append(p.Expect, KV{Key: "template", Value: s.eff["template"]})
		}
		break
	}
}

// afterFailure is what the run does when operation i failed: when it changed a guest after a safety snapshot
// the run took (the snapshot succeeded), the run rolls the guest back to it if the snapshot says so (a
// rollback operation, dispatched like the plan's own; the run names the snapshot) and otherwise keeps the
// snapshot and says so in the failure's message. Replayed results replay this too: the rollback is added
// once, by the failure, before its own result can arrive.
func (r *Run) afterFailure(i int) {
	failed := r.ops[i]
	if failed.VMID <= 0 || failed.Action == ActionSnapshot || failed.Action == ActionRollback {
		return
	}
	snap := -1
	for j := i - 1; j >= 0; j-- {
		if o := r.ops[j]; o.VMID == failed.VMID && o.Action == ActionSnapshot && r.state[j] == OpSucceeded {
			snap = j
			break
		}
	}
	if snap < 0 {
		return
	}
	s := r.ops[snap]
	if v, _ := s.Param(RollbackParam); v != RollbackOnFailure {
		kept := "the safety snapshot taken before it is kept"
		if r.snapshotName != "" {
			kept = fmt.Sprintf("the safety snapshot %s taken before it is kept (roll back to it in PVE if the guest needs it)", r.snapshotName)
		}
		r.message[i] = appendSentence(r.message[i], kept)
		return
	}
	id := s.ID + "-rollback"
	if _, dup := r.index[id]; dup {
		return
	}
	rb := Operation{ID: id, RunID: s.RunID, PlanID: s.PlanID, Cluster: s.Cluster, Node: s.Node, VMID: s.VMID, GuestType: s.GuestType,
		Ref: s.Ref, Action: ActionRollback, Reason: fmt.Sprintf("%s: roll back to the safety snapshot: %s %s failed", s.Ref, failed.Action, failed.ID),
		Params: []KV{{Key: SnapshotNameParam, Value: ""}}}
	if v, _ := s.Param(StartParam); v == "1" {
		rb.Params = append(rb.Params, KV{Key: StartParam, Value: "1"})
	}
	n := len(r.ops)
	r.ops = append(slices.Clip(r.ops), rb)
	r.index[id] = n
	r.state = append(r.state, OpWaiting)
	r.message = append(r.message, "")
	r.unmet = append(r.unmet, 0)
	r.dependants = append(r.dependants, nil)
	r.ready[n] = struct{}{}
	r.open++
	what := "the safety snapshot taken before it"
	if r.snapshotName != "" {
		what = "the safety snapshot " + r.snapshotName
	}
	r.message[i] = appendSentence(r.message[i], "rolling back to "+what)
}

// NameSnapshots tells the run its plan's id, so that its reports name the safety snapshots it takes.
func (r *Run) NameSnapshots(planID string) { r.snapshotName = SnapshotName(planID) }

func appendSentence(msg, s string) string {
	if msg == "" {
		return s
	}
	return strings.TrimRight(msg, ". ") + "; " + s
}
