package pvesim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Templates and resize: qemu-server src/PVE/API2/Qemu.pm (template, resize_vm), QemuServer.pm
// template_create; pve-container src/PVE/API2/LXC.pm template and LXC.pm resize_vm. Snapshots are in
// snapshot.go.

// handleQemuTemplate is POST …/qemu/{vmid}/template: the checks and `template: 1` happen under the flock
// before the qmtemplate worker renames the disks to base volumes.
func (s *Sim) handleQemuTemplate(c *call) (any, error) {
	g, h, err := s.lockedGuest(c, "qemu")
	if err != nil {
		return nil, err
	}
	defer h.release()
	disk := c.str("disk")
	if len(g.file.snapshots) > 0 {
		return nil, dieErr("unable to create template, because VM contains snapshots")
	}
	if g.conf()["template"] == "1" && disk == "" {
		return nil, dieErr("you can't convert a template to a template")
	}
	if g.running {
		return nil, dieErr("you can't convert a VM to template if VM is running")
	}
	g.conf()["template"] = "1"
	g.write()
	vmid, cfgPath := g.vmid, g.confPath()
	return s.spawn(heldWorker(c, "qmtemplate", vmid, h, func(l taskLog) error {
		g, err := s.reloadGuest(vmid, cfgPath)
		if err != nil {
			return err
		}
		conf := g.conf()
		for _, k := range slices.Sorted(maps.Keys(conf)) {
			if !isDrive(k) || (disk != "" && k != disk) {
				continue
			}
			volid, _, ok := s.volumeOfKey("qemu", k, conf[k])
			if !ok || isBaseVolid(volid) { // cdroms and the cloud-init drive stay as they are
				continue
			}
			nv := s.renameToBase(g.node, volid)
			conf[k] = strings.Replace(conf[k], volid, nv, 1)
		}
		g.write()
		return nil
	})), nil
}

// handleLXCTemplate is POST …/lxc/{vmid}/template. It answers null although the work runs in a
// background vztemplate task, which sets `template: 1` when it is done.
func (s *Sim) handleLXCTemplate(c *call) (any, error) {
	g, h, err := s.lockedGuest(c, "lxc")
	if err != nil {
		return nil, err
	}
	defer h.release()
	if len(g.file.snapshots) > 0 {
		return nil, dieErr("unable to create template, because CT contains snapshots")
	}
	if g.conf()["template"] == "1" {
		return nil, dieErr("you can't convert a template to a template")
	}
	if g.running {
		return nil, dieErr("you can't convert a CT to template if the CT is running")
	}
	for _, k := range slices.Sorted(maps.Keys(g.conf())) {
		if !reLXCMountKey.MatchString(k) {
			continue
		}
		volid, _, ok := s.volumeOfKey("lxc", k, g.conf()[k])
		if !ok {
			continue
		}
		sid, _, _ := splitVolID(volid)
		if st := s.storage(sid); st != nil && st.fileBased() {
			return nil, dieErr("Directory storage '%s' does not support container templates!", sid)
		}
	}
	vmid, cfgPath := g.vmid, g.confPath()
	s.spawn(heldWorker(c, "vztemplate", vmid, h, func(l taskLog) error {
		g, err := s.reloadGuest(vmid, cfgPath)
		if err != nil {
			return err
		}
		conf := g.conf()
		for _, k := range slices.Sorted(maps.Keys(conf)) {
			if !reLXCMountKey.MatchString(k) {
				continue
			}
			volid, _, ok := s.volumeOfKey("lxc", k, conf[k])
			if !ok || mountType(volid) != "volume" {
				continue
			}
			nv := s.renameToBase(g.node, volid)
			conf[k] = strings.Replace(conf[k], volid, nv, 1)
		}
		conf["template"] = "1"
		g.write()
		return nil
	}))
	return nil, nil
}

// resizeTarget computes the new size of a resize: "+N" grows by N, "N" sets N; no suffix means bytes.
func resizeTarget(cur int64, sizestr string) (int64, bool) {
	ext := strings.HasPrefix(sizestr, "+")
	n, ok := parseSize(strings.TrimPrefix(sizestr, "+"))
	if !ok {
		return 0, false
	}
	if ext {
		return cur + n, true
	}
	return n, true
}

// handleQemuResize is PUT …/qemu/{vmid}/resize (task resize since qemu-server 8.0.2); every check runs
// in the worker under the flock.
func (s *Sim) handleQemuResize(c *call) (any, error) {
	g, err := s.guestSkiplock(c, "qemu")
	if err != nil {
		return nil, err
	}
	vmid, disk, sizestr, digest := g.vmid, c.str("disk"), c.str("size"), c.str("digest")
	skiplock := c.str("skiplock") == "1"
	cfgPath := g.confPath()
	return s.spawn(s.lockingWorker(c, "resize", "qemu", vmid, func(l taskLog) error {
		g, err := s.reloadGuest(vmid, cfgPath)
		if err != nil {
			return err
		}
		if digest != "" && digest != g.digest() {
			return fmt.Errorf("checksum mismatch (file change by other user?)")
		}
		if !skiplock {
			if err := checkLock(g); err != nil {
				return err
			}
		}
		val, ok := g.conf()[disk]
		if !ok {
			return fmt.Errorf("disk '%s' does not exist", disk)
		}
		if strings.Contains(val, "media=cdrom") {
			return fmt.Errorf("you can't resize a cdrom")
		}
		p := s.qemuDesc.prop(disk)
		d, err := parsePropertyString(p.FormatObject, val, disk)
		if err != nil {
			return fmt.Errorf("unable to parse drive options for '%s'", disk)
		}
		token, _ := parseSize(d["size"])
		cur := s.volumeSize(g.node, d["file"], token)
		newSize, ok := resizeTarget(cur, sizestr)
		if !ok {
			return fmt.Errorf("invalid size string")
		}
		if newSize < cur {
			return fmt.Errorf("shrinking disks is not supported")
		}
		if newSize == cur {
			return nil // same size: nothing to do
		}
		if v := s.lookupVolume(g.node, d["file"]); v != nil {
			s.resizeVolume(v, newSize)
		}
		d["size"] = formatSize(newSize)
		g.conf()[disk] = printPropertyString(p.FormatObject, d)
		g.write()
		l.printf("Image resized.")
		return nil
	})), nil
}

// handleLXCResize is PUT …/lxc/{vmid}/resize: pve-container checks synchronously under the flock and
// forks the resize worker inside it.
func (s *Sim) handleLXCResize(c *call) (any, error) {
	g, h, err := s.lockedGuest(c, "lxc")
	if err != nil {
		return nil, err
	}
	defer h.release()
	if d := c.str("digest"); d != "" && d != g.digest() {
		return nil, dieErr("detected modified configuration - file changed by other user? Try again.")
	}
	disk := c.str("disk")
	val, ok := g.conf()[disk]
	if !ok {
		// Text not verified against PVE; see docs/simulator.md.
		return nil, dieErr("can't resize volume: %s", disk)
	}
	p := s.lxcDesc.prop(disk)
	d, err := parsePropertyString(p.FormatObject, val, disk)
	if err != nil || mountType(d["volume"]) != "volume" {
		return nil, dieErr("can't resize volume: %s", disk)
	}
	token, _ := parseSize(d["size"])
	cur := s.volumeSize(g.node, d["volume"], token)
	newSize, ok := resizeTarget(cur, c.str("size"))
	if !ok {
		return nil, dieErr("invalid size string")
	}
	if newSize < cur {
		return nil, dieErr("unable to shrink disk size")
	}
	if newSize == cur {
		return nil, dieErr("disk is already at specified size")
	}
	vmid, cfgPath := g.vmid, g.confPath()
	return s.spawn(heldWorker(c, "resize", vmid, h, func(l taskLog) error {
		g, err := s.reloadGuest(vmid, cfgPath)
		if err != nil {
			return err
		}
		if v := s.lookupVolume(g.node, d["volume"]); v != nil {
			s.resizeVolume(v, newSize)
		}
		d["size"] = formatSize(newSize)
		g.conf()[disk] = printPropertyString(p.FormatObject, d)
		g.write()
		return nil
	})), nil
}
