package pvesim

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Snapshots, as qemu-server src/PVE/API2/Qemu.pm (snapshot, delsnapshot, rollback, snapshot_cmd_idx,
// get/update_snapshot_config) and pve-container src/PVE/API2/LXC/Snapshot.pm expose them, over
// pve-guest-common src/PVE/AbstractConfig.pm snapshot_create / snapshot_delete / snapshot_rollback.
// Whether a volume can be snapshotted is pve-storage's volume_has_feature('snapshot') per storage type and
// volume format. PVE holds the config flock only for the short config steps of these workers; the long
// part (the volume snapshots) runs under a `lock:` property, so the simulator's tasks mark the guest in
// their prepare step and finish it after the task's duration.

// volumeCanSnapshot is pve-storage's volume_has_feature($storecfg, 'snapshot', $volid) for a current
// volume: file storages (Plugin.pm) only for qcow2, Btrfs also for raw and subvolumes, LVM-thin, ZFS and
// Ceph RBD always, LVM (thick), iSCSI and anything not on a storage (a bind mount, a device) never.
func (s *Sim) volumeCanSnapshot(nodeName, volid string) bool {
	sid, volname, ok := splitVolID(volid)
	if !ok {
		return false
	}
	st := s.storage(sid)
	if st == nil {
		return false
	}
	format := formatFromName(volname)
	if v := s.lookupVolume(nodeName, volid); v != nil && v.format != "" {
		format = v.format
	}
	switch st.typ {
	case "dir", "nfs", "cifs", "glusterfs", "cephfs":
		return format == "qcow2"
	case "btrfs":
		return format == "qcow2" || format == "raw" || format == "subvol"
	case "lvmthin", "zfspool", "zfs", "rbd":
		return true
	}
	return false
}

// snapshotVolumes lists the volumes of a config a snapshot covers (foreach_volume: disks and mount
// points; cdroms, the cloud-init drive and unused disks are skipped) as key → volume id, in key order.
// A container's bind and device mounts are included: they have no storage and so block a snapshot.
func (s *Sim) snapshotVolumes(kind string, conf map[string]string) [][2]string {
	var out [][2]string
	for _, k := range slices.Sorted(maps.Keys(conf)) {
		if strings.HasPrefix(k, "unused") {
			continue
		}
		if kind == "qemu" && !isDrive(k) {
			continue
		}
		if kind == "lxc" && !reLXCMountKey.MatchString(k) {
			continue
		}
		volid, _, ok := s.volumeOfKey(kind, k, conf[k])
		if !ok || volid == "none" {
			continue
		}
		out = append(out, [2]string{k, volid})
	}
	return out
}

// guestCanSnapshot is has_feature('snapshot', $conf): every covered volume must support it.
func (s *Sim) guestCanSnapshot(g *guest) bool {
	for _, kv := range s.snapshotVolumes(g.kind, g.conf()) {
		if !s.volumeCanSnapshot(g.node, kv[1]) {
			return false
		}
	}
	return true
}

func kindOf(c *call) string {
	if strings.Contains(c.template, "/lxc/") {
		return "lxc"
	}
	return "qemu"
}

// snapshotWorker is the task of a snapshot action on guest vmid of a kind, on the request's node: its type
// is the action with qm (qemu) or vz (lxc) before it.
func snapshotWorker(c *call, kind, action string, vmid int) *taskSpec {
	prefix := "qm"
	if kind == "lxc" {
		prefix = "vz"
	}
	return &taskSpec{node: c.str("node"), typ: prefix + action, id: strconv.Itoa(vmid), user: c.user}
}

// handleSnapshotList is GET …/snapshot: every snapshot (name, snaptime, description, parent, snapstate,
// and vmstate for a VM) and a final "current" entry with the digest and whether the guest runs.
func (s *Sim) handleSnapshotList(c *call) (any, error) {
	kind := kindOf(c)
	g, err := s.guestOn(c, kind)
	if err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, n := range snapshotsSorted(g.file) {
		sec := g.file.snapshots[n].conf
		e := map[string]any{"name": n, "description": strings.TrimRight(sec["description"], "\n"),
			"snaptime": atoiDef(sec["snaptime"], 0)}
		if p := sec["parent"]; p != "" {
			e["parent"] = p
		}
		if st := sec["snapstate"]; st != "" {
			e["snapstate"] = st
		}
		if kind == "qemu" {
			e["vmstate"] = boolInt(sec["vmstate"] != "")
		}
		out = append(out, e)
	}
	cur := map[string]any{"name": "current", "description": "You are here!", "digest": g.digest(),
		"running": boolInt(g.running)}
	if p := g.conf()["parent"]; p != "" {
		cur["parent"] = p
	}
	return append(out, cur), nil
}

// handleSnapshotCmdIdx is GET …/snapshot/{snapname}: the sub-commands, whether or not the snapshot exists.
func (s *Sim) handleSnapshotCmdIdx(c *call) (any, error) {
	if _, err := s.guestOn(c, kindOf(c)); err != nil {
		return nil, err
	}
	return []map[string]string{{"cmd": "rollback"}, {"cmd": "config"}}, nil
}

// handleSnapshotConfigGet is GET …/snapshot/{snapname}/config: the snapshot's section.
func (s *Sim) handleSnapshotConfigGet(c *call) (any, error) {
	g, err := s.guestOn(c, kindOf(c))
	if err != nil {
		return nil, err
	}
	name := c.str("snapname")
	sec, ok := g.file.snapshots[name]
	if !ok {
		return nil, dieErr("snapshot '%s' does not exist", name)
	}
	out := map[string]any{"digest": g.digest()}
	for k, v := range sec.conf {
		out[k] = v
	}
	return out, nil
}

// handleSnapshotConfigPut is PUT …/snapshot/{snapname}/config: a new description, under the flock and
// refused while the guest is locked; without a description nothing happens.
func (s *Sim) handleSnapshotConfigPut(c *call) (any, error) {
	kind := kindOf(c)
	if _, ok := c.params["description"]; !ok {
		if _, err := s.guestOn(c, kind); err != nil {
			return nil, err
		}
		return nil, nil
	}
	g, h, err := s.lockedGuest(c, kind)
	if err != nil {
		return nil, err
	}
	defer h.release()
	name := c.str("snapname")
	sec, ok := g.file.snapshots[name]
	if !ok {
		return nil, dieErr("snapshot '%s' does not exist", name)
	}
	if d := c.str("description"); d != "" {
		sec.conf["description"] = d
	} else {
		delete(sec.conf, "description")
	}
	g.write()
	return nil, nil
}

// withFlock runs step under the guest's config flock (lock_config inside a worker), failing with PVE's
// timeout text when it cannot be had. The caller holds s.mu.
func (s *Sim) withFlock(kind string, vmid int, step func() error) error {
	f, err := s.acquireFlock(kind, vmid, false, s.lockTimeout("default"))
	if err != nil {
		return err
	}
	defer s.releaseFlock(f)
	return step()
}

// handleSnapshotCreate is POST …/snapshot (qmsnapshot / vzsnapshot). The worker's prepare step
// (__snapshot_prepare) refuses a template, a locked guest, a used name and a guest with a volume that
// cannot be snapshotted, then writes the new section with `snapstate: prepare` and `lock: snapshot`; the
// commit after the task's duration drops both and makes the snapshot the current config's parent. A task
// that fails after the prepare step removes the half-made snapshot again, as snapshot_create's cleanup
// does. vmstate=1 saves the RAM of a running VM only (a stopped VM's snapshot has none).
func (s *Sim) handleSnapshotCreate(c *call) (any, error) {
	kind := kindOf(c)
	g, err := s.guestOn(c, kind)
	if err != nil {
		return nil, err
	}
	name := c.str("snapname")
	if name == "current" {
		return nil, dieErr("unable to use snapshot name 'current' (reserved name)")
	}
	if strings.EqualFold(name, "pending") {
		return nil, dieErr("unable to use snapshot name 'pending' (reserved name)")
	}
	if kind == "lxc" && name == "vzdump" {
		return nil, dieErr("unable to use snapshot name 'vzdump' (reserved name)")
	}
	vmid, descr, cfgPath := g.vmid, c.str("description"), g.confPath()
	vmstate := kind == "qemu" && c.str("vmstate") == "1"
	prepared := false
	ts := snapshotWorker(c, kind, "snapshot", vmid)
	ts.prepare = func(l taskLog) error {
		return s.withFlock(kind, vmid, func() error {
			g, err := s.reloadGuest(vmid, cfgPath)
			if err != nil {
				return err
			}
			if g.conf()["template"] == "1" {
				return fmt.Errorf("you can't take a snapshot if it's a template")
			}
			if err := checkLock(g); err != nil {
				return err
			}
			if _, dup := g.file.snapshots[name]; dup {
				return fmt.Errorf("snapshot name '%s' already used", name)
			}
			if !s.guestCanSnapshot(g) {
				return fmt.Errorf("snapshot feature is not available")
			}
			for _, o := range g.file.snapshots {
				if o.conf["parent"] == name {
					l.printf("deleting parent '%s' reference from another snapshot to avoid bogus snapshot cycle.", name)
					delete(o.conf, "parent")
				}
			}
			sec := newSection()
			for k, v := range g.conf() {
				if k == "lock" || k == "description" || k == "snapstate" || k == "snaptime" || k == "vmstate" || strings.HasPrefix(k, "unused") {
					continue
				}
				sec.conf[k] = v
			}
			sec.lxc = append(sec.lxc, g.file.current.lxc...)
			if vmstate && g.running {
				sec.conf["vmstate"] = s.saveVMState(g, name)
			}
			sec.conf["snapstate"] = "prepare"
			sec.conf["snaptime"] = strconv.FormatInt(s.stampUnix(), 10)
			if descr != "" {
				sec.conf["description"] = descr
			}
			g.file.snapshots[name] = sec
			g.conf()["lock"] = "snapshot"
			g.write()
			prepared = true
			return nil
		})
	}
	ts.work = func(l taskLog) error {
		return s.withFlock(kind, vmid, func() error {
			g, sec, err := s.lockedSnapshot(vmid, cfgPath, name, "snapshot", "missing snapshot lock")
			if err != nil {
				return err
			}
			if sec.conf["snapstate"] != "prepare" {
				return fmt.Errorf("wrong snapshot state")
			}
			delete(sec.conf, "snapstate")
			delete(g.conf(), "lock")
			g.conf()["parent"] = name
			g.write()
			return nil
		})
	}
	ts.onFail = func() {
		g, ok := s.guests[vmid]
		if !prepared || !ok || g.conf()["lock"] != "snapshot" {
			return
		}
		// snapshot_create: "snapshot create failed: starting cleanup" → snapshot_delete(force).
		if sec, ok := g.file.snapshots[name]; ok {
			s.dropSnapshot(g, name, sec)
		}
		delete(g.conf(), "lock")
		g.write()
	}
	return s.spawn(ts), nil
}

// saveVMState allocates the RAM state volume of a running VM's snapshot (__snapshot_save_vmstate): on the
// vmstatestorage, else the storage of the VM's first disk, named vm-<vmid>-state-<snapshot>, sized twice
// the memory plus 500 MiB. It returns the volume id.
func (s *Sim) saveVMState(g *guest, name string) string {
	sid := g.conf()["vmstatestorage"]
	if sid == "" {
		for _, kv := range s.snapshotVolumes("qemu", g.conf()) {
			if id, _, ok := splitVolID(kv[1]); ok {
				sid = id
				break
			}
		}
	}
	st := s.storage(sid)
	if st == nil {
		st = s.storage("local")
	}
	if st == nil {
		return ""
	}
	volid := s.volidFor(st, g.vmid, fmt.Sprintf("vm-%d-state-%s", g.vmid, name), "raw")
	mem := int64(atoiDef(g.conf()["memory"], 2048))
	nodeName := g.node
	if st.shared {
		nodeName = ""
	}
	s.putVolume(&volume{volid: volid, storage: st.id, node: nodeName, content: "images", format: "raw",
		size: (mem*2 + 500) << 20, vmid: g.vmid})
	return volid
}

// lockedSnapshot is the reload that starts a snapshot worker's second step: the guest must still hold
// lock (else the step fails with wrongLock, PVE's words for it) and still have the snapshot name.
func (s *Sim) lockedSnapshot(vmid int, cfgPath, name, lock, wrongLock string) (*guest, *section, error) {
	g, err := s.reloadGuest(vmid, cfgPath)
	if err != nil {
		return nil, nil, err
	}
	if g.conf()["lock"] != lock {
		return nil, nil, errors.New(wrongLock)
	}
	sec, ok := g.file.snapshots[name]
	if !ok {
		return nil, nil, fmt.Errorf("snapshot '%s' does not exist", name)
	}
	return g, sec, nil
}

// dropSnapshot removes the snapshot name, whose section is sec, as snapshot_delete ends: its RAM state
// volume is freed and the snapshots and config that named it as their parent take its parent instead.
func (s *Sim) dropSnapshot(g *guest, name string, sec *section) {
	if vs := sec.conf["vmstate"]; vs != "" {
		s.deleteVolume(g.node, vs)
	}
	unlinkParent(g, name, sec.conf["parent"])
	delete(g.file.snapshots, name)
}

// unlinkParent points every reference to the snapshot name (the current config's and other snapshots')
// at its own parent instead, or drops it when it had none.
func unlinkParent(g *guest, name, parent string) {
	fix := func(conf map[string]string) {
		if conf["parent"] != name {
			return
		}
		if parent == "" {
			delete(conf, "parent")
		} else {
			conf["parent"] = parent
		}
	}
	for n, o := range g.file.snapshots {
		if n != name {
			fix(o.conf)
		}
	}
	fix(g.conf())
}

// handleSnapshotDelete is DELETE …/snapshot/{snapname} (qmdelsnapshot / vzdelsnapshot). The worker's
// prepare step (snapshot_delete) refuses a missing snapshot and a locked guest, then sets
// `lock: snapshot-delete` and `snapstate: delete`; after the task's duration the section goes, its
// children take its parent, its RAM state volume is freed and the lock is dropped. A task that fails
// between the two steps leaves the lock and the snapstate, as PVE does (delete again with force=1).
func (s *Sim) handleSnapshotDelete(c *call) (any, error) {
	kind := kindOf(c)
	g, err := s.guestOn(c, kind)
	if err != nil {
		return nil, err
	}
	vmid, name, cfgPath := g.vmid, c.str("snapname"), g.confPath()
	force := c.str("force") == "1"
	ts := snapshotWorker(c, kind, "delsnapshot", vmid)
	ts.prepare = func(l taskLog) error {
		g, err := s.reloadGuest(vmid, cfgPath)
		if err != nil {
			return err
		}
		if _, ok := g.file.snapshots[name]; !ok {
			return fmt.Errorf("snapshot '%s' does not exist", name)
		}
		return s.withFlock(kind, vmid, func() error {
			// set_lock: check_lock, then the lock. A forced delete of a snapshot whose earlier delete
			// failed finds its own lock.
			if !(force && g.conf()["lock"] == "snapshot-delete") {
				if err := checkLock(g); err != nil {
					return err
				}
			}
			if g.conf()["template"] == "1" {
				return fmt.Errorf("you can't delete a snapshot if vm is a template")
			}
			g.conf()["lock"] = "snapshot-delete"
			g.file.snapshots[name].conf["snapstate"] = "delete"
			g.write()
			return nil
		})
	}
	ts.work = func(l taskLog) error {
		return s.withFlock(kind, vmid, func() error {
			g, sec, err := s.lockedSnapshot(vmid, cfgPath, name, "snapshot-delete", "encountered invalid lock, expected 'snapshot-delete'")
			if err != nil {
				return err
			}
			s.dropSnapshot(g, name, sec)
			delete(g.conf(), "lock")
			g.write()
			return nil
		})
	}
	return s.spawn(ts), nil
}

// rollbackBlocker is __snapshot_rollback_vol_possible: ZFS rolls a volume back only to its most recent
// snapshot (ZFSPoolPlugin volume_rollback_is_possible); the other storages allow any.
func (s *Sim) rollbackBlocker(g *guest, name string) error {
	snap := g.file.snapshots[name]
	t := atoiDef(snap.conf["snaptime"], 0)
	for _, kv := range s.snapshotVolumes(g.kind, snap.conf) {
		sid, volname, ok := splitVolID(kv[1])
		if !ok {
			continue
		}
		if st := s.storage(sid); st == nil || (st.typ != "zfspool" && st.typ != "zfs") {
			continue
		}
		for n, o := range g.file.snapshots {
			if n == name || atoiDef(o.conf["snaptime"], 0) < t {
				continue
			}
			if atoiDef(o.conf["snaptime"], 0) == t && n < name {
				continue
			}
			for _, ov := range s.snapshotVolumes(g.kind, o.conf) {
				if ov[1] == kv[1] {
					return fmt.Errorf("can't rollback, '%s' is not most recent snapshot on '%s'", name, volname)
				}
			}
		}
	}
	return nil
}

// handleSnapshotRollback is POST …/snapshot/{snapname}/rollback (qmrollback / vzrollback). The prepare
// step (snapshot_rollback) refuses a template, a missing or incomplete snapshot, a volume that cannot go
// back (ZFS) and a locked guest, stops a running guest and sets `lock: rollback`; after the task's duration
// the snapshot's config becomes the current one (its description and unused disks stay; disks the
// snapshot does not have become unused), its parent is the snapshot, and the lock goes. A VM whose
// snapshot has RAM starts again; with start=1 any guest does. A task that fails between the two steps
// leaves the guest stopped with `lock: rollback`, as PVE does.
func (s *Sim) handleSnapshotRollback(c *call) (any, error) {
	kind := kindOf(c)
	g, err := s.guestOn(c, kind)
	if err != nil {
		return nil, err
	}
	vmid, name, cfgPath := g.vmid, c.str("snapname"), g.confPath()
	start := c.str("start") == "1"
	ts := snapshotWorker(c, kind, "rollback", vmid)
	ts.prepare = func(l taskLog) error {
		return s.withFlock(kind, vmid, func() error {
			g, err := s.reloadGuest(vmid, cfgPath)
			if err != nil {
				return err
			}
			if g.conf()["template"] == "1" {
				return fmt.Errorf("you can't rollback if vm is a template")
			}
			snap, ok := g.file.snapshots[name]
			if !ok {
				return fmt.Errorf("snapshot '%s' does not exist", name)
			}
			if err := s.rollbackBlocker(g, name); err != nil {
				return err
			}
			if st := snap.conf["snapstate"]; st != "" {
				return fmt.Errorf("unable to rollback to incomplete snapshot (snapstate = %s)", st)
			}
			if err := checkLock(g); err != nil {
				return err
			}
			if g.running {
				g.running, g.qmpstatus = false, ""
				if g.ha {
					g.haState = "stopped"
				}
			}
			g.conf()["lock"] = "rollback"
			g.write()
			return nil
		})
	}
	ts.work = func(l taskLog) error {
		err := s.withFlock(kind, vmid, func() error {
			g, err := s.reloadGuest(vmid, cfgPath)
			if err != nil {
				return err
			}
			snap, ok := g.file.snapshots[name]
			if !ok {
				return fmt.Errorf("snapshot '%s' does not exist", name)
			}
			if g.conf()["lock"] != "rollback" {
				return fmt.Errorf("got wrong lock")
			}
			s.applySnapshot(g, snap)
			g.conf()["parent"] = name
			g.file.pending = nil
			g.write()
			return nil
		})
		if err != nil {
			return err
		}
		g, err := s.reloadGuest(vmid, cfgPath)
		if err != nil {
			return err
		}
		hasState := g.file.snapshots[name].conf["vmstate"] != ""
		if (hasState || start) && !g.running {
			if kind == "qemu" {
				return s.qemuStartNow(g, l)
			}
			if err := lxcConfigCheck(g); err != nil {
				return fmt.Errorf("missing 'rootfs' configuration")
			}
			g.running = true
		}
		return nil
	}
	return s.spawn(ts), nil
}

// applySnapshot is __snapshot_apply_config after __snapshot_rollback_get_unused: the current config takes
// the snapshot's keys, keeps its description and unused disks, and records as unused the volumes only the
// current config had.
func (s *Sim) applySnapshot(g *guest, snap *section) {
	old := g.conf()
	inSnap := map[string]bool{}
	for _, kv := range s.snapshotVolumes(g.kind, snap.conf) {
		inSnap[kv[1]] = true
	}
	next := map[string]string{}
	for k, v := range old {
		if strings.HasPrefix(k, "unused") || k == "description" {
			next[k] = v
		}
	}
	for k, v := range snap.conf {
		switch {
		case k == "snapstate" || k == "snaptime" || k == "vmstate" || k == "lock" || k == "description" || strings.HasPrefix(k, "unused"):
			continue
		}
		next[k] = v
	}
	used := map[string]bool{}
	for k, v := range next {
		if strings.HasPrefix(k, "unused") {
			used[v] = true
		}
	}
	for _, kv := range s.snapshotVolumes(g.kind, old) {
		if inSnap[kv[1]] || used[kv[1]] {
			continue
		}
		if _, _, ok := splitVolID(kv[1]); !ok {
			continue // a bind mount is not a volume
		}
		for i := 0; i < 256; i++ {
			k := "unused" + strconv.Itoa(i)
			if _, taken := next[k]; !taken {
				next[k] = kv[1]
				used[kv[1]] = true
				break
			}
		}
	}
	g.file.current.conf = next
	g.file.current.lxc = append([][2]string(nil), snap.lxc...)
}
