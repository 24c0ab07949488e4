package pvesim

import (
	"fmt"
	"regexp"
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

// handleQemuClone is POST …/qemu/{vmid}/clone. The early checks (load_and_check) run synchronously; the
// worker takes the source's flock (shared, exclusive if running) and the target's, both with the clone
// wait (1s), writes the temporary config "lock: clone", copies or links the disks and writes the result.
func (s *Sim) handleQemuClone(c *call) (any, error) {
	nodeName := c.str("node")
	newid := atoiDef(c.str("newid"), 0)
	target, err := s.cloneTarget(c)
	if err != nil {
		return nil, err
	}
	src, err := s.guestOn(c, "qemu")
	if err != nil {
		return nil, err
	}
	if err := checkLock(src); err != nil {
		return nil, dieErr("%s", err.Error())
	}
	snapname := c.str("snapname")
	oldconf := src.conf()
	if snapname != "" {
		sec, ok := src.file.snapshots[snapname]
		if !ok {
			return nil, dieErr("snapshot '%s' does not exist", snapname)
		}
		oldconf = sec.conf
	}
	full := src.conf()["template"] != "1"
	if c.has("full") {
		full = c.str("full") == "1"
	}
	if c.has("storage") && !full {
		return nil, dieErr("parameter 'storage' not allowed for linked clones")
	}
	if c.has("format") && !full {
		return nil, dieErr("parameter 'format' not allowed for linked clones")
	}
	shared := true
	for _, k := range sortedKeys(oldconf) {
		if !isDrive(k) {
			continue
		}
		volid, _, ok := s.volumeOfKey("qemu", k, oldconf[k])
		if d, err := parsePropertyString(s.qemuDesc.prop(k).FormatObject, oldconf[k], k); err == nil && isCloudInitVolume(d["file"]) {
			volid, ok = d["file"], true
		}
		if !ok {
			continue // cdrom: copied verbatim
		}
		sid, _, _ := splitVolID(volid)
		if st := s.storage(sid); st == nil || !st.shared {
			shared = false
		}
		if !full && !isCloudInitVolume(volid) && !isBaseVolid(volid) {
			return nil, dieErr("Linked clone feature is not supported for drive '%s'", k)
		}
	}
	if target != "" && !shared {
		return nil, dieErr("can't clone VM to node '%s' (VM uses local storage)", target)
	}
	if o, ok := s.guests[newid]; ok && o.node == nodeName {
		return nil, dieErr("unable to create VM %d: config file already exists", newid)
	}
	if st := s.storage(c.str("storage")); st != nil && !st.content["images"] {
		return nil, dieErr("storage '%s' does not support content-type 'images'", st.id)
	}
	var placeholder *guest
	if _, taken := s.guests[newid]; !taken {
		placeholder = &guest{vmid: newid, kind: "qemu", node: nodeName, createdAt: time.Now(),
			file: &configFile{current: newSection(), snapshots: map[string]*section{}, special: map[string]*section{}}}
		placeholder.conf()["description"] = "qmclone temporary file"
		placeholder.conf()["lock"] = "clone"
		placeholder.write()
		s.guests[newid] = placeholder
	}
	vmid := src.vmid
	name, descr, pool := c.str("name"), c.str("description"), c.str("pool")
	storageID, format := c.str("storage"), c.str("format")
	var created []string
	dstNode := nodeName
	if target != "" {
		dstNode = target
	}
	work := func(l taskLog) error {
		if placeholder == nil || s.guests[newid] != placeholder {
			// pmxcfs refuses the new config file when the vmid exists on another node. Text not
			// verified against PVE; see docs/simulator.md.
			return fmt.Errorf("close (rename) atomic file '/etc/pve/nodes/%s/qemu-server/%d.conf' failed: File exists", nodeName, newid)
		}
		src, ok := s.guests[vmid]
		if !ok {
			return fmt.Errorf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", nodeName, vmid)
		}
		old := src.conf()
		if snapname != "" {
			old = src.file.snapshots[snapname].conf
		}
		conf := map[string]string{}
		for _, k := range sortedKeys(old) {
			v := old[k]
			switch {
			case qemuCloneSkip[k] || strings.HasPrefix(k, "unused"):
				continue
			case strings.HasPrefix(k, "net") && reIndexed.MatchString(k):
				p := s.qemuDesc.prop(k)
				d, err := parsePropertyString(p.FormatObject, v, k)
				if err != nil {
					return fmt.Errorf("unable to parse network options for '%s'", k)
				}
				d["macaddr"] = s.randomMAC(newid) // always a new MAC
				conf[k] = printPropertyString(p.FormatObject, d)
			case isDrive(k):
				p := s.qemuDesc.prop(k)
				d, _ := parsePropertyString(p.FormatObject, v, k)
				volid, size, isVol := s.volumeOfKey("qemu", k, v)
				if isCloudInitVolume(d["file"]) {
					volid, isVol = d["file"], true
				}
				if !isVol {
					conf[k] = v // cdrom entries are copied verbatim
					continue
				}
				if isCloudInitVolume(volid) {
					// The cloud-init drive is always copied in full, to vm-<newid>-cloudinit.
					sid, _, _ := splitVolID(volid)
					if storageID != "" {
						sid = storageID
					}
					l.printf("create full clone of drive %s (%s)", k, volid)
					g := &guest{vmid: newid, kind: "qemu", node: dstNode, file: &configFile{current: newSection()}}
					nv, err := s.allocate(g, &allocation{key: k, storage: sid, cloudinit: true, format: format}, taskLog{t: &task{}})
					if err != nil {
						return err
					}
					created = append(created, nv)
					d["file"] = nv
					conf[k] = printPropertyString(p.FormatObject, d)
					continue
				}
				if full {
					l.printf("create full clone of drive %s (%s)", k, volid)
				} else {
					l.printf("create linked clone of drive %s (%s)", k, volid)
				}
				nv, err := s.cloneVolume(src.node, dstNode, volid, size, newid, full, storageID, format, "images")
				if err != nil {
					return err
				}
				created = append(created, nv)
				d["file"] = nv
				d["size"] = formatSize(s.volumeSize(dstNode, nv, size))
				conf[k] = printPropertyString(p.FormatObject, d)
			default:
				conf[k] = v
			}
		}
		sm := map[string]string{}
		if v := conf["smbios1"]; v != "" {
			if d, err := parsePropertyString(hashFormatProps("pve-qm-smbios1"), v, "smbios1"); err == nil {
				sm = d
			}
		}
		sm["uuid"] = s.randomUUID(newid)
		conf["smbios1"] = printPropertyString(hashFormatProps("pve-qm-smbios1"), sm)
		if conf["vmgenid"] != "" {
			conf["vmgenid"] = s.randomUUID(newid)
		}
		if name != "" {
			conf["name"] = name
		} else if n := old["name"]; n != "" {
			conf["name"] = "Copy-of-VM-" + n
		} else {
			conf["name"] = fmt.Sprintf("Copy-of-VM-%d", vmid)
		}
		if descr != "" {
			conf["description"] = descr
		}
		if src.file.pending != nil && len(src.file.pending.conf) > 0 && snapname == "" {
			l.printf("found pending changes for '%s', discarding for clone", strings.Join(sortedKeys(src.file.pending.conf), ","))
		}
		placeholder.file = &configFile{current: &section{conf: conf}, snapshots: map[string]*section{}, special: map[string]*section{}}
		placeholder.node = dstNode
		placeholder.pool = pool
		placeholder.write()
		return nil
	}
	onFail := func() {
		if placeholder != nil && s.guests[newid] == placeholder {
			delete(s.guests, newid)
		}
		for _, v := range created {
			s.deleteVolume(dstNode, v)
		}
	}
	return s.spawn(&taskSpec{node: nodeName, typ: "qmclone", id: strconv.Itoa(vmid), user: c.user,
		lockKind: "qemu", lockVMID: vmid, lockShared: !src.running, lockTimeout: s.lockTimeout("clone"),
		extraKind: "qemu", extraVMID: newid, work: work, onFail: onFail}), nil
}

// hashFormatProps returns the property-string schema of a hash format (for parsing smbios1 etc.).
func hashFormatProps(name string) map[string]*schema.Prop { return hashFormats[name] }

var reLXCMountKey = regexp.MustCompile(`^(rootfs|mp\d+)$`)

// handleLXCClone is POST …/lxc/{vmid}/clone. pve-container runs its checks synchronously: the source gets
// `lock: disk` and the new config is written with `lock: create` before the vzclone worker copies or links
// the volumes and drops both locks.
func (s *Sim) handleLXCClone(c *call) (any, error) {
	nodeName := c.str("node")
	newid := atoiDef(c.str("newid"), 0)
	target, err := s.cloneTarget(c)
	if err != nil {
		return nil, err
	}
	fl, err := s.lockGuestSync("lxc", c.vmid(), "default") // set_lock runs under lock_config
	if err != nil {
		return nil, err
	}
	defer s.releaseFlock(fl)
	src, err := s.guestOn(c, "lxc")
	if err != nil {
		return nil, err
	}
	if err := checkLock(src); err != nil {
		return nil, dieErr("%s", err.Error())
	}
	full := src.conf()["template"] != "1"
	if c.has("full") {
		full = c.str("full") == "1"
	}
	storageID := c.str("storage")
	if storageID != "" && !full {
		return nil, dieErr("parameter 'storage' not allowed for linked clones")
	}
	snapname := c.str("snapname")
	old := src.conf()
	if snapname != "" {
		sec, ok := src.file.snapshots[snapname]
		if !ok {
			return nil, dieErr("snapshot '%s' does not exist", snapname)
		}
		old = sec.conf
	}
	shared := true
	type mount struct {
		key, volid string
		size       int64
		d          map[string]string
	}
	var mounts []mount
	newConf := map[string]string{}
	for _, k := range sortedKeys(old) {
		v := old[k]
		switch {
		case strings.HasPrefix(k, "unused") || k == "snapshots" || k == "parent" || k == "snaptime" || k == "snapstate" || k == "template" || k == "lock":
			continue
		case reLXCMountKey.MatchString(k):
			p := s.lxcDesc.prop(k)
			d, err := parsePropertyString(p.FormatObject, v, k)
			if err != nil {
				return nil, dieErr("unable to parse mount point '%s'", k)
			}
			if t := mountType(d["volume"]); t != "volume" {
				return nil, dieErr("unable to clone mountpoint '%s' (type %s)", k, t)
			}
			sid, _, _ := splitVolID(d["volume"])
			if storageID != "" {
				sid = storageID
			}
			if st := s.storage(sid); st == nil || !st.shared {
				shared = false
			}
			if full {
				if src.running && snapname == "" {
					return nil, dieErr("Cannot do full clones on a running container without snapshots")
				}
			} else if !isBaseVolid(d["volume"]) {
				return nil, dieErr("Linked clone feature for '%s' is not available", d["volume"])
			}
			size, _ := parseSize(d["size"])
			mounts = append(mounts, mount{key: k, volid: d["volume"], size: size, d: d})
		case strings.HasPrefix(k, "net") && reIndexed.MatchString(k):
			p := s.lxcDesc.prop(k)
			d, err := parsePropertyString(p.FormatObject, v, k)
			if err != nil {
				return nil, dieErr("unable to parse network options for '%s'", k)
			}
			d["hwaddr"] = s.randomMAC(newid) // always a new MAC
			newConf[k] = printPropertyString(p.FormatObject, d)
		default:
			newConf[k] = v
		}
	}
	if target != "" && !shared {
		return nil, dieErr("can't clone CT to node '%s' (CT uses local storage)", target)
	}
	if o, ok := s.guests[newid]; ok {
		return nil, dieErr("%s %d already exists on node '%s'", o.typeWord(), newid, o.node)
	}
	if h := c.str("hostname"); h != "" {
		newConf["hostname"] = h
	}
	if c.has("description") {
		newConf["description"] = c.str("description")
	}
	newConf["lock"] = "create"
	src.conf()["lock"] = "disk"
	src.write()
	ng := &guest{vmid: newid, kind: "lxc", node: nodeName, createdAt: time.Now(), pool: c.str("pool"),
		file: &configFile{current: &section{conf: newConf}, snapshots: map[string]*section{}, special: map[string]*section{}}}
	ng.write()
	s.guests[newid] = ng
	vmid := src.vmid
	dstNode := nodeName
	if target != "" {
		dstNode = target
	}
	var created []string
	work := func(l taskLog) error {
		src, ok := s.guests[vmid]
		ng2, ok2 := s.guests[newid]
		if !ok || !ok2 || ng2 != ng {
			return fmt.Errorf("Lost 'create' config lock, aborting.")
		}
		for _, m := range mounts {
			nv, err := s.cloneVolume(src.node, dstNode, m.volid, m.size, newid, full, storageID, "", "rootdir")
			if err != nil {
				return err
			}
			created = append(created, nv)
			m.d["volume"] = nv
			m.d["size"] = formatSize(s.volumeSize(dstNode, nv, m.size))
			ng.conf()[m.key] = printPropertyString(s.lxcDesc.prop(m.key).FormatObject, m.d)
		}
		delete(ng.conf(), "lock")
		ng.node = dstNode
		ng.write()
		if src.conf()["lock"] == "disk" {
			delete(src.conf(), "lock")
			src.write()
		}
		return nil
	}
	onFail := func() {
		if s.guests[newid] == ng {
			delete(s.guests, newid)
		}
		if src, ok := s.guests[vmid]; ok && src.conf()["lock"] == "disk" {
			delete(src.conf(), "lock")
			src.write()
		}
		for _, v := range created {
			s.deleteVolume(dstNode, v)
		}
	}
	return s.spawn(&taskSpec{node: nodeName, typ: "vzclone", id: strconv.Itoa(vmid), user: c.user,
		lockKind: "lxc", lockVMID: newid, lockTimeout: s.lockTimeout("clone"), work: work, onFail: onFail}), nil
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
