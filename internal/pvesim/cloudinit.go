package pvesim

import (
	"maps"
	"slices"
	"strings"
)

// The state of a VM's cloud-init drive. PVE writes the drive (a generated image) when the VM starts and
// when asked to regenerate it (PUT …/cloudinit); between those, a change to a cloud-init key of the config
// leaves the drive stale. qemu-server records what the drive was generated with in the config file's
// [special:cloudinit] section: for each changed key its value at generation time, and under "added" the
// keys that had none. Starting the VM or regenerating the drive clears the section, and so does adding a
// cloud-init drive (vmconfig_apply_pending generates a drive it applies). A running VM whose hotplug option
// holds "cloudinit" has its drive regenerated at once on every change.

// ciAddedKey is the [special:cloudinit] entry listing the cloud-init keys added since the drive was
// generated.
const ciAddedKey = "added"

// cloudInitKeys returns the cloud-init keys of a config with their values.
func cloudInitKeys(conf map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range conf {
		if reCloudInitKey.MatchString(k) {
			out[k] = v
		}
	}
	return out
}

// recordCloudInit records in [special:cloudinit] the cloud-init keys that changed since the last write of a
// VM with a cloud-init drive, keeping for each the value the drive holds (the first recorded one).
func (g *guest) recordCloudInit() {
	if g.kind != "qemu" {
		return
	}
	now := cloudInitKeys(g.conf())
	before, hadDrive := g.ciSeen, g.ciDrive
	g.ciSeen, g.ciDrive = now, cloudinitDrive(g.conf()) != ""
	if before == nil || !g.file.hasCloudInit() {
		return
	}
	if (g.ciDrive && !hadDrive) || (g.running && hotplugFeatures(g.conf()["hotplug"])["cloudinit"]) {
		g.regenerateCloudInit()
		return
	}
	ci := g.file.special["cloudinit"]
	if ci == nil {
		ci = newSection()
	}
	added := splitList(ci.conf[ciAddedKey])
	keys := map[string]bool{}
	for k := range before {
		keys[k] = true
	}
	for k := range now {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		old, had := before[k]
		if nv, has := now[k]; had == has && old == nv {
			continue
		}
		if _, recorded := ci.conf[k]; recorded || slices.Contains(added, k) {
			continue
		}
		if had {
			ci.conf[k] = old
		} else {
			added = append(added, k)
		}
	}
	if len(added) > 0 {
		ci.conf[ciAddedKey] = strings.Join(added, ",")
	}
	if len(ci.conf) > 0 {
		g.file.special["cloudinit"] = ci
	}
}

// regenerateCloudInit writes the drive from the current config: the record of changes is dropped
// (Cloudinit.pm apply_cloudinit_config).
func (g *guest) regenerateCloudInit() {
	delete(g.file.special, "cloudinit")
	g.ciSeen, g.ciDrive = cloudInitKeys(g.conf()), cloudinitDrive(g.conf()) != ""
}

// handleCloudInitGet is GET …/qemu/{vmid}/cloudinit (Qemu.pm cloudinit_pending): the keys added since the
// drive was generated (pending only), every set cloud-init key with the value the drive holds (and the
// config's as pending when it changed), and the keys deleted since (delete=1); cipassword masked. PVE lists
// them in hash order; the simulator sorts them by key.
func (s *Sim) handleCloudInitGet(c *call) (any, error) {
	g, err := s.guestOn(c, "qemu")
	if err != nil {
		return nil, err
	}
	conf := g.conf()
	ci := map[string]string{}
	if sec := g.file.special["cloudinit"]; sec != nil {
		ci = sec.conf
	}
	mask := func(k, v string) any {
		if k == "cipassword" {
			return "**********"
		}
		return s.renderValue("qemu", k, v)
	}
	added := splitList(ci[ciAddedKey])
	out := []map[string]any{}
	for _, k := range added {
		item := map[string]any{"key": k}
		if v, ok := conf[k]; ok {
			item["pending"] = mask(k, v)
		}
		out = append(out, item)
	}
	for _, k := range slices.Sorted(maps.Keys(cloudInitKeys(conf))) {
		v := conf[k]
		if !perlTrue(v) || slices.Contains(added, k) {
			continue
		}
		item := map[string]any{"key": k}
		if old := ci[k]; perlTrue(old) {
			item["value"], item["pending"] = mask(k, old), mask(k, v)
		} else {
			item["value"] = mask(k, v)
		}
		out = append(out, item)
	}
	for _, k := range slices.Sorted(maps.Keys(ci)) {
		if k == ciAddedKey || perlTrue(conf[k]) {
			continue
		}
		out = append(out, map[string]any{"key": k, "delete": 1})
	}
	slices.SortStableFunc(out, func(a, b map[string]any) int { return strings.Compare(a["key"].(string), b["key"].(string)) })
	return out, nil
}

// handleCloudInitUpdate is PUT …/qemu/{vmid}/cloudinit (Qemu.pm cloudinit_update): under the config lock and
// check_lock, vmconfig_update_cloudinit_drive regenerates the drive of a VM that has one (a VM without one
// is left as it is); synchronous, null.
func (s *Sim) handleCloudInitUpdate(c *call) (any, error) {
	fl, err := s.lockGuestSync("qemu", c.vmid(), "default")
	if err != nil {
		return nil, err
	}
	defer s.releaseFlock(fl)
	g, err := s.guestOn(c, "qemu")
	if err != nil {
		return nil, err
	}
	if err := checkLock(g); err != nil {
		return nil, dieErr("%s", err.Error())
	}
	if cloudinitDrive(g.conf()) == "" {
		return nil, nil
	}
	if _, stale := g.file.special["cloudinit"]; stale {
		g.regenerateCloudInit()
		g.write()
	}
	return nil, nil
}
