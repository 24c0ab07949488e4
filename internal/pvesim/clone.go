package pvesim

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/pvesim/schema"
)

// Clones: qemu-server src/PVE/API2/Qemu.pm clone_vm (task qmclone, id = the source vmid) and pve-container
// src/PVE/API2/LXC.pm clone_vm (task vzclone), with QemuServer.pm clone_disk and pve-storage
// vdisk_clone / vdisk_create_base for the volumes.

// qemuCloneSkip are the keys clone_vm never copies (besides unusedN).
var qemuCloneSkip = set("snapshots", "parent", "snaptime", "vmstate", "snapstate", "runningcpu", "runningmachine",
	"running-nets-host-mtu", "template", "lock")

// isBaseVolid reports whether a volume id names a base volume (its last path component starts with base-).
func isBaseVolid(volid string) bool {
	_, volname, ok := splitVolID(volid)
	if !ok {
		return false
	}
	return strings.HasPrefix(volname[strings.LastIndex(volname, "/")+1:], "base-")
}

// freeDiskName is find_free_diskname over every volume of the storage owned by vmid, linked ones included.
func (s *Sim) freeDiskName(st *storage, nodeName string, vmid int, prefix string) string {
	used := map[string]bool{}
	for _, v := range s.volumes {
		if v.storage != st.id || (v.node != "" && v.node != nodeName && !st.shared) {
			continue
		}
		_, volname, _ := splitVolID(v.volid)
		last := volname[strings.LastIndex(volname, "/")+1:]
		if i := strings.Index(last, "."); i >= 0 {
			last = last[:i]
		}
		used[last] = true
	}
	for n := 0; ; n++ {
		name := fmt.Sprintf("%s-%d-disk-%d", prefix, vmid, n)
		if !used[name] && !used["vm-"+strings.TrimPrefix(name, prefix+"-")] && !used["base-"+strings.TrimPrefix(name, prefix+"-")] {
			return name
		}
	}
}

// volumeSize is the size of a volume in the registry, else the size= token of the config value.
func (s *Sim) volumeSize(nodeName, volid string, token int64) int64 {
	if v := s.lookupVolume(nodeName, volid); v != nil {
		if v.virtualSize > 0 {
			return v.virtualSize
		}
		return v.size
	}
	return token
}

// cloneVolume copies (full) or links (linked clone of a base volume) a volume for newid and registers the
// new volume. storageID and format are the full clone's target (empty: the source's).
func (s *Sim) cloneVolume(srcNode, dstNode string, volid string, sizeToken int64, newid int, full bool, storageID,
	format, content string) (string, error) {
	sid, volname, ok := splitVolID(volid)
	if !ok {
		return "", fmt.Errorf("unable to parse volume ID '%s'", volid)
	}
	src := s.storage(sid)
	if src == nil {
		return "", fmt.Errorf("storage '%s' does not exist", sid)
	}
	_, srcFormat, _, _ := classifyVolname(src, volname)
	size := s.volumeSize(srcNode, volid, sizeToken)
	if !full {
		name := s.freeDiskName(src, dstNode, newid, "vm")
		var newVolid string
		if src.fileBased() {
			newVolid = fmt.Sprintf("%s:%s/%d/%s.%s", src.id, volname, newid, name, srcFormat)
		} else {
			newVolid = fmt.Sprintf("%s:%s/%s", src.id, volname, name)
		}
		n := dstNode
		if src.shared {
			n = ""
		}
		s.putVolume(&volume{volid: newVolid, storage: src.id, node: n, content: content, format: srcFormat, size: size,
			vmid: newid, parent: volid})
		return newVolid, nil
	}
	st := src
	if storageID != "" {
		st = s.storage(storageID)
	}
	if format == "" {
		format = srcFormat
	}
	if !st.fileBased() {
		format = "raw"
	} else if format == "raw" && content == "images" && !src.fileBased() && storageID != "" {
		format = "raw"
	}
	name := s.freeDiskName(st, dstNode, newid, "vm")
	if content == "rootdir" && srcFormat == "subvol" {
		name = s.freeDiskName(st, dstNode, newid, "subvol")
		format = "subvol"
	}
	newVolid := s.volidFor(st, newid, name, format)
	if float64(size) > float64(st.total)-float64(s.storageUsed(st, dstNode)) {
		return "", allocTooLarge(st, newid, name, float64(size))
	}
	n := dstNode
	if st.shared {
		n = ""
	}
	s.putVolume(&volume{volid: newVolid, storage: st.id, node: n, content: content, format: format, size: size, vmid: newid})
	return newVolid, nil
}

// cloneTarget is the target-node and target-storage checks both clone_vm variants run first.
func (s *Sim) cloneTarget(c *call) (target string, err error) {
	nodeName := c.str("node")
	if err := s.checkPool(c.str("pool")); err != nil {
		return "", err
	}
	target = c.str("target")
	if target == nodeName || target == "localhost" {
		target = ""
	}
	if target != "" && s.node(target) == nil {
		return "", dieErr("no such cluster node '%s'", target)
	}
	if sid := c.str("storage"); sid != "" {
		st := s.storage(sid)
		if st == nil {
			return "", dieErr("storage '%s' does not exist", sid)
		}
		if !st.onNode(nodeName) || st.disabled {
			return "", dieErr("storage '%s' is not available on node '%s'", sid, nodeName)
		}
		if target != "" {
			if !st.onNode(target) {
				return "", dieErr("storage '%s' is not available on node '%s'", sid, target)
			}
			if !st.shared {
				return "", dieErr("can't clone to non-shared storage '%s'", sid)
			}
		}
	}
	return target, nil
}

// cloneRequest is what both clone_vm variants read from the request and carry from their checks into the
// worker.
type cloneRequest struct {
	c        *call
	nodeName string
	// target is the other node the clone goes to (empty: this node); dstNode is where it ends up.
	target, dstNode string
	newid, vmid     int
	src             *guest
	snapname        string
	// full: copy the volumes; else link them to the source's base volumes.
	full      bool
	storageID string
	// oldconf is the configuration cloned: the source's current one, or its snapshot's.
	oldconf map[string]string
	created []string // volumes the worker made, removed when it fails
}

func newCloneRequest(c *call) cloneRequest {
	return cloneRequest{c: c, nodeName: c.str("node"), newid: atoiDef(c.str("newid"), 0),
		snapname: c.str("snapname"), storageID: c.str("storage")}
}

// startClone runs the target checks clone_vm runs first and settles the node the clone lands on.
func (s *Sim) startClone(r *cloneRequest) error {
	target, err := s.cloneTarget(r.c)
	if err != nil {
		return err
	}
	r.target, r.dstNode = target, r.nodeName
	if target != "" {
		r.dstNode = target
	}
	return nil
}

// loadSource finds the source guest, refuses a locked one and picks the configuration to clone and whether
// the clone is full (by default: unless the source is a template).
func (s *Sim) loadSource(r *cloneRequest, kind string) error {
	src, err := s.guestOn(r.c, kind)
	if err != nil {
		return err
	}
	if err := checkLock(src); err != nil {
		return dieErr("%s", err.Error())
	}
	r.src, r.vmid = src, src.vmid
	r.full = src.conf()["template"] != "1"
	if r.c.has("full") {
		r.full = r.c.str("full") == "1"
	}
	return nil
}

// snapshotConf picks the configuration to clone: the source's current one, or the named snapshot's.
func (s *Sim) snapshotConf(r *cloneRequest) error {
	r.oldconf = r.src.conf()
	if r.snapname != "" {
		sec, ok := r.src.file.snapshots[r.snapname]
		if !ok {
			return dieErr("snapshot '%s' does not exist", r.snapname)
		}
		r.oldconf = sec.conf
	}
	return nil
}

// removeCreated deletes the volumes a failed clone made.
func (s *Sim) removeCreated(r *cloneRequest) {
	for _, v := range r.created {
		s.deleteVolume(r.dstNode, v)
	}
}

// qemuClone is one qemu clone: the shared request, the placeholder config reserving the new vmid and the
// configuration the worker builds.
type qemuClone struct {
	cloneRequest
	format      string
	placeholder *guest
	conf        map[string]string
}

// qemuCloneChecks are clone_vm's synchronous checks (load_and_check), in PVE's order.
var qemuCloneChecks = []func(*Sim, *qemuClone) error{
	func(s *Sim, q *qemuClone) error { return s.startClone(&q.cloneRequest) },
	func(s *Sim, q *qemuClone) error { return s.loadSource(&q.cloneRequest, "qemu") },
	func(s *Sim, q *qemuClone) error { return s.snapshotConf(&q.cloneRequest) },
	(*Sim).checkQemuLinkedOptions,
	(*Sim).checkQemuDrives,
	(*Sim).checkQemuNewID,
}

// qemuCloneSteps are the qmclone worker's steps.
var qemuCloneSteps = []func(*Sim, *qemuClone, taskLog) error{
	(*Sim).reloadQemuSource,
	(*Sim).copyQemuConfig,
	(*Sim).newQemuIdentity,
	(*Sim).writeQemuClone,
}

// handleQemuClone is POST …/qemu/{vmid}/clone. The early checks (load_and_check) run synchronously; the
// worker takes the source's flock (shared, exclusive if running) and the target's, both with the clone
// wait (1s), writes the temporary config "lock: clone", copies or links the disks and writes the result.
func (s *Sim) handleQemuClone(c *call) (any, error) {
	q := &qemuClone{cloneRequest: newCloneRequest(c), format: c.str("format")}
	for _, check := range qemuCloneChecks {
		if err := check(s, q); err != nil {
			return nil, err
		}
	}
	s.reserveQemuClone(q)
	work := func(l taskLog) error {
		for _, step := range qemuCloneSteps {
			if err := step(s, q, l); err != nil {
				return err
			}
		}
		return nil
	}
	onFail := func() {
		if q.placeholder != nil && s.guests[q.newid] == q.placeholder {
			delete(s.guests, q.newid)
		}
		s.removeCreated(&q.cloneRequest)
	}
	return s.spawn(&taskSpec{node: q.nodeName, typ: "qmclone", id: strconv.Itoa(q.vmid), user: c.user,
		lockKind: "qemu", lockVMID: q.vmid, lockShared: !q.src.running, lockTimeout: s.lockTimeout("clone"),
		extraKind: "qemu", extraVMID: q.newid, work: work, onFail: onFail}), nil
}

// checkQemuLinkedOptions refuses a target storage or format for a linked clone.
func (s *Sim) checkQemuLinkedOptions(q *qemuClone) error {
	if q.c.has("storage") && !q.full {
		return dieErr("parameter 'storage' not allowed for linked clones")
	}
	if q.c.has("format") && !q.full {
		return dieErr("parameter 'format' not allowed for linked clones")
	}
	return nil
}

// checkQemuDrives checks every disk can be linked (for a linked clone) and is shared (for another node).
func (s *Sim) checkQemuDrives(q *qemuClone) error {
	shared := true
	for _, k := range slices.Sorted(maps.Keys(q.oldconf)) {
		if !isDrive(k) {
			continue
		}
		volid, _, ok := s.volumeOfKey("qemu", k, q.oldconf[k])
		if d, err := parsePropertyString(s.qemuDesc.prop(k).FormatObject, q.oldconf[k], k); err == nil && isCloudInitVolume(d["file"]) {
			volid, ok = d["file"], true
		}
		if !ok {
			continue // cdrom: copied verbatim
		}
		sid, _, _ := splitVolID(volid)
		if st := s.storage(sid); st == nil || !st.shared {
			shared = false
		}
		if !q.full && !isCloudInitVolume(volid) && !isBaseVolid(volid) {
			return dieErr("Linked clone feature is not supported for drive '%s'", k)
		}
	}
	if q.target != "" && !shared {
		return dieErr("can't clone VM to node '%s' (VM uses local storage)", q.target)
	}
	return nil
}

// checkQemuNewID refuses a vmid with a config on this node and a storage that holds no disk images.
func (s *Sim) checkQemuNewID(q *qemuClone) error {
	if o, ok := s.guests[q.newid]; ok && o.node == q.nodeName {
		return dieErr("unable to create VM %d: config file already exists", q.newid)
	}
	if st := s.storage(q.storageID); st != nil && !st.content["images"] {
		return dieErr("storage '%s' does not support content-type 'images'", st.id)
	}
	return nil
}

// reserveQemuClone writes the temporary config "lock: clone" when the vmid is free in the cluster.
func (s *Sim) reserveQemuClone(q *qemuClone) {
	if _, taken := s.guests[q.newid]; taken {
		return
	}
	q.placeholder = &guest{vmid: q.newid, kind: "qemu", node: q.nodeName, createdAt: time.Now(),
		file: &configFile{current: newSection(), snapshots: map[string]*section{}, special: map[string]*section{}}}
	q.placeholder.conf()["description"] = "qmclone temporary file"
	q.placeholder.conf()["lock"] = "clone"
	q.placeholder.write()
	s.guests[q.newid] = q.placeholder
}

// reloadQemuSource re-reads the source under its lock, after the new config file is known to be ours.
func (s *Sim) reloadQemuSource(q *qemuClone, _ taskLog) error {
	if q.placeholder == nil || s.guests[q.newid] != q.placeholder {
		// pmxcfs refuses the new config file when the vmid exists on another node. Text not
		// verified against PVE; see docs/simulator.md.
		return fmt.Errorf("close (rename) atomic file '/etc/pve/nodes/%s/qemu-server/%d.conf' failed: File exists", q.nodeName, q.newid)
	}
	src, ok := s.guests[q.vmid]
	if !ok {
		return fmt.Errorf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", q.nodeName, q.vmid)
	}
	q.src = src
	q.oldconf = src.conf()
	if q.snapname != "" {
		q.oldconf = src.file.snapshots[q.snapname].conf
	}
	return nil
}

// copyQemuConfig copies the configuration, skipping snapshot and runtime keys, with new MAC addresses and
// cloned disks.
func (s *Sim) copyQemuConfig(q *qemuClone, l taskLog) error {
	q.conf = map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(q.oldconf)) {
		v := q.oldconf[k]
		switch {
		case qemuCloneSkip[k] || strings.HasPrefix(k, "unused"):
			continue
		case strings.HasPrefix(k, "net") && reIndexed.MatchString(k):
			p := s.qemuDesc.prop(k)
			d, err := parsePropertyString(p.FormatObject, v, k)
			if err != nil {
				return fmt.Errorf("unable to parse network options for '%s'", k)
			}
			d["macaddr"] = s.randomMAC(q.newid) // always a new MAC
			q.conf[k] = printPropertyString(p.FormatObject, d)
		case isDrive(k):
			if err := s.cloneQemuDrive(q, l, k, v); err != nil {
				return err
			}
		default:
			q.conf[k] = v
		}
	}
	return nil
}

// cloneQemuDrive is clone_disk for one drive: a cdrom is copied verbatim, the cloud-init drive always in full
// to vm-<newid>-cloudinit, a disk in full or linked.
func (s *Sim) cloneQemuDrive(q *qemuClone, l taskLog, k, v string) error {
	p := s.qemuDesc.prop(k)
	d, _ := parsePropertyString(p.FormatObject, v, k)
	volid, size, isVol := s.volumeOfKey("qemu", k, v)
	if isCloudInitVolume(d["file"]) {
		volid, isVol = d["file"], true
	}
	if !isVol {
		q.conf[k] = v // cdrom entries are copied verbatim
		return nil
	}
	if isCloudInitVolume(volid) {
		sid, _, _ := splitVolID(volid)
		if q.storageID != "" {
			sid = q.storageID
		}
		l.printf("create full clone of drive %s (%s)", k, volid)
		g := &guest{vmid: q.newid, kind: "qemu", node: q.dstNode, file: &configFile{current: newSection()}}
		nv, err := s.allocate(g, &allocation{key: k, storage: sid, cloudinit: true, format: q.format}, taskLog{t: &task{}})
		if err != nil {
			return err
		}
		q.created = append(q.created, nv)
		d["file"] = nv
		q.conf[k] = printPropertyString(p.FormatObject, d)
		return nil
	}
	if q.full {
		l.printf("create full clone of drive %s (%s)", k, volid)
	} else {
		l.printf("create linked clone of drive %s (%s)", k, volid)
	}
	nv, err := s.cloneVolume(q.src.node, q.dstNode, volid, size, q.newid, q.full, q.storageID, q.format, "images")
	if err != nil {
		return err
	}
	q.created = append(q.created, nv)
	d["file"] = nv
	d["size"] = formatSize(s.volumeSize(q.dstNode, nv, size))
	q.conf[k] = printPropertyString(p.FormatObject, d)
	return nil
}

// newQemuIdentity gives the clone a new SMBIOS uuid and vmgenid, its name and description.
func (s *Sim) newQemuIdentity(q *qemuClone, _ taskLog) error {
	conf := q.conf
	sm := map[string]string{}
	if v := conf["smbios1"]; v != "" {
		if d, err := parsePropertyString(hashFormatProps("pve-qm-smbios1"), v, "smbios1"); err == nil {
			sm = d
		}
	}
	sm["uuid"] = s.randomUUID(q.newid)
	conf["smbios1"] = printPropertyString(hashFormatProps("pve-qm-smbios1"), sm)
	if conf["vmgenid"] != "" {
		conf["vmgenid"] = s.randomUUID(q.newid)
	}
	if name := q.c.str("name"); name != "" {
		conf["name"] = name
	} else if n := q.oldconf["name"]; n != "" {
		conf["name"] = "Copy-of-VM-" + n
	} else {
		conf["name"] = fmt.Sprintf("Copy-of-VM-%d", q.vmid)
	}
	if descr := q.c.str("description"); descr != "" {
		conf["description"] = descr
	}
	return nil
}

// writeQemuClone replaces the temporary config with the clone's, on the node it goes to.
func (s *Sim) writeQemuClone(q *qemuClone, l taskLog) error {
	src := q.src
	if src.file.pending != nil && len(src.file.pending.conf) > 0 && q.snapname == "" {
		l.printf("found pending changes for '%s', discarding for clone", strings.Join(slices.Sorted(maps.Keys(src.file.pending.conf)), ","))
	}
	q.placeholder.file = &configFile{current: &section{conf: q.conf}, snapshots: map[string]*section{}, special: map[string]*section{}}
	q.placeholder.node = q.dstNode
	q.placeholder.pool = q.c.str("pool")
	q.placeholder.write()
	return nil
}

// hashFormatProps returns the property-string schema of a hash format (for parsing smbios1 etc.).
func hashFormatProps(name string) map[string]*schema.Prop { return hashFormats[name] }

var reLXCMountKey = regexp.MustCompile(`^(rootfs|mp\d+)$`)

// lxcMount is a mount point of the source a container clone copies or links.
type lxcMount struct {
	key, volid string
	size       int64
	d          map[string]string
}

// lxcClone is one container clone: the shared request, the mount points to clone and the new config.
type lxcClone struct {
	cloneRequest
	mounts  []lxcMount
	newConf map[string]string
	ng      *guest
}

// lxcCloneChecks are pve-container clone_vm's synchronous checks, in its order, under the source's config
// lock.
var lxcCloneChecks = []func(*Sim, *lxcClone) error{
	func(s *Sim, q *lxcClone) error { return s.loadSource(&q.cloneRequest, "lxc") },
	(*Sim).checkLXCLinkedStorage,
	func(s *Sim, q *lxcClone) error { return s.snapshotConf(&q.cloneRequest) },
	(*Sim).copyLXCConfig,
	(*Sim).checkLXCNewID,
}

// handleLXCClone is POST …/lxc/{vmid}/clone. pve-container runs its checks synchronously: the source gets
// `lock: disk` and the new config is written with `lock: create` before the vzclone worker copies or links
// the volumes and drops both locks.
func (s *Sim) handleLXCClone(c *call) (any, error) {
	q := &lxcClone{cloneRequest: newCloneRequest(c)}
	if err := s.startClone(&q.cloneRequest); err != nil {
		return nil, err
	}
	fl, err := s.lockGuestSync("lxc", c.vmid(), "default") // set_lock runs under lock_config
	if err != nil {
		return nil, err
	}
	defer s.releaseFlock(fl)
	for _, check := range lxcCloneChecks {
		if err := check(s, q); err != nil {
			return nil, err
		}
	}
	s.reserveLXCClone(q)
	return s.spawn(&taskSpec{node: q.nodeName, typ: "vzclone", id: strconv.Itoa(q.vmid), user: c.user,
		lockKind: "lxc", lockVMID: q.newid, lockTimeout: s.lockTimeout("clone"),
		work: func(taskLog) error { return s.cloneLXCVolumes(q) }, onFail: func() { s.undoLXCClone(q) }}), nil
}

// checkLXCLinkedStorage refuses a target storage for a linked clone.
func (s *Sim) checkLXCLinkedStorage(q *lxcClone) error {
	if q.storageID != "" && !q.full {
		return dieErr("parameter 'storage' not allowed for linked clones")
	}
	return nil
}

// copyLXCConfig builds the new config (new MAC addresses, no snapshot keys) and collects the mount points
// to clone, refusing those that cannot be, and a clone to another node from local storage.
func (s *Sim) copyLXCConfig(q *lxcClone) error {
	shared := true
	q.newConf = map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(q.oldconf)) {
		v := q.oldconf[k]
		switch {
		case strings.HasPrefix(k, "unused") || k == "snapshots" || k == "parent" || k == "snaptime" || k == "snapstate" || k == "template" || k == "lock":
			continue
		case reLXCMountKey.MatchString(k):
			m, onShared, err := s.lxcCloneMount(q, k, v)
			if err != nil {
				return err
			}
			shared = shared && onShared
			q.mounts = append(q.mounts, m)
		case strings.HasPrefix(k, "net") && reIndexed.MatchString(k):
			p := s.lxcDesc.prop(k)
			d, err := parsePropertyString(p.FormatObject, v, k)
			if err != nil {
				return dieErr("unable to parse network options for '%s'", k)
			}
			d["hwaddr"] = s.randomMAC(q.newid) // always a new MAC
			q.newConf[k] = printPropertyString(p.FormatObject, d)
		default:
			q.newConf[k] = v
		}
	}
	if q.target != "" && !shared {
		return dieErr("can't clone CT to node '%s' (CT uses local storage)", q.target)
	}
	return nil
}

// lxcCloneMount checks one mount point can be cloned and says whether its clone lands on shared storage.
func (s *Sim) lxcCloneMount(q *lxcClone, k, v string) (lxcMount, bool, error) {
	p := s.lxcDesc.prop(k)
	d, err := parsePropertyString(p.FormatObject, v, k)
	if err != nil {
		return lxcMount{}, false, dieErr("unable to parse mount point '%s'", k)
	}
	if t := mountType(d["volume"]); t != "volume" {
		return lxcMount{}, false, dieErr("unable to clone mountpoint '%s' (type %s)", k, t)
	}
	sid, _, _ := splitVolID(d["volume"])
	if q.storageID != "" {
		sid = q.storageID
	}
	st := s.storage(sid)
	onShared := st != nil && st.shared
	if q.full {
		if q.src.running && q.snapname == "" {
			return lxcMount{}, false, dieErr("Cannot do full clones on a running container without snapshots")
		}
	} else if !isBaseVolid(d["volume"]) {
		return lxcMount{}, false, dieErr("Linked clone feature for '%s' is not available", d["volume"])
	}
	size, _ := parseSize(d["size"])
	return lxcMount{key: k, volid: d["volume"], size: size, d: d}, onShared, nil
}

// checkLXCNewID refuses a vmid that exists anywhere in the cluster.
func (s *Sim) checkLXCNewID(q *lxcClone) error {
	if o, ok := s.guests[q.newid]; ok {
		return dieErr("%s %d already exists on node '%s'", o.typeWord(), q.newid, o.node)
	}
	return nil
}

// reserveLXCClone locks the source ("disk") and writes the new config with "lock: create".
func (s *Sim) reserveLXCClone(q *lxcClone) {
	if h := q.c.str("hostname"); h != "" {
		q.newConf["hostname"] = h
	}
	if q.c.has("description") {
		q.newConf["description"] = q.c.str("description")
	}
	q.newConf["lock"] = "create"
	q.src.conf()["lock"] = "disk"
	q.src.write()
	q.ng = &guest{vmid: q.newid, kind: "lxc", node: q.nodeName, createdAt: time.Now(), pool: q.c.str("pool"),
		file: &configFile{current: &section{conf: q.newConf}, snapshots: map[string]*section{}, special: map[string]*section{}}}
	q.ng.write()
	s.guests[q.newid] = q.ng
}

// cloneLXCVolumes is the vzclone worker: it copies or links the mount points and drops both locks.
func (s *Sim) cloneLXCVolumes(q *lxcClone) error {
	src, ok := s.guests[q.vmid]
	ng2, ok2 := s.guests[q.newid]
	if !ok || !ok2 || ng2 != q.ng {
		return fmt.Errorf("Lost 'create' config lock, aborting.")
	}
	for _, m := range q.mounts {
		nv, err := s.cloneVolume(src.node, q.dstNode, m.volid, m.size, q.newid, q.full, q.storageID, "", "rootdir")
		if err != nil {
			return err
		}
		q.created = append(q.created, nv)
		m.d["volume"] = nv
		m.d["size"] = formatSize(s.volumeSize(q.dstNode, nv, m.size))
		q.ng.conf()[m.key] = printPropertyString(s.lxcDesc.prop(m.key).FormatObject, m.d)
	}
	delete(q.ng.conf(), "lock")
	q.ng.node = q.dstNode
	q.ng.write()
	if src.conf()["lock"] == "disk" {
		delete(src.conf(), "lock")
		src.write()
	}
	return nil
}

// undoLXCClone removes a failed clone's config and volumes and unlocks the source.
func (s *Sim) undoLXCClone(q *lxcClone) {
	if s.guests[q.newid] == q.ng {
		delete(s.guests, q.newid)
	}
	if src, ok := s.guests[q.vmid]; ok && src.conf()["lock"] == "disk" {
		delete(src.conf(), "lock")
		src.write()
	}
	s.removeCreated(&q.cloneRequest)
}

// renameToBase is vdisk_create_base for the simulator: vm-N-disk-M becomes base-N-disk-M (the last path
// component of the volume name), and the registry follows.
func (s *Sim) renameToBase(nodeName, volid string) string {
	sid, volname, ok := splitVolID(volid)
	if !ok {
		return volid
	}
	i := strings.LastIndex(volname, "/") + 1
	last := volname[i:]
	if !strings.HasPrefix(last, "vm-") && !strings.HasPrefix(last, "subvol-") {
		return volid
	}
	last = "base-" + last[strings.Index(last, "-")+1:]
	nv := sid + ":" + volname[:i] + last
	if v := s.lookupVolume(nodeName, volid); v != nil {
		s.deleteVolume(nodeName, volid)
		cp := *v
		cp.volid = nv
		s.putVolume(&cp)
	}
	return nv
}

// snapshotsSorted lists snapshot names by snaptime, then name.
func snapshotsSorted(cf *configFile) []string {
	names := make([]string, 0, len(cf.snapshots))
	for n := range cf.snapshots {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := atoiDef(cf.snapshots[names[i]].conf["snaptime"], 0), atoiDef(cf.snapshots[names[j]].conf["snaptime"], 0)
		if a != b {
			return a < b
		}
		return names[i] < names[j]
	})
	return names
}

var reCloudInitVol = regexp.MustCompile(`(^|[:/])vm-\d+-cloudinit(\.(qcow2|raw))?$`)

// isCloudInitVolume is drive_is_cloudinit: the volume is named vm-<vmid>-cloudinit.
func isCloudInitVolume(volid string) bool { return reCloudInitVol.MatchString(volid) }
