package pvesim

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Migration between the cluster's nodes: qemu-server src/PVE/API2/Qemu.pm migrate_vm_precondition and
// migrate_vm with src/PVE/QemuMigrate.pm (prepare, scan_local_volumes, phase1/2/3), pve-container
// src/PVE/API2/LXC.pm migrate_vm with src/PVE/LXC/Migrate.pm. The API handler runs PVE's early checks and
// forks the worker (qmigrate / vzmigrate, id = the vmid); the worker sets `lock: migrate` at once (phase1
// does so after prepare in PVE), runs prepare's and the volume scan's checks, copies the local volumes to the
// target and moves the config into the target node's directory. A worker that fails leaves the guest on the
// source without the lock, as phase1_cleanup does.

// migratableLocalTypes are the storage types scan_local_volumes copies between nodes.
var migratableLocalTypes = set("dir", "btrfs", "zfspool", "lvmthin", "lvm")

// migrateBytesPerBase is how many bytes of copied volume or transferred memory add one task-type duration to
// a migration task, so that a migration's length follows the data it moves.
const migrateBytesPerBase = 16 << 30

// nodeIP is the made-up address a node's migration log names.
func (s *Sim) nodeIP(name string) string {
	for i, n := range s.nodes {
		if n.name == name {
			return fmt.Sprintf("10.0.0.%d", 11+i)
		}
	}
	return "10.0.0.1"
}

// localResources is check_local_resources: the passthrough devices and host-bound keys that tie a VM to its
// node, and those of them that use a cluster-wide mapping.
func localResources(conf map[string]string) (local, mapped []string) {
	for _, k := range slices.Sorted(maps.Keys(conf)) {
		v := conf[k]
		var bound bool
		switch {
		case reIndexedKey("hostpci").MatchString(k):
			bound = true
		case reIndexedKey("usb").MatchString(k):
			bound = !strings.Contains(v, "spice")
		case reIndexedKey("serial").MatchString(k), reIndexedKey("parallel").MatchString(k):
			bound = strings.HasPrefix(v, "/dev/")
		case k == "ivshmem" || k == "amd-sev" || k == "intel-tdx":
			bound = true
		}
		if !bound {
			continue
		}
		local = append(local, k)
		if strings.Contains(v, "mapping=") {
			mapped = append(mapped, k)
		}
	}
	return local, mapped
}

var indexedKeyRes = map[string]*regexp.Regexp{}

func reIndexedKey(prefix string) *regexp.Regexp {
	if re, ok := indexedKeyRes[prefix]; ok {
		return re
	}
	re := regexp.MustCompile(`^` + prefix + `\d+$`)
	indexedKeyRes[prefix] = re
	return re
}

// migVolume is one volume of a guest as the migration code sees it.
type migVolume struct {
	key, volid string
	storage    *storage
	size       int64
	cdrom      bool // a CD-ROM image (an ISO); the cloud-init drive is not one
	cloudinit  bool
	unused     bool
}

// guestVolumes are the volumes a guest's current config references, in key order (foreach_volid).
func (s *Sim) guestVolumes(g *guest) []migVolume {
	var out []migVolume
	for _, k := range slices.Sorted(maps.Keys(g.conf())) {
		v := g.conf()[k]
		mv := migVolume{key: k, unused: strings.HasPrefix(k, "unused")}
		switch {
		case mv.unused:
			mv.volid = v
		case g.kind == "qemu" && isDrive(k):
			d, err := parsePropertyString(s.qemuDesc.prop(k).FormatObject, v, k)
			if err != nil {
				continue
			}
			mv.volid = d["file"]
			mv.cdrom = d["media"] == "cdrom"
			mv.cloudinit = isCloudInitVolume(mv.volid)
			if mv.cloudinit {
				mv.cdrom = false
			}
			size, _ := parseSize(d["size"])
			mv.size = size
		case g.kind == "lxc" && (k == "rootfs" || reIndexedKey("mp").MatchString(k)):
			d, err := parsePropertyString(s.lxcDesc.prop(k).FormatObject, v, k)
			if err != nil {
				continue
			}
			mv.volid = d["volume"]
			size, _ := parseSize(d["size"])
			mv.size = size
		default:
			continue
		}
		if mv.volid == "" || mv.volid == "none" || mv.volid == "cdrom" {
			continue
		}
		sid, _, ok := splitVolID(mv.volid)
		if !ok {
			continue // a path: a bind mount or a device
		}
		mv.storage = s.storage(sid)
		if mv.storage == nil {
			continue
		}
		mv.size = s.volumeSize(g.node, mv.volid, mv.size)
		out = append(out, mv)
	}
	return out
}

// storageUsable is storage_check_enabled on a node.
func (st *storage) usableOn(nodeName string) bool { return st.onNode(nodeName) && !st.disabled }

// handleQemuMigratePrecondition is GET …/qemu/{vmid}/migrate (migrate_vm_precondition): whether the VM runs,
// its local disks and local resources, and (for a stopped VM) the nodes whose storages hold all its volumes.
func (s *Sim) handleQemuMigratePrecondition(c *call) (any, error) {
	g, err := s.guestOn(c, "qemu")
	if err != nil {
		return nil, err
	}
	if t := c.str("target"); t != "" && s.node(t) == nil {
		return nil, dieErr("no such cluster node '%s'", t)
	}
	local, mapped := localResources(g.conf())
	res := map[string]any{"running": g.running, "local_resources": nonNil(local), "mapped-resources": nonNil(mapped),
		"mapped-resource-info": map[string]any{}, "has-dbus-vmstate": false, "dependent-ha-resources": []string{}}
	disks := []map[string]any{}
	for _, v := range s.guestVolumes(g) {
		if v.storage.shared || v.cloudinit {
			continue
		}
		d := map[string]any{"volid": v.volid, "size": v.size}
		if v.cdrom {
			d["cdrom"] = true
		}
		if v.unused {
			d["is_unused"] = true
		}
		disks = append(disks, d)
	}
	res["local_disks"] = disks
	if !g.running {
		allowed, notAllowed := s.storageNodes(g)
		res["allowed_nodes"], res["not_allowed_nodes"] = allowed, notAllowed
	}
	return res, nil
}

// storageNodes is check_local_storage_availability: for each other node, the storages of the guest's
// volumes it lacks.
func (s *Sim) storageNodes(g *guest) ([]string, map[string]any) {
	allowed := []string{}
	notAllowed := map[string]any{}
	vols := s.guestVolumes(g)
	for _, n := range s.nodes {
		if n.name == g.node {
			continue
		}
		var missing []string
		for _, v := range vols {
			if !v.storage.usableOn(n.name) && !slices.Contains(missing, v.storage.id) {
				missing = append(missing, v.storage.id)
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			notAllowed[n.name] = map[string]any{"unavailable_storages": missing}
			continue
		}
		allowed = append(allowed, n.name)
	}
	return allowed, notAllowed
}

// handleLXCMigratePrecondition is GET …/lxc/{vmid}/migrate: whether the container runs and which nodes have
// its storages.
func (s *Sim) handleLXCMigratePrecondition(c *call) (any, error) {
	g, err := s.guestOn(c, "lxc")
	if err != nil {
		return nil, err
	}
	if t := c.str("target"); t != "" && s.node(t) == nil {
		return nil, dieErr("no such cluster node '%s'", t)
	}
	allowed, notAllowed := s.storageNodes(g)
	return map[string]any{"running": g.running, "allowed-nodes": allowed, "not-allowed-nodes": notAllowed,
		"dependent-ha-resources": []string{}}, nil
}

func nonNil(a []string) []string {
	if a == nil {
		return []string{}
	}
	return a
}

// migration is one migration request carried from the handler's checks into the worker.
type migration struct {
	c          *call
	kind       string
	vmid       int
	source     string
	target     string
	online     bool
	restart    bool
	localDisks bool
	// storageMap maps source storages to target storages (targetstorage / target-storage); def applies to
	// every storage not listed, identity maps each to itself.
	storageMap map[string]string
	def        string
	start      time.Time
}

// checkVolumeTarget is the worker's storage check of one volume: its storage, mapped when it is local, must
// be available on the target node.
func (s *Sim) checkVolumeTarget(m *migration, v migVolume) error {
	tsid := v.storage.id
	if !v.storage.shared {
		tsid = m.mapStorage(tsid)
	}
	if st := s.storage(tsid); st == nil || !st.usableOn(m.target) {
		return fmt.Errorf("storage '%s' is not available on node '%s'", tsid, m.target)
	}
	return nil
}

// mapStorage is JSONSchema map_id for a local volume's storage.
func (m *migration) mapStorage(sid string) string {
	if t, ok := m.storageMap[sid]; ok {
		return t
	}
	if m.def != "" {
		return m.def
	}
	return sid
}

// parseStorageMap is parse_idmap for pve-storage-id: "a:b,c:d", a single default id, or "1" for identity.
func parseStorageMap(v string) (map[string]string, string, error) {
	out := map[string]string{}
	def := ""
	for _, e := range splitList(v) {
		if e == "1" {
			continue
		}
		src, dst, ok := strings.Cut(e, ":")
		if !ok {
			if def != "" {
				return nil, "", fmt.Errorf("default target ID specified more than once")
			}
			def = e
			continue
		}
		if _, dup := out[src]; dup {
			return nil, "", fmt.Errorf("duplicate mapping for source '%s'", src)
		}
		out[src] = dst
	}
	return out, def, nil
}

// newMigration is the checks both migrate_vm variants run first: the target node, the guest and its lock.
// It returns the migration with the online flag the request asks for.
func (s *Sim) newMigration(c *call, kind string) (*migration, *guest, error) {
	target := c.str("target")
	if target == c.str("node") {
		return nil, nil, paramErr(map[string]string{"target": "target is local node."})
	}
	if s.node(target) == nil {
		return nil, nil, dieErr("no such cluster node '%s'", target)
	}
	g, err := s.guestOn(c, kind)
	if err != nil {
		return nil, nil, err
	}
	if err := checkLock(g); err != nil {
		return nil, nil, dieErr("%s", err.Error())
	}
	m := &migration{c: c, kind: kind, vmid: g.vmid, source: g.node, target: target, online: c.str("online") == "1"}
	return m, g, nil
}

// checkTargetStorages is migrate_vm's storage checks: each mapped target storage must be enabled on the
// target and hold guest images; without a map every storage of the guest must exist there
// (check_storage_availability).
func (s *Sim) checkTargetStorages(m *migration, g *guest, param string) error {
	if v := m.c.str(param); v != "" {
		smap, def, err := parseStorageMap(v)
		if err != nil {
			return paramErr(map[string]string{param: "failed to parse storage map: " + err.Error()})
		}
		m.storageMap, m.def = smap, def
		targets := slices.Sorted(maps.Values(smap))
		if def != "" {
			targets = append(targets, def)
		}
		content := "images"
		if g.kind == "lxc" {
			content = "rootdir"
		}
		for _, sid := range targets {
			st := s.storage(sid)
			if st == nil {
				return dieErr("storage '%s' does not exist", sid)
			}
			if !st.usableOn(m.target) {
				return dieErr("storage '%s' is not available on node '%s'", sid, m.target)
			}
			if !st.content[content] {
				if content == "images" {
					return dieErr("storage '%s' does not support vm images", sid)
				}
				return dieErr("storage '%s' does not support container directories", sid)
			}
		}
		return nil
	}
	for _, v := range s.guestVolumes(g) {
		if v.cdrom {
			continue
		}
		if !v.storage.usableOn(m.target) {
			return dieErr("storage '%s' is not available on node '%s'", v.storage.id, m.target)
		}
	}
	return nil
}

// handleQemuMigrate is POST …/qemu/{vmid}/migrate.
func (s *Sim) handleQemuMigrate(c *call) (any, error) {
	m, g, err := s.newMigration(c, "qemu")
	if err != nil {
		return nil, err
	}
	m.localDisks = c.str("with-local-disks") == "1"
	var warn string
	if g.running {
		if !m.online {
			return nil, dieErr("can't migrate running VM without --online")
		}
	} else if m.online {
		warn = "VM isn't running. Doing offline migration instead."
		m.online = false
	}
	return s.startMigration(m, g, "targetstorage", warn)
}

// handleLXCMigrate is POST …/lxc/{vmid}/migrate.
func (s *Sim) handleLXCMigrate(c *call) (any, error) {
	m, g, err := s.newMigration(c, "lxc")
	if err != nil {
		return nil, err
	}
	m.restart = c.str("restart") == "1"
	if g.running && !m.online && !m.restart {
		return nil, dieErr("can't migrate running container without --online or --restart")
	}
	return s.startMigration(m, g, "target-storage", "")
}

// startMigration is the end both migrate_vm variants share: the target storages (mapped by the request's
// parameter storageParam) are checked, then an HA-managed guest is moved by the HA manager and any other
// by a migration worker.
func (s *Sim) startMigration(m *migration, g *guest, storageParam, warn string) (any, error) {
	if err := s.checkTargetStorages(m, g, storageParam); err != nil {
		return nil, err
	}
	if g.ha && g.haState != "ignored" {
		return s.haMigrate(m.c, g, m.target), nil
	}
	return s.spawnMigration(m, g, warn), nil
}

// haMigrate answers a migration of an HA-managed guest: a hamigrate task that asks the HA manager, which
// moves the guest shortly after.
func (s *Sim) haMigrate(c *call, g *guest, target string) string {
	vmid := g.vmid
	return s.startTask(c.str("node"), "hamigrate", strconv.Itoa(vmid), c.user, func(l taskLog) error {
		l.printf("Requesting HA migration for %s %d to node %s", g.typeWord(), vmid, target)
		s.after(s.haDelay, func() {
			g, ok := s.guests[vmid]
			if !ok || !g.ha || g.conf()["lock"] != "" || g.node == target {
				return
			}
			vols := s.guestVolumes(g)
			for _, v := range vols {
				if !v.storage.shared {
					return // the HA manager's migration fails on local volumes; the guest stays
				}
			}
			g.node = target
			g.write()
		})
		return nil
	})
}

// migrationExtra is the time a migration adds to its task type's duration for the data it moves.
func (s *Sim) migrationExtra(m *migration, g *guest) time.Duration {
	var bytes int64
	for _, v := range s.guestVolumes(g) {
		if !v.storage.shared && !v.cdrom {
			bytes += v.size
		}
	}
	if m.online && g.running {
		bytes += memoryMiB(g.conf(), 512) << 20
	}
	base, ok := s.durations[m.taskType()]
	if !ok {
		base = s.durations["default"]
	}
	return time.Duration(float64(base) * float64(bytes) / float64(migrateBytesPerBase))
}

func (m *migration) taskType() string {
	if m.kind == "lxc" {
		return "vzmigrate"
	}
	return "qmigrate"
}

// spawnMigration forks the migration worker: the guest gets `lock: migrate` at once; the worker (which
// holds the guest's flock, as guest_migration_lock and lock_config do) runs the checks and moves it. A
// failure in or before the work removes the lock and leaves the guest on the source.
func (s *Sim) spawnMigration(m *migration, g *guest, warn string) string {
	m.start = time.Now()
	vmid := g.vmid
	g.conf()["lock"] = "migrate"
	g.write()
	ts := &taskSpec{node: m.source, typ: m.taskType(), id: strconv.Itoa(vmid), user: m.c.user,
		lockKind: m.kind, lockVMID: vmid, lockTimeout: s.lockTimeout("default"), extraDelay: s.migrationExtra(m, g)}
	ts.work = func(l taskLog) error {
		if warn != "" {
			l.printf("%s", warn)
		}
		g, ok := s.guests[vmid]
		if !ok || g.node != m.source {
			return fmt.Errorf("Configuration file '%s' does not exist", (&guest{vmid: vmid, kind: m.kind, node: m.source}).confPath())
		}
		if m.kind == "lxc" {
			return s.migrateContainer(m, g, l)
		}
		return s.migrateVM(m, g, l)
	}
	ts.onFail = func() {
		if g, ok := s.guests[vmid]; ok && g.node == m.source && g.conf()["lock"] == "migrate" {
			delete(g.conf(), "lock")
			g.write()
		}
	}
	return s.spawn(ts)
}

func (s *Sim) logStart(m *migration, g *guest, l taskLog) {
	l.printf("%s INFO: starting migration of %s %d to node '%s' (%s)", stamp(), g.typeWord(), g.vmid, m.target, s.nodeIP(m.target))
}

func stamp() string { return time.Now().Format("2006-01-02 15:04:05") }

// migrateVM is QemuMigrate's prepare, phase1 (scan and copy the local volumes), phase2 (the live transfer)
// and phase3 (the config moves to the target).
func (s *Sim) migrateVM(m *migration, g *guest, l taskLog) error {
	if s.node(m.target).offline {
		return fmt.Errorf("Can't connect to destination address using public key")
	}
	if g.running && !m.online {
		return fmt.Errorf("can't migrate running VM without --online")
	}
	local, mapped := localResources(g.conf())
	var blocking []string
	for _, k := range local {
		if !slices.Contains(mapped, k) {
			blocking = append(blocking, k)
		}
	}
	if len(blocking) > 0 {
		return fmt.Errorf("can't migrate VM which uses local devices: %s", strings.Join(blocking, ", "))
	}
	if len(mapped) > 0 && g.running {
		return fmt.Errorf("can't live migrate running VM which uses following mapped devices: %s", strings.Join(mapped, ", "))
	}
	vols := s.guestVolumes(g)
	for _, v := range vols {
		if err := s.checkVolumeTarget(m, v); err != nil {
			return err
		}
	}
	s.logStart(m, g, l)
	errs, err := s.scanLocalVolumes(m, g, vols, l)
	if err != nil {
		return err
	}
	if len(errs) > 0 {
		for _, e := range errs {
			l.printf("%s WARN: %s", stamp(), e)
		}
		return fmt.Errorf("Problem found while scanning volumes - can't migrate VM - check log")
	}
	moved, err := s.copyLocalVolumes(m, g, vols, l)
	if err != nil {
		return err
	}
	if g.running {
		mem := memoryMiB(g.conf(), 512) << 20
		l.printf("%s INFO: starting VM %d on remote node '%s'", stamp(), g.vmid, m.target)
		l.printf("%s INFO: start remote tunnel", stamp())
		l.printf("%s INFO: ssh tunnel ver 1", stamp())
		l.printf("%s INFO: starting online/live migration on unix:/run/qemu-server/%d.migrate", stamp(), g.vmid)
		l.printf("%s INFO: set migration capabilities", stamp())
		l.printf("%s INFO: migration downtime limit: 100 ms", stamp())
		l.printf("%s INFO: migration cachesize: %s", stamp(), humanBytes(mem/8))
		l.printf("%s INFO: set migration parameters", stamp())
		l.printf("%s INFO: start migrate command to unix:/run/qemu-server/%d.migrate", stamp(), g.vmid)
		l.printf("%s INFO: migration active, transferred %s of %s VM-state, 1.1 GiB/s", stamp(), humanBytes(mem/2), humanBytes(mem))
		l.printf("%s INFO: average migration speed: 1.1 GiB/s - downtime 41 ms", stamp())
		l.printf("%s INFO: migration completed, transferred %s VM-state", stamp(), humanBytes(mem))
		l.printf("%s INFO: migration status: completed", stamp())
	}
	s.finishMove(m, g, moved)
	if g.running {
		g.startedAt = time.Now()
		s.nextPID++
	}
	l.printf("%s INFO: migration finished successfully (duration %s)", stamp(), clockDuration(time.Since(m.start)))
	return nil
}

// scanLocalVolumes is scan_local_volumes: each local volume must be copyable; the problems it finds per
// volume are returned for the log, a fatal one as the error.
func (s *Sim) scanLocalVolumes(m *migration, g *guest, vols []migVolume, l taskLog) ([]string, error) {
	var errs []string
	refs := s.snapshotRefs(g)
	for _, v := range vols {
		if v.storage.shared {
			continue
		}
		why := ""
		switch {
		case v.cdrom:
			why = "local cdrom image"
		case m.online && g.running && !v.unused && !v.cloudinit && !m.localDisks:
			why = "can't live migrate attached local disks without with-local-disks option"
		case refs[v.volid] && !v.cloudinit:
			why = s.vmSnapshotProblem(m, g, v)
		}
		if why == "" && s.baseInUse(v.volid) {
			why = "referenced by linked clone(s)"
		}
		if why != "" {
			errs = append(errs, fmt.Sprintf("can't migrate local disk '%s': %s", v.volid, why))
			continue
		}
		switch {
		case v.cloudinit:
			l.printf("%s INFO: found generated disk '%s' (in current VM config)", stamp(), v.volid)
		case v.unused:
			l.printf("%s INFO: found local disk '%s' (unused)", stamp(), v.volid)
		default:
			l.printf("%s INFO: found local disk '%s' (attached)", stamp(), v.volid)
		}
	}
	if len(errs) > 0 {
		return errs, nil
	}
	for _, v := range vols {
		if v.storage.shared {
			continue
		}
		if !migratableLocalTypes[v.storage.typ] {
			return nil, fmt.Errorf("Problem found while scanning volumes - can't migrate '%s' - storage type '%s' not supported", v.volid, v.storage.typ)
		}
		if vol := s.lookupVolume(g.node, v.volid); vol != nil && vol.parent != "" {
			return nil, fmt.Errorf("Problem found while scanning volumes - can't migrate '%s' as it's a clone of '%s'", v.volid, vol.parent)
		}
	}
	return nil, nil
}

// snapshotRefs are the volumes the guest's snapshots reference (foreach_volid's referenced_in_snapshot).
func (s *Sim) snapshotRefs(g *guest) map[string]bool {
	refs := map[string]bool{}
	for _, sec := range g.file.snapshots {
		for _, kv := range s.snapshotVolumes(g.kind, sec.conf) {
			refs[kv[1]] = true
		}
	}
	return refs
}

// vmSnapshotProblem is scan_local_volumes' check of a local volume a snapshot references: a running VM's
// live copy (NBD mirror) cannot take snapshots along, and offline only ZFS, raw Btrfs and qcow2 volumes
// carry them (storage_migrate with_snapshots). Empty when the volume can move with its snapshots.
func (s *Sim) vmSnapshotProblem(m *migration, g *guest, v migVolume) string {
	if g.running && m.online {
		return "online storage migration not possible if non-replicated snapshot exists"
	}
	format := formatFromName(volumeName(v.volid))
	if vol := s.lookupVolume(g.node, v.volid); vol != nil && vol.format != "" {
		format = vol.format
	}
	if v.storage.typ == "zfspool" || v.storage.typ == "btrfs" && format == "raw" || format == "qcow2" {
		return ""
	}
	return "non-migratable snapshot exists"
}

// ctSnapshotProblems is LXC::Migrate phase1's check of the local volumes the container's snapshots
// reference: only ZFS and Btrfs take snapshots along. It returns the warnings PVE logs, by volume.
func (s *Sim) ctSnapshotProblems(g *guest, vols []migVolume) []string {
	refs := s.snapshotRefs(g)
	var out []string
	for _, v := range vols {
		if v.storage.shared || !refs[v.volid] || v.storage.typ == "zfspool" || v.storage.typ == "btrfs" {
			continue
		}
		out = append(out, fmt.Sprintf("can't migrate local volume '%s': non-migratable snapshot exists", v.volid))
	}
	slices.Sort(out)
	return out
}

// copyLocalVolumes is storage_migrate for every local volume (and the NBD mirror of a running VM's attached
// disks): each is copied to its target storage on the target node, under the same name when it is free
// there. It returns the volume map old → new.
func (s *Sim) copyLocalVolumes(m *migration, g *guest, vols []migVolume, l taskLog) (map[string]string, error) {
	moved := map[string]string{}
	first := true
	for _, v := range vols {
		if v.storage.shared {
			continue
		}
		dst := s.storage(m.mapStorage(v.storage.id))
		old := s.lookupVolume(g.node, v.volid)
		newVolid := v.volid
		_, volname, _ := splitVolID(v.volid)
		name := volname[strings.LastIndex(volname, "/")+1:]
		if dst.id != v.storage.id || s.lookupVolume(m.target, v.volid) != nil {
			format := "raw"
			if old != nil && dst.fileBased() {
				format = old.format
			}
			prefix := "vm"
			if strings.HasPrefix(name, "subvol-") {
				prefix, format = "subvol", "subvol"
			}
			newVolid = s.volidFor(dst, g.vmid, s.freeDiskName(dst, m.target, g.vmid, prefix), format)
			if v.cloudinit {
				newVolid = s.volidFor(dst, g.vmid, fmt.Sprintf("vm-%d-cloudinit", g.vmid), format)
			}
		}
		if float64(v.size) > float64(dst.total)-float64(s.storageUsed(dst, m.target)) {
			return nil, fmt.Errorf("storage migration for '%s' to storage '%s' failed - %s", v.volid, dst.id,
				allocTooLarge(dst, g.vmid, name, float64(v.size)).Error())
		}
		if g.running && m.online && !v.unused && !v.cloudinit {
			if first {
				l.printf("%s INFO: starting storage migration", stamp())
				first = false
			}
			l.printf("%s INFO: %s: start migration to nbd:unix:/run/qemu-server/%d_nbd.migrate:exportname=drive-%s", stamp(), v.key, g.vmid, v.key)
			l.printf("drive mirror is starting for drive-%s", v.key)
			l.printf("drive-%s: transferred %s of %s (100.00%%) in 1s", v.key, humanBytes(v.size), humanBytes(v.size))
			l.printf("drive-%s: mirror-job finished", v.key)
		} else {
			if first {
				l.printf("%s INFO: copying local disk images", stamp())
				first = false
			}
			l.printf("%s INFO: %s", stamp(), humanBytes(v.size)+" copied")
			l.printf("%s INFO: volume '%s' is '%s' on the target", stamp(), v.volid, newVolid)
		}
		nv := &volume{volid: newVolid, storage: dst.id, node: m.target, content: "images", format: "raw", size: v.size, vmid: g.vmid}
		if old != nil {
			cp := *old
			nv.content, nv.format, nv.virtualSize = cp.content, cp.format, cp.virtualSize
			nv.data, nv.path = cp.data, cp.path
		}
		if g.kind == "lxc" {
			nv.content = "rootdir"
		}
		if dst.fileBased() {
			_, nv.format, _, _ = classifyVolname(dst, volumeName(newVolid))
		} else if nv.format != "subvol" {
			nv.format = "raw"
		}
		s.putVolume(nv)
		s.deleteVolume(g.node, v.volid)
		if newVolid != v.volid {
			moved[v.volid] = newVolid
		}
	}
	return moved, nil
}

func volumeName(volid string) string {
	_, name, _ := splitVolID(volid)
	return name
}

// finishMove is phase3: the volume ids are rewritten and the config moves into the target node's
// directory without the lock.
func (s *Sim) finishMove(m *migration, g *guest, moved map[string]string) {
	for k, v := range g.conf() {
		for old, nw := range moved {
			if strings.Contains(v, old) {
				g.conf()[k] = strings.Replace(v, old, nw, 1)
			}
		}
	}
	delete(g.conf(), "lock")
	g.node = m.target
	g.write()
}

// migrateContainer is LXC::Migrate: prepare, phase1 (a running container is shut down in restart mode, the
// local volumes are copied, the config moves) and phase3 (restart on the target).
func (s *Sim) migrateContainer(m *migration, g *guest, l taskLog) error {
	if s.node(m.target).offline {
		return fmt.Errorf("Can't connect to destination address using public key")
	}
	running := g.running
	if running {
		if m.online {
			return fmt.Errorf("lxc live migration is currently not implemented")
		}
		if !m.restart {
			return fmt.Errorf("running container can only be migrated in restart mode")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(g.conf())) {
		if !reIndexedKey("mp").MatchString(k) {
			continue
		}
		d, err := parsePropertyString(s.lxcDesc.prop(k).FormatObject, g.conf()[k], k)
		if err == nil && strings.HasPrefix(d["volume"], "/") && d["shared"] != "1" {
			return fmt.Errorf("cannot migrate local bind mount point '%s'", k)
		}
	}
	vols := s.guestVolumes(g)
	for _, v := range vols {
		if err := s.checkVolumeTarget(m, v); err != nil {
			return err
		}
		if !v.storage.shared && !migratableLocalTypes[v.storage.typ] {
			return fmt.Errorf("can't migrate '%s' - storage type '%s' not supported", v.volid, v.storage.typ)
		}
	}
	s.logStart(m, g, l)
	if running {
		timeout := atoiDef(m.c.str("timeout"), 180)
		l.printf("%s INFO: shutdown CT %d", stamp(), g.vmid)
		if g.ignoreACPI {
			l.printf("%s WARN: container did not stop within %d seconds - forcing stop", stamp(), timeout)
		}
		g.running = false
		s.applyPending(g)
	}
	for _, v := range vols {
		if !v.storage.shared {
			l.printf("%s INFO: found local volume '%s' (in current VM config)", stamp(), v.volid)
		}
	}
	if problems := s.ctSnapshotProblems(g, vols); len(problems) > 0 {
		for _, p := range problems {
			l.printf("%s WARN: %s", stamp(), p)
		}
		if running {
			l.printf("%s INFO: start container on source node", stamp())
			g.running, g.startedAt = true, time.Now()
		}
		return fmt.Errorf("can't migrate CT - check log")
	}
	m.online = false
	moved, err := s.copyLocalVolumes(m, g, vols, l)
	if err != nil {
		if running {
			g.running, g.startedAt = true, time.Now()
		}
		return err
	}
	s.finishMove(m, g, moved)
	l.printf("%s INFO: start final cleanup", stamp())
	if running {
		l.printf("%s INFO: start container on target node", stamp())
		l.printf("%s INFO: # /usr/bin/ssh -e none -o 'BatchMode=yes' -o 'HostKeyAlias=%s' root@%s pct start %d", stamp(), m.target, s.nodeIP(m.target), g.vmid)
		g.running, g.startedAt = true, time.Now()
	}
	l.printf("%s INFO: migration finished successfully (duration %s)", stamp(), clockDuration(time.Since(m.start)))
	return nil
}

// humanBytes is PVE::Format render_bytes: binary units with two decimals.
func humanBytes(b int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f := float64(b)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", b)
	}
	return fmt.Sprintf("%.2f %s", f, units[i])
}

// clockDuration is AbstractMigrate's HH:MM:SS duration.
func clockDuration(d time.Duration) string {
	sec := int(d.Seconds())
	return fmt.Sprintf("%02d:%02d:%02d", sec/3600, sec/60%60, sec%60)
}
