package pvesim

import (
	"regexp"
	"strings"
)

// Which changes a running guest takes at once and which stay pending until the next stop/start.
// QEMU: qemu-server QemuServer.pm vmconfig_hotplug_pending; LXC: pve-container LXC/Config.pm
// vmconfig_hotplug_pending.

// hotplugFeatures is QemuServer.pm parse_hotplug_features: the default (and "1") is network,disk,usb;
// "0" turns every feature off.
func hotplugFeatures(v string) map[string]bool {
	switch v {
	case "", "1":
		return set("network", "disk", "usb")
	case "0":
		return map[string]bool{}
	}
	out := map[string]bool{}
	for _, f := range strings.Split(v, ",") {
		out[strings.TrimSpace(f)] = true
	}
	return out
}

var reCloudInitKey = regexp.MustCompile(`^(ciuser|cipassword|citype|cicustom|ciupgrade|nameserver|searchdomain|sshkeys|ipconfig\d+)$`)

// qemuLiveChange reports whether setting (newVal) or deleting (del) key on a running VM takes effect at
// once, following the branches of vmconfig_hotplug_pending:
//   - fast-plug keys and cloud-init keys: always;
//   - tablet, usbN: with the usb feature; vcpus: cpu; memory: memory; netN: network;
//   - cpulimit, cpuunits: always (cgroup); balloon: only while a balloon device exists;
//   - hotplug itself: unless memory hotplug is involved;
//   - drives: a cdrom media change always; a new or removed disk with the disk feature, except on ide
//     and sata; efidisk0 and tpmstate0 never; other changes to a disk's options stay pending (PVE
//     applies throttling options live; the simulator does not tell them apart);
//   - everything else (cores, sockets, cpu, machine, bios, …): pending.
func qemuLiveChange(conf map[string]string, key, newVal string, del bool) bool {
	f := hotplugFeatures(conf["hotplug"])
	switch {
	case fastPlug[key] || reCloudInitKey.MatchString(key):
		return true
	case key == "hotplug":
		return !strings.Contains(conf["hotplug"], "memory") && !strings.Contains(newVal, "memory")
	case key == "tablet" || strings.HasPrefix(key, "usb"):
		return f["usb"]
	case key == "vcpus":
		return f["cpu"]
	case key == "memory":
		return f["memory"]
	case key == "cpulimit" || key == "cpuunits":
		return true
	case key == "balloon":
		return conf["balloon"] != "0" && newVal != "0" && !del
	case strings.HasPrefix(key, "net") && reIndexed.MatchString(key):
		return f["network"]
	case isDrive(key):
		if key == "efidisk0" || key == "tpmstate0" {
			return false
		}
		old, exists := conf[key]
		oldCD := exists && strings.Contains(old, "media=cdrom") && !strings.Contains(old, "cloudinit")
		newCD := strings.Contains(newVal, "media=cdrom") && !strings.Contains(newVal, "cloudinit")
		if !del && oldCD && newCD {
			return true // cdrom media change
		}
		ideSata := strings.HasPrefix(key, "ide") || strings.HasPrefix(key, "sata")
		if del || !exists {
			return f["disk"] && !ideSata
		}
		oldFile := strings.SplitN(old, ",", 2)[0]
		newFile := strings.SplitN(newVal, ",", 2)[0]
		if oldFile != newFile {
			return f["disk"] && !ideSata // unplug the old disk (to unusedN), plug the new one
		}
		return false
	}
	return false
}

// lxcFastPlug are LXC/Config.pm $LXC_FASTPLUG_OPTIONS: applied at once on a running container.
var lxcFastPlug = set("description", "onboot", "startup", "protection", "hostname", "hookscript", "cores", "tags", "lock")

// lxcLiveChange reports whether a change on a running container takes effect at once
// (LXC/Config.pm vmconfig_hotplug_pending): fast-plug keys; cpulimit, cpuunits, memory, swap and netN
// (set or delete); deleting unusedN; adding a new mpN or devN (not replacing an existing one).
// Everything else, mount point removals and changes included, stays pending.
func lxcLiveChange(conf map[string]string, key string, del bool) bool {
	switch {
	case lxcFastPlug[key], key == "cpulimit", key == "cpuunits", key == "swap":
		return true
	case key == "memory":
		return !del
	case strings.HasPrefix(key, "net") && reIndexed.MatchString(key):
		return true
	case strings.HasPrefix(key, "unused"):
		return del
	case regexp.MustCompile(`^(mp|dev)\d+$`).MatchString(key):
		_, exists := conf[key]
		return !del && !exists
	}
	return false
}

// cleanupPending drops what is no change at all, as PVE's cleanup_pending does before it hot-plugs: a pending
// value equal to the current one (so writing back the current value of a key undoes its pending change), and
// a pending delete of a key the config does not hold.
func cleanupPending(pending *section, conf map[string]string) {
	if pending == nil {
		return
	}
	for k, v := range pending.conf {
		if k == "delete" {
			continue
		}
		if cur, ok := conf[k]; ok && cur == v {
			delete(pending.conf, k)
		}
	}
	dels := pendingDeletes(pending.conf["delete"])
	for k := range dels {
		if _, ok := conf[k]; !ok {
			delete(dels, k)
		}
	}
	if len(dels) == 0 {
		delete(pending.conf, "delete")
	} else {
		pending.conf["delete"] = printPendingDeletes(dels)
	}
}
