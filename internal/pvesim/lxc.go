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

// LXC endpoints (pve-container src/PVE/API2/LXC.pm, LXC/Config.pm, LXC/Status.pm).

func (s *Sim) handleLXCList(c *call) (any, error) {
	out := []map[string]any{}
	for _, g := range s.sortedGuests() {
		if g.kind == "lxc" && g.node == c.str("node") {
			out = append(out, s.vmStatus(g, false))
		}
	}
	return out, nil
}

var reLXCNewDisk = regexp.MustCompile(`^(?:([^/:\s]+):)?(\d+(\.\d+)?)$`)

// checkLXCPerms is LXC.pm check_ct_modify_config_perm for the root@pam-only rules.
func (s *Sim) checkLXCPerms(c *call, old map[string]string, newConf map[string]string, deletes []string, unprivileged bool) error {
	if c.isRoot() {
		return nil
	}
	check := func(k string, del bool) error {
		switch {
		case k == "rootfs" || regexp.MustCompile(`^mp\d+$`).MatchString(k):
			if del {
				return nil
			}
			d, err := parsePropertyString(s.lxcDesc.prop(k).FormatObject, newConf[k], k)
			if err != nil {
				return nil
			}
			if t := mountType(d["volume"]); t != "volume" {
				return permErr(fmt.Sprintf("mount point type %s is only allowed for root@pam", t))
			}
		case regexp.MustCompile(`^dev\d+$`).MatchString(k):
			return permErr("configuring device passthrough is only allowed for root@pam")
		case k == "features":
			if !unprivileged {
				return permErr("changing feature flags for privileged container is only allowed for root@pam")
			}
			parse := func(v string) map[string]string {
				d, _ := parsePropertyString(s.lxcDesc.prop("features").FormatObject, v, "features")
				return d
			}
			other := false
			if !del {
				nf := parse(newConf[k])
				if old != nil && old[k] != "" {
					of := parse(old[k])
					for f := range mergeKeys(of, nf) {
						if of[f] != nf[f] && f != "nesting" {
							other = true
						}
					}
				} else if len(nf) > 1 || (len(nf) == 1 && nf["nesting"] == "") {
					other = true
				}
			} else if old != nil {
				of := parse(old[k])
				if len(of) > 1 || (len(of) == 1 && of["nesting"] == "") {
					other = true
				}
			}
			if other {
				return permErr("changing feature flags (except nesting) is only allowed for root@pam")
			}
		case k == "hookscript":
			return permErr("changing the hookscript is only allowed for root@pam")
		}
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(newConf)) {
		if err := check(k, false); err != nil {
			return err
		}
	}
	for _, k := range deletes {
		if err := check(k, true); err != nil {
			return err
		}
	}
	return nil
}

func mergeKeys(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// mountType is LXC::Config classify_mountpoint: bind for absolute paths, device for /dev/…, else volume.
func mountType(vol string) string {
	if strings.HasPrefix(vol, "/dev/") {
		return "device"
	}
	if strings.HasPrefix(vol, "/") {
		return "bind"
	}
	return "volume"
}

// prepareLXCValue normalises one value and returns allocations for create-form mount points.
func (s *Sim) prepareLXCValue(g *guest, key, val, defStorage string) (string, *allocation, error) {
	switch {
	case key == "tags":
		return s.normalizeTags(val), nil, nil
	case strings.HasPrefix(key, "net") && reIndexed.MatchString(key):
		p, d, err := s.prepareNet(g, key, val, "hwaddr")
		if err != nil {
			return "", nil, err
		}
		if d["type"] == "" {
			d["type"] = "veth"
		}
		return printPropertyString(p.FormatObject, d), nil, nil
	case key == "rootfs" || regexp.MustCompile(`^mp\d+$`).MatchString(key):
		_, d, err := s.parseRequestValue("lxc", key, val)
		if err != nil {
			return "", nil, err
		}
		if m := reLXCNewDisk.FindStringSubmatch(d["volume"]); m != nil {
			sid := m[1]
			if sid == "" {
				sid = defStorage
			}
			st := s.storage(sid)
			if st == nil {
				return "", nil, dieErr("storage '%s' does not exist", sid)
			}
			if !st.content["rootdir"] {
				return "", nil, dieErr("storage '%s' does not support container directories", sid)
			}
			gib, _ := strconv.ParseFloat(m[2], 64)
			delete(d, "volume")
			delete(d, "size")
			return "", &allocation{key: key, storage: sid, sizeBytes: gib * (1 << 30), rest: d}, nil
		}
		return val, nil, nil
	}
	return val, nil, nil
}

// handleLXCCreate is POST /nodes/{node}/lxc (create_vm, task vzcreate); the vmid check is synchronous.
func (s *Sim) handleLXCCreate(c *call) (any, error) {
	vmid := c.vmid()
	nodeName := c.str("node")
	h, o, err := s.holdNewGuest(c, "lxc")
	if err != nil {
		return nil, err
	}
	defer h.release()
	if o != nil {
		return nil, dieErr("%s %d already exists on node '%s'", o.typeWord(), vmid, o.node)
	}
	keys := configKeys(c, "ostemplate", "password", "ssh-public-keys", "restore", "ignore-unpack-errors")
	newConf := map[string]string{}
	for _, k := range keys {
		newConf[k] = c.str(k)
	}
	unpriv := !c.has("unprivileged") || c.str("unprivileged") == "1"
	if err := s.checkLXCPerms(c, nil, newConf, nil, unpriv); err != nil {
		return nil, err
	}
	tmpl := c.str("ostemplate")
	if c.str("restore") != "1" {
		v := s.lookupVolume(nodeName, tmpl)
		if v == nil {
			return nil, dieErr("volume '%s' does not exist", tmpl)
		}
		if v.content != "vztmpl" {
			return nil, dieErr("volume '%s' has wrong content type '%s' - needs to be 'vztmpl'", tmpl, v.content)
		}
	}
	if c.has("ssh-public-keys") {
		if err := validateSSHKeys(strings.ReplaceAll(c.str("ssh-public-keys"), "%", "%25")); err != nil {
			return nil, err
		}
	}
	defStorage := c.str("storage")
	if defStorage == "" {
		defStorage = "local"
	}
	g := newGuest(c, "lxc")
	conf := g.conf()
	if _, ok := newConf["rootfs"]; !ok {
		newConf["rootfs"] = defStorage + ":4"
	}
	allocs, err := prepareValues(slices.Sorted(maps.Keys(newConf)), conf, func(k string) (string, string, *allocation, error) {
		v, a, err := s.prepareLXCValue(g, k, newConf[k], defStorage)
		return k, v, a, err
	})
	if err != nil {
		return nil, err
	}
	if _, ok := conf["hostname"]; !ok {
		conf["hostname"] = fmt.Sprintf("CT%d", vmid)
	}
	for k, def := range map[string]string{"memory": "512", "swap": "512", "arch": "amd64"} {
		if _, ok := conf[k]; !ok {
			conf[k] = def
		}
	}
	if _, ok := conf["ostype"]; !ok {
		conf["ostype"] = ostypeFromTemplate(tmpl)
	}
	if unpriv {
		conf["unprivileged"] = "1"
	} else {
		delete(conf, "unprivileged")
	}
	return s.spawnCreate(c, g, "vzcreate", h, func(g *guest, l taskLog) error {
		conf := g.conf()
		for _, a := range allocs {
			volid, err := s.allocate(g, a, l)
			if err != nil {
				delete(s.guests, vmid)
				return fmt.Errorf("unable to create CT %d - %w", vmid, err)
			}
			d := a.rest
			d["volume"] = volid
			d["size"] = formatSize(s.lookupVolume(g.node, volid).size)
			conf[a.key] = printPropertyString(s.lxcDesc.prop(a.key).FormatObject, d)
		}
		l.printf("extracting archive '%s'", tmpl)
		return nil
	}, func(g *guest, _ taskLog) error {
		g.running, g.startedAt = true, time.Now()
		return nil
	}), nil
}

func ostypeFromTemplate(t string) string {
	name := t[strings.LastIndex(t, "/")+1:]
	for _, os := range []string{"debian", "ubuntu", "centos", "fedora", "opensuse", "archlinux", "alpine", "gentoo", "nixos", "devuan", "almalinux", "rockylinux"} {
		if strings.HasPrefix(name, os) {
			return os
		}
	}
	return "unmanaged"
}

// handleLXCConfigUpdate is PUT …/lxc/{vmid}/config (update_pct_config, synchronous).
func (s *Sim) handleLXCConfigUpdate(c *call) (any, error) {
	keys := configKeys(c)
	deletes := splitList(c.str("delete"))
	if len(keys) == 0 && len(deletes) == 0 && !c.has("revert") {
		return nil, dieErr("no options specified")
	}
	for _, k := range deletes {
		if c.has(k) {
			return nil, paramErr(map[string]string{"delete": fmt.Sprintf("you can't use '-%s' and -delete %s' at the same time", k, k)})
		}
		if k == "memory" || k == "rootfs" || k == "ostype" {
			return nil, dieErr("unable to delete required option '%s'", k)
		}
		if s.lxcDesc.prop(k) == nil {
			return nil, paramErr(map[string]string{"delete": fmt.Sprintf("unknown option '%s'", k)})
		}
	}
	fl, err := s.lockGuestSync("lxc", c.vmid(), "default")
	if err != nil {
		return nil, err
	}
	defer s.releaseFlock(fl)
	g, err := s.guestOn(c, "lxc")
	if err != nil {
		return nil, err
	}
	// PVE::Tools::assert_if_modified
	if d := c.str("digest"); d != "" && d != g.digest() {
		return nil, dieErr("detected modified configuration - file changed by other user? Try again.")
	}
	if l := g.conf()["lock"]; l != "" {
		return nil, dieErr("CT %d is locked (%s)", g.vmid, l)
	}
	newConf := map[string]string{}
	for _, k := range keys {
		newConf[k] = c.str(k)
	}
	if err := s.checkLXCPerms(c, g.conf(), newConf, deletes, g.conf()["unprivileged"] == "1"); err != nil {
		return nil, err
	}
	if v, ok := newConf["unprivileged"]; ok && v != g.conf()["unprivileged"] && !(v == "0" && g.conf()["unprivileged"] == "") {
		return nil, dieErr("unable to modify read-only option: 'unprivileged'")
	}
	conf := g.conf()
	for _, k := range deletes {
		old, ok := conf[k]
		if !ok {
			g.file.dropPending(k)
			continue
		}
		if g.running && !lxcLiveChange(conf, k, true) {
			g.file.pendDelete(k, false)
			continue
		}
		delete(conf, k)
		if strings.HasPrefix(k, "unused") {
			s.freeOwned(g, old)
		} else if strings.HasPrefix(k, "mp") {
			if volid, _, ok := s.volumeOfKey("lxc", k, old); ok && mountType(volid) == "volume" {
				addUnused(conf, volid)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(newConf)) {
		v, a, err := s.prepareLXCValue(g, k, newConf[k], "")
		if err != nil {
			return nil, err
		}
		if a != nil {
			volid, err := s.allocate(g, a, taskLog{t: &task{}})
			if err != nil {
				return nil, dieErr("%v", err)
			}
			d := a.rest
			d["volume"] = volid
			d["size"] = formatSize(s.lookupVolume(g.node, volid).size)
			v = printPropertyString(s.lxcDesc.prop(k).FormatObject, d)
		}
		g.file.cancelPendingDelete(k)
		if g.running && !lxcLiveChange(conf, k, false) {
			g.file.setPending(k, v)
			continue
		}
		if old, ok := conf[k]; ok && reLXCMountKey.MatchString(k) {
			// apply_pending_mountpoint: a replaced volume is kept as unusedN.
			oldVol, _, _ := s.volumeOfKey("lxc", k, old)
			newVol, _, _ := s.volumeOfKey("lxc", k, v)
			if oldVol != "" && oldVol != newVol && mountType(oldVol) == "volume" {
				addUnused(conf, oldVol)
			}
		}
		conf[k] = v
		g.file.dropPending(k)
	}
	g.file.tidyPending()
	g.write()
	// update_vm writes the config, then update_lxc_config, which dies for a container without a rootfs:
	// the change is kept and the request fails.
	if err := lxcConfigCheck(g); err != nil {
		return nil, err
	}
	return nil, nil
}

// lxcConfigCheck is what PVE::LXC::update_lxc_config refuses, after a config write and before a start: a
// container (not a template) without a rootfs.
func lxcConfigCheck(g *guest) error {
	if g.conf()["template"] != "1" && g.conf()["rootfs"] == "" {
		return dieErr("missing 'rootfs' configuration")
	}
	return nil
}

func (s *Sim) handleLXCStart(c *call) (any, error) {
	g, err := s.guestSkiplock(c, "lxc")
	if err != nil {
		return nil, err
	}
	if g.ha {
		return s.haTask(c, g, "hastart", "started"), nil
	}
	if g.running {
		return nil, dieErr("CT %d already running", g.vmid)
	}
	// LXC/Status.pm vm_start: check_lock and fork_worker run under lock_config.
	g, h, err := s.lockedUnlessSkiplock(c, g)
	if err != nil {
		return nil, err
	}
	vmid := g.vmid
	path := g.confPath()
	return s.spawn(heldWorker(c, "vzstart", vmid, h, func(l taskLog) error {
		g, err := s.reloadGuest(vmid, path)
		if err != nil {
			return err
		}
		if g.conf()["template"] == "1" {
			return fmt.Errorf("you can't start a CT if it's a template")
		}
		if g.running {
			return fmt.Errorf("CT %d already running", vmid)
		}
		if err := lxcConfigCheck(g); err != nil {
			return fmt.Errorf("missing 'rootfs' configuration")
		}
		s.applyPending(g)
		g.running, g.startedAt = true, time.Now()
		return nil
	})), nil
}

func (s *Sim) handleLXCStop(c *call) (any, error) {
	g, err := s.guestSkiplock(c, "lxc")
	if err != nil {
		return nil, err
	}
	if g.ha {
		return s.haTask(c, g, "hastop", "stopped"), nil
	}
	if !g.running {
		return nil, dieErr("CT %d not running", g.vmid)
	}
	shutdown := strings.HasSuffix(c.template, "/shutdown")
	typ := "vzstop"
	if shutdown {
		typ = "vzshutdown"
	}
	g, h, err := s.lockedUnlessSkiplock(c, g)
	if err != nil {
		return nil, err
	}
	timeout := atoiDef(c.str("timeout"), 60)
	forceStop := c.str("forceStop") == "1"
	timesOut := shutdown && g.ignoreACPI
	var wait time.Duration
	if timesOut {
		wait = min(s.shutdownWait, time.Duration(timeout)*time.Second)
	}
	vmid := g.vmid
	ts := heldWorker(c, typ, vmid, h, func(l taskLog) error {
		g, ok := s.guests[vmid]
		if !ok {
			return nil
		}
		if timesOut && g.ignoreACPI && !forceStop {
			// LXC/Status.pm vm_shutdown runs lxc-stop --nokill; the failure text is lxc-stop's exit
			// through run_command (not verified against PVE; see docs/simulator.md).
			return fmt.Errorf("command 'lxc-stop -n %d --nokill --timeout %d' failed: exit code 1", vmid, timeout)
		}
		g.running = false
		s.applyPending(g)
		return nil
	})
	ts.extraDelay = wait
	return s.spawn(ts), nil
}
