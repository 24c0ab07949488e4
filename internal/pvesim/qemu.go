package pvesim

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/pvesim/schema"
)

// QEMU endpoints (qemu-server src/PVE/API2/Qemu.pm).

var reNewDisk = regexp.MustCompile(`^(([^/:\s]+):)?(\d+(\.\d+)?)$`) // Qemu.pm $NEW_DISK_RE

// fastPlug are applied at once even on a running VM (QemuServer.pm $fast_plug_option plus cloud-init).
var fastPlug = set("description", "hookscript", "lock", "migrate_downtime", "migrate_speed", "name", "onboot",
	"protection", "shares", "startup", "tags", "vmstatestorage", "cicustom", "cipassword", "citype", "ciupgrade",
	"ciuser", "nameserver", "searchdomain", "sshkeys")

func (s *Sim) handleQemuList(c *call) (any, error) {
	out := []map[string]any{}
	for _, g := range s.sortedGuests() {
		if g.kind == "qemu" && g.node == c.str("node") {
			out = append(out, s.vmStatus(g, c.str("full") == "1"))
		}
	}
	return out, nil
}

// rootOnlyQemu applies the root@pam-only rules of Qemu.pm ($check_vm_modify_config_perm,
// $check_vm_create_serial_perm, check_usb_perm, hostpci checks) to config keys being set.
func rootOnlyQemu(c *call, keys []string) error {
	if c.isRoot() {
		return nil
	}
	for _, k := range keys {
		v := c.str(k)
		switch {
		case k == "args" || k == "lock":
			return dieErr("only root can set '%s' config", k)
		case strings.HasPrefix(k, "serial") && v != "socket":
			return dieErr("only root can set '%s' config for real devices", k)
		case strings.HasPrefix(k, "usb") && !strings.Contains(v, "spice") && !strings.Contains(v, "mapping="):
			return dieErr("only root can set '%s' config for real devices", k)
		case strings.HasPrefix(k, "hostpci") && !strings.Contains(v, "mapping="):
			// Text not verified against PVE; see docs/simulator.md.
			return dieErr("only root can set '%s' config for non-mapped devices", k)
		case isDrive(k) && strings.Contains(v, "import-from=/"):
			// Text not verified against PVE; see docs/simulator.md.
			return permErr("only root can use absolute paths for 'import-from'")
		}
	}
	return nil
}

// configKeys lists the request parameters that are config keys.
func configKeys(c *call, skip ...string) []string {
	skipped := set(append([]string{"node", "vmid", "digest", "delete", "revert", "force", "skiplock",
		"background_delay", "start", "storage", "pool", "archive", "unique", "live-restore", "bwlimit",
		"import-working-storage", "ha-managed"}, skip...)...)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(c.params)) {
		if !skipped[k] {
			out = append(out, k)
		}
	}
	return out
}

// prepareValue checks one config value before the worker runs and turns it into its stored form; for
// create-form disks it returns the allocation to do in the worker.
func (s *Sim) prepareQemuValue(c *call, g *guest, key, val, defStorage string, cloudinitAt string) (string, *allocation, error) {
	switch {
	case key == "tags":
		return s.normalizeTags(val), nil, nil
	case key == "cipassword":
		return s.hashPassword(g.vmid, val), nil, nil
	case key == "vmgenid" && val == "1":
		return s.randomUUID(g.vmid), nil, nil
	case strings.HasPrefix(key, "net") && reIndexed.MatchString(key):
		p, d, err := s.prepareNet(g, key, val, "macaddr")
		if err != nil {
			return "", nil, err
		}
		return printPropertyString(p.FormatObject, d), nil, nil
	case isDrive(key):
		return s.prepareDrive(c, g, key, val, defStorage, cloudinitAt)
	}
	return val, nil, nil
}

// reCloudinitStorage matches a cloud-init drive's volume: STORAGE:cloudinit.
var reCloudinitStorage = regexp.MustCompile(`^([^/:\s]+):cloudinit$`)

func (s *Sim) prepareDrive(c *call, g *guest, key, val, defStorage, cloudinitAt string) (string, *allocation, error) {
	p, d, err := s.parseRequestValue("qemu", key, val)
	if err != nil {
		return "", nil, err
	}
	file := d["file"]
	if file == "" {
		file = d["volume"]
		delete(d, "volume")
	}
	if file == "none" || file == "cdrom" || strings.HasPrefix(file, "/") {
		d["file"] = file
		return printPropertyString(p.FormatObject, d), nil, nil
	}
	// STORAGE:cloudinit (Qemu.pm create_disks: drive_is_cloudinit)
	if m := reCloudinitStorage.FindStringSubmatch(file); m != nil {
		if cloudinitAt != "" && cloudinitAt != key {
			return "", nil, dieErr("%s - cloud-init drive is already attached at '%s'", key, cloudinitAt)
		}
		st := s.storage(m[1])
		if st == nil {
			return "", nil, dieErr("storage '%s' does not exist", m[1])
		}
		delete(d, "file")
		d["media"] = "cdrom"
		return "", &allocation{key: key, storage: m[1], cloudinit: true, format: d["format"], rest: d}, nil
	}
	if m := reNewDisk.FindStringSubmatch(file); m != nil {
		sid := m[2]
		if sid == "" {
			sid = defStorage
		}
		sizeGiB, _ := strconv.ParseFloat(m[3], 64)
		if d["import-from"] != "" && sizeGiB != 0 {
			return "", nil, paramErr(map[string]string{key: "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>"})
		}
		st := s.storage(sid)
		if sid == "" || st == nil {
			return "", nil, dieErr("storage '%s' does not exist", sid)
		}
		if !st.onNode(g.node) || st.disabled {
			return "", nil, dieErr("storage '%s' is not available on node '%s'", sid, g.node)
		}
		if !st.content["images"] {
			return "", nil, dieErr("storage '%s' does not support content-type 'images'", sid)
		}
		a := &allocation{key: key, storage: sid, sizeBytes: sizeGiB * (1 << 30), format: d["format"],
			efi: key == "efidisk0", tpm: key == "tpmstate0", rest: d}
		if src := d["import-from"]; src != "" {
			v := s.lookupVolume(g.node, src)
			if v == nil {
				return "", nil, dieErr("volume '%s' does not exist", src)
			}
			if strings.Contains(src, "cloudinit") {
				// Text not verified against PVE; see docs/simulator.md.
				return "", nil, paramErr(map[string]string{key: "cannot import from cloudinit disk"})
			}
			if v.content != "images" && v.content != "import" {
				return "", nil, paramErr(map[string]string{key: fmt.Sprintf("%s has wrong type '%s' - needs to be 'images' or 'import'", src, v.content)})
			}
			a.importSrc = src
		}
		delete(d, "file")
		delete(d, "import-from")
		delete(d, "size")
		delete(d, "format")
		return "", a, nil
	}
	if d["import-from"] != "" {
		return "", nil, paramErr(map[string]string{key: "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>"})
	}
	// An existing volume: it must exist; an ISO needs media=cdrom (Qemu.pm create_disks).
	sid, _, _ := splitVolID(file)
	if s.storage(sid) == nil {
		return "", nil, dieErr("storage '%s' does not exist", sid)
	}
	v := s.lookupVolume(g.node, file)
	if v == nil {
		return "", nil, dieErr("volume '%s' does not exist", file)
	}
	if v.content == "iso" && d["media"] != "cdrom" {
		return "", nil, paramErr(map[string]string{key: "explicit 'media=cdrom' is required for iso images"})
	}
	if v.content != "iso" && v.content != "images" {
		return "", nil, paramErr(map[string]string{key: fmt.Sprintf("%s has wrong type '%s' - needs to be 'images' or 'iso'", file, v.content)})
	}
	if d["media"] != "cdrom" {
		d["size"] = formatSize(v.size)
	}
	d["file"] = file
	return printPropertyString(p.FormatObject, d), nil, nil
}

// parseRequestValue parses a property-string value of a request's config key, failing as the API's
// parameter check does.
func (s *Sim) parseRequestValue(kind, key, val string) (*schema.Prop, map[string]string, error) {
	p := s.desc(kind).prop(key)
	d, err := parsePropertyString(p.FormatObject, val, key)
	if err != nil {
		return nil, nil, paramErr(map[string]string{key: "invalid format - " + err.Error()})
	}
	return p, d, nil
}

// prepareNet parses a netN value of a request, whose bridge must exist, and gives a NIC without a MAC a
// random one in macKey (QEMU's macaddr, LXC's hwaddr).
func (s *Sim) prepareNet(g *guest, key, val, macKey string) (*schema.Prop, map[string]string, error) {
	p, d, err := s.parseRequestValue(g.kind, key, val)
	if err != nil {
		return nil, nil, err
	}
	if b := d["bridge"]; b != "" && !s.bridges[b] {
		return nil, nil, dieErr("bridge '%s' does not exist", b)
	}
	if d[macKey] == "" {
		d[macKey] = s.randomMAC(g.vmid)
	}
	return p, d, nil
}

// qemuKey is the config key a request parameter names: cdrom is an alias of ide2.
func qemuKey(param string) string {
	if param == "cdrom" {
		return "ide2"
	}
	return param
}

// prepareValues runs prepare on each request parameter in order: a value goes into vals under the config
// key prepare names, and an allocation (a create-form volume) is returned for the worker to make.
func prepareValues(params []string, vals map[string]string, prepare func(param string) (key, val string, a *allocation, err error)) ([]*allocation, error) {
	var allocs []*allocation
	for _, p := range params {
		key, v, a, err := prepare(p)
		if err != nil {
			return nil, err
		}
		if a != nil {
			allocs = append(allocs, a)
			continue
		}
		vals[key] = v
	}
	return allocs, nil
}

func cloudinitDrive(conf map[string]string) string {
	for _, k := range slices.Sorted(maps.Keys(conf)) {
		if isDrive(k) && strings.Contains(conf[k], "cloudinit") && strings.Contains(conf[k], "media=cdrom") {
			return k
		}
	}
	return ""
}

// handleQemuCreate is POST /nodes/{node}/qemu (create_vm, task qmcreate).
func (s *Sim) handleQemuCreate(c *call) (any, error) {
	vmid := c.vmid()
	keys := configKeys(c)
	if err := rootOnlyQemu(c, keys); err != nil {
		return nil, err
	}
	if c.has("sshkeys") {
		if err := validateSSHKeys(c.str("sshkeys")); err != nil {
			return nil, err
		}
	}
	h, o, err := s.holdNewGuest(c, "qemu")
	if err != nil {
		return nil, err
	}
	defer h.release()
	if o != nil {
		return nil, dieErr("unable to create VM %d - %s %d already exists on node '%s'", vmid, o.typeWord(), vmid, o.node)
	}
	g := newGuest(c, "qemu")
	if c.str("template") == "1" {
		g.conf()["template"] = "1" // new disks become base volumes at once
	}
	cloudAt := ""
	allocs, err := prepareValues(keys, g.conf(), func(k string) (string, string, *allocation, error) {
		key := qemuKey(k)
		v, a, err := s.prepareQemuValue(c, g, key, c.str(k), c.str("storage"), cloudAt)
		if a != nil && a.cloudinit {
			cloudAt = key
		}
		return key, v, a, err
	})
	if err != nil {
		return nil, err
	}
	return s.spawnCreate(c, g, "qmcreate", h, func(g *guest, l taskLog) error {
		conf := g.conf()
		var created []string
		for _, a := range allocs {
			volid, err := s.allocate(g, a, l)
			if err != nil {
				for _, v := range created {
					s.deleteVolume(g.node, v)
				}
				delete(s.guests, vmid)
				return fmt.Errorf("unable to create VM %d - %w", vmid, err)
			}
			created = append(created, volid)
			d := a.rest
			d["file"] = volid
			if !a.cloudinit {
				v := s.lookupVolume(g.node, volid)
				d["size"] = formatSize(v.size)
			}
			conf[a.key] = printPropertyString(s.qemuDesc.prop(a.key).FormatObject, d)
		}
		if _, ok := conf["smbios1"]; !ok {
			conf["smbios1"] = "uuid=" + s.randomUUID(vmid)
		}
		if v, ok := conf["vmgenid"]; !ok || v == "1" {
			if conf["arch"] != "aarch64" {
				conf["vmgenid"] = s.randomUUID(vmid)
			}
		}
		if _, ok := conf["boot"]; !ok {
			// print_bootorder gives "" for no devices, and an empty boot is not written.
			if order := defaultBootOrder(conf); order != "" {
				conf["boot"] = order
			}
		}
		conf["meta"] = fmt.Sprintf("creation-qemu=%s,ctime=%d", simQemuVersion, s.stampUnix())
		return nil
	}, s.qemuStartNow), nil
}

// defaultBootOrder is QemuServer.pm get_default_bootdevices: the first disk, the first cdrom, the first
// NIC, in device order ide, sata, scsi, virtio, printed as print_bootorder does; "" when there is none
// ("order=" alone is not a valid pve-qm-boot).
func defaultBootOrder(conf map[string]string) string {
	var disk, cd, net string
	for _, bus := range []string{"ide", "sata", "scsi", "virtio"} {
		for i := 0; i <= 30; i++ {
			k := bus + strconv.Itoa(i)
			v, ok := conf[k]
			if !ok {
				continue
			}
			if strings.Contains(v, "media=cdrom") {
				if cd == "" && !strings.Contains(v, "cloudinit") {
					cd = k
				}
			} else if disk == "" {
				disk = k
			}
		}
	}
	for i := 0; i <= 31; i++ {
		k := "net" + strconv.Itoa(i)
		if _, ok := conf[k]; ok {
			net = k
			break
		}
	}
	var order []string
	for _, d := range []string{disk, cd, net} {
		if d != "" {
			order = append(order, d)
		}
	}
	if len(order) == 0 {
		return ""
	}
	return "order=" + strings.Join(order, ";")
}

// handleQemuConfigUpdate is POST (async, qmconfig) and PUT (sync) …/qemu/{vmid}/config (update_vm_api).
func (s *Sim) handleQemuConfigUpdate(c *call) (any, error) {
	if err := checkSkiplock(c); err != nil {
		return nil, err
	}
	keys := configKeys(c)
	deletes := splitList(c.str("delete"))
	if len(keys) == 0 && len(deletes) == 0 && !c.has("revert") {
		return nil, dieErr("no options specified")
	}
	for i, k := range deletes {
		k = qemuKey(k)
		deletes[i] = k
		if c.has(k) {
			return nil, paramErr(map[string]string{"delete": fmt.Sprintf("you can't use '-%s' and -delete %s' at the same time", k, k)})
		}
		if s.qemuDesc.prop(k) == nil {
			return nil, paramErr(map[string]string{"delete": fmt.Sprintf("unknown option '%s'", k)})
		}
	}
	if err := rootOnlyQemu(c, keys); err != nil {
		return nil, err
	}
	if c.has("sshkeys") {
		if err := validateSSHKeys(c.str("sshkeys")); err != nil {
			return nil, err
		}
	}
	// update_vm_api: everything runs under lock_config; the POST worker is forked inside it and so keeps
	// the flock until it ends.
	h, err := s.holdGuestFlock("qemu", c.vmid(), "default")
	if err != nil {
		return nil, err
	}
	defer h.release()
	g, err := s.guestOn(c, "qemu")
	if err != nil {
		return nil, err
	}
	if d := c.str("digest"); d != "" && d != g.digest() {
		return nil, dieErr("checksum mismatch (file change by other user?)")
	}
	if l := g.conf()["lock"]; l != "" && c.str("skiplock") != "1" {
		return nil, dieErr("VM %d is locked (%s)", g.vmid, l)
	}
	vals := map[string]string{}
	cloudAt := cloudinitDrive(g.conf())
	allocs, err := prepareValues(keys, vals, func(k string) (string, string, *allocation, error) {
		key := qemuKey(k)
		if key == "boot" {
			if err := checkBootOrder(c.str(k), g.conf(), c.params); err != nil {
				return "", "", nil, err
			}
		}
		v, a, err := s.prepareQemuValue(c, g, key, c.str(k), c.str("storage"), cloudAt)
		return key, v, a, err
	})
	if err != nil {
		return nil, err
	}
	force := c.str("force") == "1"
	apply := func(l taskLog) error {
		return s.applyQemuUpdate(g, vals, allocs, deletes, force, l)
	}
	if c.method == "PUT" {
		var lines []string
		err := apply(taskLog{t: &task{lines: lines}})
		if err != nil {
			return nil, dieErr("%s", strings.TrimSuffix(err.Error(), "\n"))
		}
		return nil, nil
	}
	return s.spawn(heldWorker(c, "qmconfig", g.vmid, h, func(l taskLog) error {
		if _, err := s.reloadGuest(g.vmid, g.confPath()); err != nil {
			return err
		}
		return apply(l)
	})), nil
}

func checkBootOrder(val string, conf map[string]string, params map[string]value) error {
	i := strings.Index(val, "order=")
	if i < 0 {
		return nil
	}
	o := val[i+6:]
	if j := strings.Index(o, ","); j >= 0 {
		o = o[:j]
	}
	for _, dev := range strings.Split(o, ";") {
		if _, ok := conf[dev]; ok {
			continue
		}
		if _, ok := params[dev]; ok {
			continue
		}
		return paramErr(map[string]string{"boot": fmt.Sprintf("invalid bootorder: device '%s' does not exist'", dev)})
	}
	return nil
}

// applyQemuUpdate writes an update: on a stopped VM everything is applied at once; on a running VM
// fast-plug keys and hot-pluggable NICs/disks are applied and the rest stays pending.
func (s *Sim) applyQemuUpdate(g *guest, vals map[string]string, allocs []*allocation, deletes []string, force bool, l taskLog) error {
	conf := g.conf()
	hot := func(k string, newVal string, del bool) bool {
		return !g.running || qemuLiveChange(conf, k, newVal, del)
	}
	for _, k := range deletes {
		_, inConf := conf[k]
		if !inConf {
			if g.file.dropPending(k) {
				continue
			}
			l.printf("cannot delete '%s' - not set in current configuration!", k)
			continue
		}
		if !hot(k, "", true) {
			g.file.pendDelete(k, force)
			continue
		}
		old := conf[k]
		delete(conf, k)
		if strings.HasPrefix(k, "unused") {
			s.freeOwned(g, old)
			continue
		}
		if isDrive(k) {
			volid, _, ok := s.volumeOfKey("qemu", k, old)
			if ok && !strings.Contains(old, "media=cdrom") {
				if force {
					s.freeOwned(g, volid)
				} else {
					addUnused(conf, volid)
				}
			}
		}
	}
	for _, a := range allocs {
		volid, err := s.allocate(g, a, l)
		if err != nil {
			return err
		}
		d := a.rest
		d["file"] = volid
		if !a.cloudinit {
			d["size"] = formatSize(s.lookupVolume(g.node, volid).size)
		}
		vals[a.key] = printPropertyString(s.qemuDesc.prop(a.key).FormatObject, d)
	}
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		g.file.cancelPendingDelete(k)
		if hot(k, vals[k], false) {
			if old, ok := conf[k]; ok && isDrive(k) && old != vals[k] {
				if volid, _, ok := s.volumeOfKey("qemu", k, old); ok && !strings.Contains(old, "media=cdrom") &&
					!strings.HasPrefix(vals[k], volid+",") && vals[k] != volid {
					addUnused(conf, volid)
				}
			}
			conf[k] = vals[k]
			g.file.dropPending(k)
		} else {
			g.file.setPending(k, vals[k])
		}
	}
	// write_vm_config drops unusedN entries whose volume is used again.
	for _, k := range slices.Sorted(maps.Keys(conf)) {
		if strings.HasPrefix(k, "unused") {
			for _, k2 := range slices.Sorted(maps.Keys(conf)) {
				if isDrive(k2) && strings.HasPrefix(conf[k2], conf[k]+",") {
					delete(conf, k)
				}
			}
		}
	}
	cleanupPending(g.file.pending, conf)
	g.file.tidyPending()
	g.write()
	return nil
}

func addUnused(conf map[string]string, volid string) {
	for i := 0; i <= 255; i++ {
		k := fmt.Sprintf("unused%d", i)
		if v, ok := conf[k]; ok && v == volid {
			return
		}
	}
	for i := 0; i <= 255; i++ {
		k := fmt.Sprintf("unused%d", i)
		if _, ok := conf[k]; !ok {
			conf[k] = volid
			return
		}
	}
}

func (s *Sim) freeOwned(g *guest, volid string) {
	if v := s.lookupVolume(g.node, volid); v != nil && v.vmid == g.vmid {
		s.deleteVolume(g.node, volid)
	}
}

// applyPending folds pending changes into the config (vmconfig_apply_pending), on start and stop.
func (s *Sim) applyPending(g *guest) {
	if g.file.pending == nil {
		return
	}
	conf := g.conf()
	for k, force := range pendingDeletes(g.file.pending.conf["delete"]) {
		old, ok := conf[k]
		if !ok {
			continue
		}
		delete(conf, k)
		if volid, _, isVol := s.volumeOfKey(g.kind, k, old); isVol && (isDrive(k) || k == "rootfs" || strings.HasPrefix(k, "mp")) {
			if force {
				s.freeOwned(g, volid)
			} else {
				addUnused(conf, volid)
			}
		}
	}
	for k, v := range g.file.pending.conf {
		if k != "delete" {
			conf[k] = v
		}
	}
	g.file.pending = nil
	g.write()
}

func (s *Sim) handleQemuStart(c *call) (any, error) {
	g, err := s.guestSkiplock(c, "qemu")
	if err != nil {
		return nil, err
	}
	vmid := g.vmid
	if g.ha {
		return s.haTask(c, g, "hastart", "started"), nil
	}
	skiplock := c.str("skiplock") == "1"
	cfgPath := g.confPath()
	// vm_start runs under lock_config inside the worker.
	return s.spawn(s.lockingWorker(c, "qmstart", "qemu", vmid, func(l taskLog) error {
		g, err := s.reloadGuest(vmid, cfgPath)
		if err != nil {
			return err
		}
		if lk := g.conf()["lock"]; lk != "" && !skiplock && lk != "suspended" {
			return fmt.Errorf("VM %d is locked (%s)", vmid, lk)
		}
		if g.conf()["lock"] == "suspended" {
			delete(g.conf(), "lock") // resuming a VM suspended to disk
			g.write()
		}
		return s.qemuStartNow(g, l)
	})), nil
}

// haTask answers a power request for an HA-managed guest: a hastart/hastop task that only asks the HA
// manager (Qemu.pm / LXC Status.pm: "Requesting HA start for VM 100"); the state changes shortly after
// the task has ended.
func (s *Sim) haTask(c *call, g *guest, typ, state string) string {
	vmid := g.vmid
	word := g.typeWord()
	verb := "start"
	if state == "stopped" {
		verb = "stop"
	}
	return s.startTask(c.str("node"), typ, strconv.Itoa(vmid), c.user, func(l taskLog) error {
		l.printf("Requesting HA %s for %s %d", verb, word, vmid)
		s.haRequest(vmid, state) // the HA manager acts after haDelay (ha.go)
		return nil
	})
}

// qemuStartNow is vm_start's checks and effect (QemuServer.pm vm_start / config_to_command checks that
// the simulator models).
func (s *Sim) qemuStartNow(g *guest, l taskLog) error {
	if g.conf()["template"] == "1" {
		return fmt.Errorf("you can't start a vm if it's a template")
	}
	if g.running {
		return fmt.Errorf("VM %d already running", g.vmid)
	}
	if err := s.startChecks(g); err != nil {
		return err
	}
	s.applyPending(g)
	if _, stale := g.file.special["cloudinit"]; stale && g.file.hasCloudInit() {
		// vm_start generates the cloud-init drive from the config (apply_cloudinit_config).
		g.regenerateCloudInit()
		g.write()
	}
	g.running, g.qmpstatus, g.startedAt = true, "running", time.Now()
	return nil
}

var reMachineVer = regexp.MustCompile(`^pc(?:-(?:i440fx|q35))?-(\d+)\.(\d+)`)

// startChecks are the config errors vm_start raises that the simulator models (the EXPECT_ERROR
// fixtures of qemu-server's cfg2cmd tests).
func (s *Sim) startChecks(g *guest) error {
	conf := g.conf()
	for _, k := range slices.Sorted(maps.Keys(conf)) {
		if !isDrive(k) {
			continue
		}
		d, err := parsePropertyString(s.qemuDesc.prop(k).FormatObject, conf[k], k)
		if err != nil {
			continue
		}
		file := d["file"]
		sid, volname, ok := splitVolID(file)
		if !ok {
			continue
		}
		st := s.storage(sid)
		if st == nil {
			return fmt.Errorf("storage '%s' does not exist", sid)
		}
		content, _, _, err := classifyVolname(st, volname)
		if err == nil && content == "iso" && d["media"] == "" {
			return fmt.Errorf("%s: explicit media parameter is required for iso images", k)
		}
		if err == nil && content == "images" && !st.content["images"] {
			return fmt.Errorf("storage '%s' does not support content-type 'images'", sid)
		}
	}
	machine := conf["machine"]
	if strings.Contains(machine, "viommu=intel") && !strings.Contains(machine, "q35") {
		return fmt.Errorf("to use Intel vIOMMU please set the machine type to q35")
	}
	if strings.Contains(machine, "aw-bits=") && !strings.Contains(machine, "viommu=") {
		return fmt.Errorf("cannot set aw-bits if no vIOMMU is configured")
	}
	for i := 0; i <= 13; i++ {
		if _, ok := conf[fmt.Sprintf("usb%d", i)]; !ok || i < 5 {
			continue
		}
		old := false
		if m := reMachineVer.FindStringSubmatch(strings.SplitN(machine, ",", 2)[0]); m != nil {
			major, _ := strconv.Atoi(m[1])
			minor, _ := strconv.Atoi(m[2])
			old = major < 7 || major == 7 && minor < 1
		}
		ost := conf["ostype"]
		if old || (ost != "" && ost != "l26" && !strings.HasPrefix(ost, "win") || ost == "win7" || ost == "wxp" || ost == "w2k" || ost == "w2k3" || ost == "w2k8" || ost == "wvista") {
			return fmt.Errorf("using usb13 is only possible with machine type >= 7.1 and ostype l26 or windows > 7")
		}
	}
	base := strings.TrimPrefix(strings.SplitN(machine, ",", 2)[0], "type=")
	if m := reMachineVer.FindStringSubmatch(base); m != nil {
		// QemuServer::Machine can_run_pve_machine_version: the node's QEMU must be at least the machine's
		// major.minor, and its +pveN no higher than the feature level qemu-server knows for that version.
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		if !strings.Contains(base, "+pve") {
			base += "+pve0"
		}
		if major > simQemuMajor || major == simQemuMajor && minor > simQemuMinor {
			return fmt.Errorf("Installed QEMU version '%s' is too old to run machine type '%s', please upgrade node '%s'", simQemuVersion, base, g.node)
		}
		if p := rePVELevel.FindStringSubmatch(base); p != nil {
			level, _ := strconv.Atoi(p[1])
			ver := m[1] + "." + m[2]
			if highest := pveMachineLevels[ver]; level > highest {
				return fmt.Errorf("Installed qemu-server (max feature level for %s is pve%d) is too old to run machine type '%s', please upgrade node '%s'", ver, highest, base, g.node)
			}
		}
	}
	return nil
}

// The QEMU version the simulated nodes run.
const (
	simQemuVersion = "10.0.2"
	simQemuMajor   = 10
	simQemuMinor   = 0
)

// pveMachineLevels is qemu-server's $PVE_MACHINE_VERSION: the highest +pveN revision of a QEMU machine
// version (0 for versions not listed). It follows the qemu-server of the simulated PVE as far as known
// (see docs/simulator.md); a newer qemu-server may know more revisions.
var pveMachineLevels = map[string]int{"4.1": 2, "9.2": 1}

var rePVELevel = regexp.MustCompile(`\+pve(\d+)`)

func (s *Sim) handleQemuStop(c *call) (any, error) {
	if err := checkSkiplock(c); err != nil {
		return nil, err
	}
	if c.has("keepActive") && !c.isRoot() {
		return nil, paramErr(map[string]string{"keepActive": "Only root may use this option."})
	}
	g, err := s.guestOn(c, "qemu")
	if err != nil {
		return nil, err
	}
	shutdown := strings.HasSuffix(c.template, "/shutdown")
	forceStop := c.str("forceStop") == "1"
	if shutdown && g.running && g.qmpstatus == "paused" {
		if !forceStop {
			return nil, dieErr("VM is paused - cannot shutdown")
		}
		shutdown = false // Qemu.pm vm_shutdown: "VM is paused - stop instead of shutdown"
	}
	if g.ha {
		return s.haTask(c, g, "hastop", "stopped"), nil
	}
	typ := "qmstop"
	if strings.HasSuffix(c.template, "/shutdown") {
		typ = "qmshutdown"
	}
	vmid := g.vmid
	skiplock := c.str("skiplock") == "1"
	cfgPath := g.confPath()
	timeout := atoiDef(c.str("timeout"), 60)
	var wait time.Duration
	timesOut := shutdown && g.running && g.ignoreACPI
	if timesOut {
		wait = min(s.shutdownWait, time.Duration(timeout)*time.Second)
	}
	// vm_stop runs under lock_config inside the worker (QemuServer.pm vm_stop).
	ts := s.lockingWorker(c, typ, "qemu", vmid, func(l taskLog) error {
		g, err := s.reloadGuest(vmid, cfgPath)
		if err != nil {
			return err
		}
		if lk := g.conf()["lock"]; lk != "" && !skiplock {
			return fmt.Errorf("VM %d is locked (%s)", vmid, lk)
		}
		if !g.running {
			return nil // stopping a stopped VM is a no-op
		}
		if timesOut && g.ignoreACPI {
			if !forceStop {
				return fmt.Errorf("VM quit/powerdown failed - got timeout")
			}
			l.printf("VM still running - terminating now with SIGTERM")
		}
		g.running, g.qmpstatus = false, ""
		s.applyPending(g)
		return nil
	})
	ts.extraDelay = wait
	return s.spawn(ts), nil
}

// handleQemuSuspend is POST …/status/suspend (task qmpause; with todisk=1 qmsuspend, which saves the state
// and stops the VM with `lock: suspended`).
func (s *Sim) handleQemuSuspend(c *call) (any, error) {
	g, err := s.guestSkiplock(c, "qemu")
	if err != nil {
		return nil, err
	}
	if !g.running {
		return nil, dieErr("VM %d not running", g.vmid)
	}
	todisk := c.str("todisk") == "1"
	if todisk && g.ha {
		return nil, dieErr("Cannot suspend HA managed VM to disk")
	}
	typ := "qmpause"
	if todisk {
		typ = "qmsuspend"
	}
	vmid := g.vmid
	skiplock := c.str("skiplock") == "1"
	return s.spawn(s.lockingWorker(c, typ, "qemu", vmid, func(l taskLog) error {
		g, ok := s.guests[vmid]
		if !ok || !g.running {
			return fmt.Errorf("VM %d not running", vmid)
		}
		if lk := g.conf()["lock"]; lk != "" && !skiplock {
			return fmt.Errorf("VM %d is locked (%s)", vmid, lk)
		}
		if todisk {
			g.running, g.qmpstatus = false, ""
			g.conf()["lock"] = "suspended"
			g.write()
			return nil
		}
		g.qmpstatus = "paused"
		return nil
	})), nil
}

// handleQemuResume is POST …/status/resume (task qmresume).
func (s *Sim) handleQemuResume(c *call) (any, error) {
	g, err := s.guestSkiplock(c, "qemu")
	if err != nil {
		return nil, err
	}
	toDisk := g.conf()["lock"] == "suspended"
	if !toDisk && !g.running {
		return nil, dieErr("VM %d not running", g.vmid)
	}
	vmid := g.vmid
	return s.spawn(s.lockingWorker(c, "qmresume", "qemu", vmid, func(l taskLog) error {
		g, ok := s.guests[vmid]
		if !ok {
			return fmt.Errorf("VM %d not running", vmid)
		}
		if toDisk {
			delete(g.conf(), "lock")
			g.write()
			return s.qemuStartNow(g, l)
		}
		if g.running {
			g.qmpstatus = "running" // resuming a running VM is a no-op
		}
		return nil
	})), nil
}
