package pvesim

import (
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/pveformat"
)

// Shared guest logic: config reads, pending, status, destroy, identity generation and volume allocation.

// renderValue types a config value for JSON as parse_vm_config leaves it: integer keys are numbers,
// boolean keys 1/0 numbers, number and string keys strings.
func (s *Sim) renderValue(kind, key, val string) any {
	p := s.desc(kind).prop(key)
	if p == nil {
		return val
	}
	switch p.Type {
	case "integer", "boolean":
		if n, err := strconv.ParseInt(val, 10, 64); err == nil {
			return n
		}
	}
	return val
}

// effectiveConfig is the config with pending changes applied (GET config with current=0).
func effectiveConfig(cf *configFile, current bool) map[string]string {
	out := map[string]string{}
	for k, v := range cf.current.conf {
		out[k] = v
	}
	if current || cf.pending == nil {
		return out
	}
	for k, v := range cf.pending.conf {
		if k != "delete" {
			out[k] = v
		}
	}
	for k := range pendingDeletes(cf.pending.conf["delete"]) {
		delete(out, k)
	}
	return out
}

func (s *Sim) handleConfigGet(c *call) (any, error) {
	kind := kindOf(c)
	g, err := s.guestOn(c, kind)
	if err != nil {
		return nil, err
	}
	var conf map[string]string
	lxcRaw := g.file.current.lxc
	if snap := c.str("snapshot"); snap != "" {
		sec, ok := g.file.snapshots[snap]
		if !ok {
			return nil, dieErr("snapshot '%s' does not exist", snap)
		}
		conf = effectiveConfig(&configFile{current: sec}, true)
		lxcRaw = sec.lxc
	} else {
		conf = effectiveConfig(g.file, c.str("current") == "1")
	}
	out := map[string]any{"digest": g.digest()}
	for k, v := range conf {
		if k == "cipassword" && v != "" {
			out[k] = "**********"
			continue
		}
		out[k] = s.renderValue(kind, k, v)
	}
	if kind == "lxc" && len(lxcRaw) > 0 {
		var pairs [][]string
		for _, e := range lxcRaw {
			pairs = append(pairs, []string{e[0], e[1]})
		}
		out["lxc"] = pairs
	}
	return out, nil
}

// pendingItem is one key of GET …/pending. Its fields are in the order of their names, as PVE's JSON (and
// a map's) has them; an absent one is left out.
type pendingItem struct {
	Delete  int    `json:"delete,omitempty"`
	Key     string `json:"key"`
	Pending any    `json:"pending,omitempty"`
	Value   any    `json:"value,omitempty"`
}

// handlePending is GET …/pending (PVE::GuestHelpers config_with_pending_array), sorted by key.
func (s *Sim) handlePending(c *call) (any, error) {
	kind := kindOf(c)
	g, err := s.guestOn(c, kind)
	if err != nil {
		return nil, err
	}
	cur := map[string]string{"digest": g.digest()}
	for k, v := range g.conf() {
		cur[k] = v
	}
	pend := map[string]string{}
	dels := map[string]bool{}
	if g.file.pending != nil {
		for k, v := range g.file.pending.conf {
			if k != "delete" {
				pend[k] = v
			}
		}
		dels = pendingDeletes(g.file.pending.conf["delete"])
	}
	mask := func(k, v string) any {
		if k == "cipassword" && v != "" {
			return "**********"
		}
		if k == "digest" {
			return v
		}
		return s.renderValue(kind, k, v)
	}
	keys := map[string]bool{}
	for k := range cur {
		keys[k] = true
	}
	for k := range pend {
		keys[k] = true
	}
	for k := range dels {
		keys[k] = true
	}
	out := []pendingItem{}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		item := pendingItem{Key: k}
		if v, ok := cur[k]; ok {
			item.Value = mask(k, v)
		}
		if v, ok := pend[k]; ok {
			item.Pending = mask(k, v)
		}
		if force, ok := dels[k]; ok {
			item.Delete = 1
			if force {
				item.Delete = 2
			}
		}
		out = append(out, item)
	}
	return out, nil
}

// memoryMiB reads qemu memory (a property string since PVE 8.1: [current=]<MiB>) or lxc memory.
func memoryMiB(conf map[string]string, def int64) int64 {
	v := conf["memory"]
	v = strings.TrimPrefix(v, "current=")
	if i := strings.Index(v, ","); i >= 0 {
		v = v[:i]
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	return def
}

// vmStatus is the guest's entry in the qemu/lxc listings (QemuServer.pm vmstatus, LXC.pm vmstatus).
func (s *Sim) vmStatus(g *guest, full bool) map[string]any {
	conf := g.conf()
	e := map[string]any{"vmid": g.vmid, "status": "stopped", "cpu": 0, "mem": 0, "disk": 0, "uptime": 0,
		"netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0}
	if g.running {
		e["status"] = "running"
		e["uptime"] = int64(time.Since(g.startedAt).Seconds())
		e["pid"] = 100000 + g.vmid
	}
	if g.kind == "qemu" {
		name := conf["name"]
		if name == "" {
			name = fmt.Sprintf("VM %d", g.vmid)
		}
		e["name"] = name
		sockets, cores := atoiDef(conf["sockets"], 1), atoiDef(conf["cores"], 1)
		cpus := sockets * cores
		if v := atoiDef(conf["vcpus"], 0); v > 0 {
			cpus = v
		}
		e["cpus"] = cpus
		e["maxmem"] = memoryMiB(conf, 512) << 20
		e["maxdisk"] = s.bootDiskSize(g)
		if full {
			e["qmpstatus"] = "stopped"
			if g.running {
				e["qmpstatus"] = g.qmpstatus
			}
		}
		if conf["serial0"] != "" || conf["serial1"] != "" || conf["serial2"] != "" || conf["serial3"] != "" {
			e["serial"] = 1
		}
	} else {
		name := conf["hostname"]
		if name == "" {
			name = fmt.Sprintf("CT%d", g.vmid)
		}
		e["name"] = name
		e["type"] = "lxc"
		e["cpus"] = atoiDef(conf["cores"], s.node(g.node).cpus)
		e["maxmem"] = memoryMiB(conf, 512) << 20
		e["maxswap"] = int64(atoiDef(conf["swap"], 512)) << 20
		e["swap"] = 0
		_, size, _ := s.volumeOfKey("lxc", "rootfs", conf["rootfs"])
		e["maxdisk"] = size
	}
	if l := conf["lock"]; l != "" {
		e["lock"] = l
	}
	if t, ok := conf["tags"]; ok {
		e["tags"] = t
	}
	if conf["template"] == "1" {
		e["template"] = 1
	}
	return e
}

func atoiDef(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}

// bootDiskSize is QemuServer::Drive::bootdisk_size: the size of the first boot disk (not a cdrom).
func (s *Sim) bootDiskSize(g *guest) int64 {
	conf := g.conf()
	var order []string
	if b := conf["boot"]; strings.Contains(b, "order=") {
		o := b[strings.Index(b, "order=")+6:]
		if i := strings.Index(o, ","); i >= 0 {
			o = o[:i]
		}
		order = strings.Split(o, ";")
	} else if bd := conf["bootdisk"]; bd != "" {
		order = []string{bd}
	}
	for _, k := range order {
		if !isDrive(k) {
			continue
		}
		_, size, ok := s.volumeOfKey("qemu", k, conf[k])
		if ok {
			return size
		}
	}
	return 0
}

func (s *Sim) handleStatusCurrent(c *call) (any, error) {
	kind := kindOf(c)
	g, err := s.guestOn(c, kind)
	if err != nil {
		return nil, err
	}
	e := s.vmStatus(g, true)
	e["ha"] = map[string]any{"managed": 0}
	if g.ha {
		e["ha"] = map[string]any{"managed": 1, "state": g.haState}
	}
	if kind == "qemu" {
		if e["qmpstatus"] == nil {
			e["qmpstatus"] = e["status"]
		}
		if g.conf()["agent"] != "" && strings.HasPrefix(g.conf()["agent"], "1") || strings.Contains(g.conf()["agent"], "enabled=1") {
			e["agent"] = 1
		}
		if g.running {
			e["running-machine"] = "pc-i440fx-10.0+pve0"
			e["running-qemu"] = "10.0.2"
		}
	}
	return e, nil
}

// handleDestroy is DELETE /nodes/{node}/qemu|lxc/{vmid} (qmdestroy / vzdestroy).
func (s *Sim) handleDestroy(c *call) (any, error) {
	kind := kindOf(c)
	g, err := s.guestSkiplock(c, kind)
	if err != nil {
		return nil, err
	}
	word := g.typeWord()
	if g.conf()["protection"] == "1" {
		return nil, dieErr("can't remove %s %d - protection mode enabled", word, g.vmid)
	}
	if g.running {
		if kind == "qemu" {
			return nil, dieErr("VM %d is running - destroy failed", g.vmid)
		}
		if c.str("force") != "1" {
			return nil, dieErr("unable to destroy CT %d - container is running", g.vmid)
		}
	}
	if l := g.conf()["lock"]; l != "" && c.str("skiplock") != "1" {
		return nil, dieErr("%s %d is locked (%s)", word, g.vmid, l)
	}
	purge := c.str("purge") == "1"
	if g.ha && !purge {
		// Qemu.pm destroy_vm / LXC.pm destroy_vm refuse to orphan an HA resource.
		return nil, dieErr("unable to remove %s %d - used in HA resources and purge parameter not set.", word, g.vmid)
	}
	typ := "qmdestroy"
	if kind == "lxc" {
		typ = "vzdestroy"
	}
	unreferenced := c.str("destroy-unreferenced-disks") == "1"
	vmid := g.vmid
	cfgPath := g.confPath()
	return s.spawn(s.lockingWorker(c, typ, kind, vmid, func(l taskLog) error {
		g, err := s.reloadGuest(vmid, cfgPath)
		if err != nil {
			return err
		}
		if g.conf()["template"] == "1" {
			// QemuServer.pm destroy_vm: a base volume backing a linked clone stops the destroy (sic).
			for _, k := range slices.Sorted(maps.Keys(g.conf())) {
				volid, _, ok := s.volumeOfKey(kind, k, g.conf()[k])
				if ok && s.baseInUse(volid) {
					return fmt.Errorf("base volume '%s' is still in use by linked cloned", volid)
				}
			}
		}
		if g.running && kind == "lxc" {
			g.running = false
		}
		for _, k := range slices.Sorted(maps.Keys(g.conf())) {
			volid, _, ok := s.volumeOfKey(kind, k, g.conf()[k])
			if !ok {
				continue
			}
			if v := s.lookupVolume(g.node, volid); v != nil && v.vmid == vmid {
				s.deleteVolume(g.node, volid)
				l.printf("Removed volume '%s'", volid)
			}
		}
		if unreferenced {
			for key, v := range s.volumes {
				if v.vmid == vmid && (v.node == "" || v.node == g.node) && (v.content == "images" || v.content == "rootdir") {
					s.removeVolumeKey(key)
				}
			}
		}
		delete(s.guests, vmid)
		s.dropGuestFW(vmid)
		s.haPurge(vmid)
		return nil
	})), nil
}

// baseInUse is pve-storage volume_is_base_and_used: a base volume some linked clone is backed by.
func (s *Sim) baseInUse(volid string) bool {
	for _, v := range s.volumes {
		if v.parent == volid {
			return true
		}
	}
	return false
}

// --- identity and normalisation ---

// normalizeTags is GuestHelpers::get_unique_tags: with the default tag-style lower-cased, deduplicated
// case-insensitively and sorted; with case-sensitive=1 the case is kept, duplicates are exact and the sort
// is by byte; joined with ';'. ordering=config keeps the order given.
func (s *Sim) normalizeTags(v string) string {
	style := pveformat.TagStyle{CaseSensitive: s.tagStyle["case-sensitive"] == "1"}
	if s.tagStyle["ordering"] != "config" {
		return style.Format([]string{v})
	}
	seen := map[string]bool{}
	var out []string
	for _, t := range pveformat.SplitList(v) {
		if !style.CaseSensitive {
			t = strings.ToLower(t)
		}
		if t != "" && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return strings.Join(out, ";")
}

// randomMAC is a new MAC address for guest vmid.
func (s *Sim) randomMAC(vmid int) string {
	rng := s.idStream(vmid)
	b := make([]byte, 3)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return fmt.Sprintf("%s:%02X:%02X:%02X", strings.ToUpper(s.macPrefix), b[0], b[1], b[2])
}

// randomUUID is a new version 4 UUID for guest vmid.
func (s *Sim) randomUUID(vmid int) string {
	rng := s.idStream(vmid)
	b := make([]byte, 16)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// hashPassword stands in for PVE::Tools::encrypt_pw (sha512-crypt): a "$6$salt$hash" string. The hash is
// not crypt(3)-compatible; only its shape matters to clients, which never see it.
func (s *Sim) hashPassword(vmid int, pw string) string {
	if regexp.MustCompile(`^\$(1|5|6|2a)\$`).MatchString(pw) {
		return pw
	}
	rng := s.idStream(vmid)
	salt := make([]byte, 12)
	for i := range salt {
		salt[i] = byte(rng.Uint32())
	}
	saltText := base64.RawStdEncoding.EncodeToString(salt)[:16]
	sum := sha512.Sum512([]byte(saltText + pw))
	return "$6$" + strings.NewReplacer("+", ".").Replace(saltText) + "$" +
		strings.NewReplacer("+", ".").Replace(base64.RawStdEncoding.EncodeToString(sum[:]))
}

var sshKeyTypes = map[string]bool{"ssh-rsa": true, "ssh-dss": true, "ssh-ed25519": true, "ecdsa-sha2-nistp256": true,
	"ecdsa-sha2-nistp384": true, "ecdsa-sha2-nistp521": true, "sk-ssh-ed25519@openssh.com": true,
	"sk-ecdsa-sha2-nistp256@openssh.com": true}

// validateSSHKeys stands in for PVE::Tools::validate_ssh_public_keys (which runs ssh-keygen -l on each
// line): every non-empty line must be "[options] <type> <base64 blob> [comment]" whose blob starts with
// the type name.
func validateSSHKeys(encoded string) error {
	raw, err := url.PathUnescape(encoded)
	if err != nil {
		return dieErr("SSH public key validation error")
	}
	for _, line := range strings.Split(raw, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		fields := strings.Fields(line)
		ok := false
		for i := 0; i+1 < len(fields); i++ {
			if !sshKeyTypes[fields[i]] {
				continue
			}
			blob, err := base64.StdEncoding.DecodeString(fields[i+1])
			if err == nil && len(blob) > 4 {
				n := int(blob[0])<<24 | int(blob[1])<<16 | int(blob[2])<<8 | int(blob[3])
				if n > 0 && 4+n <= len(blob) && string(blob[4:4+n]) == fields[i] {
					ok = true
				}
			}
			break
		}
		if !ok {
			return dieErr("SSH public key validation error")
		}
	}
	return nil
}

// --- volume allocation ---

// allocation is a volume to create in the worker for a create-form disk value.
type allocation struct {
	key       string
	storage   string
	sizeBytes float64
	format    string
	cloudinit bool
	efi       bool
	tpm       bool
	importSrc string
	rest      map[string]string // the other property-string keys of the value
}

// nextVolName finds the lowest free vm-<vmid>-disk-<n> name on a storage (pve-storage find_free_diskname):
// not a volume of the storage, nor named in the config of the guest the name is for. PVE looks at the
// storage's volumes only; the config is looked at too because a config may name a volume the simulator
// does not hold. Other guests' configs are not searched: that would make every allocation cost as much as
// the whole cluster's configs.
func (s *Sim) nextVolName(st *storage, nodeName string, vmid int, format, prefix string) string {
	for n := 0; ; n++ {
		name := fmt.Sprintf("%s-%d-disk-%d", prefix, vmid, n)
		volid := s.volidFor(st, vmid, name, format)
		if s.lookupVolume(nodeName, volid) == nil && !s.volidInConfig(vmid, volid) {
			return name
		}
	}
}

// volidInConfig reports whether the config of guest vmid names a volume.
func (s *Sim) volidInConfig(vmid int, volid string) bool {
	g, ok := s.guests[vmid]
	if !ok {
		return false
	}
	for _, v := range g.conf() {
		if strings.HasPrefix(v, volid+",") || v == volid {
			return true
		}
	}
	return false
}

// volidFor is the volume id of a new image: "<sid>:<vmid>/<name>.<fmt>" on file storage,
// "<sid>:<name>" on block storage.
func (s *Sim) volidFor(st *storage, vmid int, name, format string) string {
	if st.fileBased() {
		return fmt.Sprintf("%s:%d/%s.%s", st.id, vmid, name, format)
	}
	return st.id + ":" + name
}

// allocate creates the volume of an allocation and returns the final config value.
func (s *Sim) allocate(g *guest, a *allocation, l taskLog) (string, error) {
	st := s.storage(a.storage)
	if st == nil {
		return "", fmt.Errorf("storage '%s' does not exist", a.storage)
	}
	nodeName := g.node
	if st.shared {
		nodeName = ""
	}
	format := a.format
	if format == "" {
		format = "raw"
		if st.fileBased() && g.kind == "qemu" {
			format = "qcow2"
		}
	}
	if !st.fileBased() {
		format = "raw"
	}
	size := a.sizeBytes
	var volid string
	switch {
	case a.cloudinit:
		if st.fileBased() {
			volid = fmt.Sprintf("%s:%d/vm-%d-cloudinit.%s", st.id, g.vmid, g.vmid, format)
		} else {
			volid = fmt.Sprintf("%s:vm-%d-cloudinit", st.id, g.vmid)
		}
		if s.lookupVolume(g.node, volid) != nil {
			// The cloud-init volume has a fixed name, so allocating it again fails in the storage layer.
			return "", volumeExistsErr(st, fmt.Sprintf("vm-%d-cloudinit", g.vmid), g.vmid, format)
		}
		size = 4 << 20
	default:
		if a.importSrc != "" {
			src := s.lookupVolume(g.node, a.importSrc)
			if src == nil {
				return "", fmt.Errorf("volume '%s' does not exist", a.importSrc)
			}
			size = float64(src.size)
			if src.virtualSize > 0 {
				size = float64(src.virtualSize) // qemu-img info's virtual size
			}
		}
		if a.efi {
			size = 528 << 10
			if a.rest["efitype"] != "4m" {
				size = 128 << 10
			}
			if st.typ == "lvm" || st.typ == "lvmthin" || st.typ == "rbd" {
				size = 4 << 20
			}
		}
		if a.tpm {
			size = 4 << 20
		}
		prefix := "vm"
		if g.conf()["template"] == "1" {
			prefix = "base" // a disk added to a template is created as a base volume
		}
		if g.kind == "lxc" && (st.typ == "zfspool" || st.typ == "btrfs" || st.typ == "dir") && size == 0 {
			prefix = "subvol"
		}
		name := s.nextVolName(st, g.node, g.vmid, format, prefix)
		volid = s.volidFor(st, g.vmid, name, format)
		if size > float64(st.total)-float64(s.storageUsed(st, g.node)) || size >= 1<<63 {
			return "", allocTooLarge(st, g.vmid, name, size)
		}
	}
	s.putVolume(&volume{volid: volid, storage: st.id, node: nodeName, content: map[string]string{"qemu": "images", "lxc": "rootdir"}[g.kind],
		format: format, size: int64(size), vmid: g.vmid})
	if a.cloudinit || a.efi || a.tpm || a.importSrc != "" {
		l.printf("%s: successfully created disk '%s'", a.key, volid)
	} else {
		l.printf("%s: successfully created disk '%s,size=%s'", a.key, volid, formatSize(int64(size)))
	}
	return volid, nil
}

// volumeExistsErr is the storage layer's refusal to allocate a volume name that exists: lvcreate's text
// for LVM (from production logs), Plugin.pm alloc_image's for file storages; the ZFS and RBD texts are
// approximations (docs/simulator.md).
func volumeExistsErr(st *storage, name string, vmid int, format string) error {
	switch {
	case st.typ == "lvm" || st.typ == "lvmthin":
		return fmt.Errorf("lvcreate 'pve/%s' error:   Logical Volume \"%s\" already exists in volume group \"pve\"", name, name)
	case st.fileBased():
		return fmt.Errorf("disk image '%s/images/%d/%s.%s' already exists", st.path, vmid, name, format)
	case st.typ == "zfspool" || st.typ == "zfs":
		return fmt.Errorf("zfs error: cannot create 'rpool/data/%s': dataset already exists", name)
	}
	return fmt.Errorf("rbd error: rbd: create error: (17) File exists")
}

// allocTooLarge approximates the storage tool's refusal of an allocation beyond capacity. For LVM the
// text follows lvcreate's "Volume too large" message; other types are documented as approximate.
func allocTooLarge(st *storage, vmid int, name string, size float64) error {
	if st.typ == "lvm" || st.typ == "lvmthin" {
		return fmt.Errorf("lvcreate 'pve/%s' error:   Volume too large (%s) for extent size 4.00 MiB. Upper limit is 8.00 EiB.", name, lvmSize(size))
	}
	return fmt.Errorf("unable to create image: not enough space on storage '%s' for %s", st.id, lvmSize(size))
}

func lvmSize(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	return fmt.Sprintf("%.2f %s", b, units[i])
}

func (s *Sim) storageUsed(st *storage, nodeName string) int64 {
	used := s.used[volumeUse{st.id, ""}]
	if nodeName != "" {
		used += s.used[volumeUse{st.id, nodeName}]
	}
	return used
}
