package pvewire

import (
	"strings"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
)

// qemuFastPlug are the keys qemu-server applies at once on a running VM ($fast_plug_option in
// QemuServer.pm, plus every cloud-init key).
var qemuFastPlug = map[string]bool{
	"description": true, "hookscript": true, "lock": true, "migrate_downtime": true, "migrate_speed": true,
	"name": true, "onboot": true, "protection": true, "shares": true, "startup": true, "tags": true,
	"vmstatestorage": true,
	"cicustom":       true, "cipassword": true, "citype": true, "ciupgrade": true, "ciuser": true, "nameserver": true,
	"searchdomain": true, "sshkeys": true,
}

// lxcFastPlug are the keys pve-container applies at once on a running container ($LXC_FASTPLUG_OPTIONS in
// LXC/Config.pm); memory, swap, cpulimit, cpuunits and network interfaces are hot-plugged too.
var lxcFastPlug = map[string]bool{
	"description": true, "onboot": true, "startup": true, "protection": true, "hostname": true, "hookscript": true,
	"cores": true, "tags": true, "lock": true, "memory": true, "swap": true, "cpulimit": true, "cpuunits": true,
}

// DefaultHotplug is qemu's hotplug setting when a VM does not set one.
const DefaultHotplug = "network,disk,usb"

// hotplugFeatures reads a qemu hotplug value ("0" none, "1" the default set).
func hotplugFeatures(v string) map[string]bool {
	switch v {
	case "":
		v = DefaultHotplug
	case "1":
		v = DefaultHotplug
	case "0":
		v = ""
	}
	out := map[string]bool{}
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out[f] = true
		}
	}
	return out
}

// AppliesLive reports whether PVE applies a change at once on a running guest (instead of keeping it
// pending until the guest is restarted). live is the guest's config, which holds the qemu hotplug setting.
//
// For qemu (qemu-server vmconfig_hotplug_pending): the fast-plug and cloud-init keys; NICs with the network
// hotplug feature; tablet with usb; memory with memory; hotplug itself unless memory hotplug changes; a CD
// medium change; a new disk in an empty scsi or virtio slot with the disk feature. Disk option changes,
// cores, cpu, machine, PCI devices and the rest wait for a restart.
//
// For lxc (pve-container vmconfig_hotplug_pending): the fast-plug keys, memory, swap, cpu limits, network
// interfaces and a new mount point in an empty slot. The rest (rootfs, changed mount points, features, DNS,
// arch, console) waits for a restart.
func AppliesLive(t inventory.GuestType, c Change, live map[string]string) bool {
	if t == inventory.LXC {
		switch {
		case lxcFastPlug[c.Key], isIndexed(c.Key, "net"):
			return true
		case isIndexed(c.Key, "mp"), isIndexed(c.Key, "dev"):
			return !c.HadBefore && !c.Delete
		}
		return false
	}
	hp := hotplugFeatures(live["hotplug"])
	switch {
	case qemuFastPlug[c.Key], isIndexed(c.Key, "ipconfig"):
		return true
	case isIndexed(c.Key, "net"):
		return hp["network"]
	case c.Key == "tablet":
		return hp["usb"]
	case c.Key == "memory":
		return hp["memory"]
	case c.Key == "hotplug":
		return !strings.Contains(c.Before, "memory") && !strings.Contains(c.Value.Value, "memory") && !hp["memory"]
	case isDiskSlot(c.Key):
		if c.Delete {
			return false
		}
		old, nw := ParseDrive(c.Before), ParseDrive(c.Value.Value)
		if c.HadBefore && old.IsCDROM() && !old.IsCloudInit() && nw.IsCDROM() && !nw.IsCloudInit() {
			return true // a medium change (blockdev-change-medium / eject)
		}
		if c.HadBefore && !old.IsEmpty() {
			return false // option changes on a disk wait for a restart
		}
		bus := strings.TrimRight(c.Key, "0123456789")
		return hp["disk"] && (bus == "scsi" || bus == "virtio") && !nw.IsCloudInit() && !nw.IsCDROM()
	}
	return false
}

// LiveKind is the kind a live guest maps to: VM, TemplateVM, LXC or TemplateCT.
func LiveKind(g *inventory.Guest) manifest.Kind {
	switch {
	case g.Type == inventory.LXC && g.Template:
		return manifest.KindTemplateCT
	case g.Type == inventory.LXC:
		return manifest.KindLXC
	case g.Template:
		return manifest.KindTemplateVM
	}
	return manifest.KindVM
}

// PendingApplied is a guest's config with its pending values applied: what PVE runs after a restart. A
// volume keeps its current size: a resize updates the current value only, so a pending value's size token
// may be stale.
func PendingApplied(g *inventory.Guest) map[string]string {
	out := map[string]string{}
	for _, e := range g.Config {
		switch {
		case e.Delete > 0:
		case e.HasPending:
			out[e.Key] = e.Pending
			if size, ok := SizeToken(e.Value); e.HasValue && ok && IsVolumeKey(g.Type, e.Key) {
				out[e.Key] = WithSizeToken(g.Type, e.Key, e.Pending, size)
			}
		case e.HasValue:
			out[e.Key] = e.Value
		}
	}
	return out
}
