package manifest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/diag"
)

// Keys of spec.extra that a structured field always owns.
var (
	vmReserved = []string{"vmid", "name", "memory", "cpu", "cores", "machine", "bios", "vga", "cdrom", "ide0", "ide1",
		"ide2", "ide3", "efidisk0", "tpm0", "tpmstate0", "serial0", "onboot", "startup", "protection", "agent", "acpi",
		"tablet", "hotplug", "boot", "nestedvirt", "hidden", "tags", "ciuser", "sshkeys", "nameserver", "searchdomain"}
	vmReservedPrefixes  = []string{"scsi", "net", "ipconfig"}
	lxcReserved         = []string{"vmid", "ctid", "name", "memory", "core_count", "cores", "rootfs", "ostemplate", "ostype", "arch", "hostname", "nameserver", "searchdomain", "unprivileged", "onboot", "protection", "nesting", "keyctl", "fuse", "start", "tags"}
	lxcReservedPrefixes = []string{"net", "mp"}
)

// ReservedExtraKey reports whether a spec.extra key of a kind always clashes with a structured field.
func ReservedExtraKey(kind Kind, key string) bool {
	keys, prefixes := vmReserved, vmReservedPrefixes
	if kind.IsContainer() {
		keys, prefixes = lxcReserved, lxcReservedPrefixes
	}
	return slices.Contains(keys, key) || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(key, p) })
}

// vmConditional lists the extra keys that clash only because the manifest also sets the structured field
// that writes them, with that field's path.
func vmConditional(s *VMSpec) map[string]string {
	m := map[string]string{}
	if s.PVEDescription != "" {
		m["description"] = "spec.pve-description"
	}
	if s.SCSIHW() != "" {
		m["scsihw"] = "spec.disks[].controller"
	}
	for i, d := range s.Disks {
		m[d.SlotAt(i)] = fmt.Sprintf("spec.disks[%d]", i)
	}
	if h := s.Hardware; h != nil {
		if h.Sockets != 0 {
			m["sockets"] = "spec.hardware.sockets"
		}
		if h.NUMA != nil {
			m["numa"] = "spec.hardware.numa"
		}
		for i, p := range h.PCIDevices {
			if p.Slot != "" {
				m[p.Slot] = fmt.Sprintf("spec.hardware.pci-devices[%d]", i)
			}
		}
	}
	if s.CloudInitData != nil && s.CloudInitData.CIPasswordRef != "" {
		m["cipassword"] = "spec.cloud-init-data.ci-password-ref"
	}
	return m
}

func lxcConditional(s *LXCSpec) map[string]string {
	m := map[string]string{}
	if !s.Swap.IsZero() {
		m["swap"] = "spec.swap"
	}
	if s.PVEDescription != "" {
		m["description"] = "spec.pve-description"
	}
	if o := s.Options; o != nil {
		if o.Startup != "" {
			m["startup"] = "spec.options.startup"
		}
		if o.Console != nil {
			m["console"] = "spec.options.console"
		}
		if o.Nesting != nil || o.Keyctl != nil || o.Fuse != nil {
			m["features"] = "spec.options"
		}
	}
	return m
}

// extra reports spec.extra keys that clash with structured fields.
func (c *checker) extra(field string, extra map[string]string, reserved, prefixes []string, conditional map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		kf := field + "." + k
		pos := c.r.Source.Pos(kf)
		switch {
		case slices.Contains(reserved, k) || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) }):
			c.errorAt(pos, field, fmt.Sprintf("key %s conflicts with a structured field; remove it", diag.Excerpt(k)))
		case conditional[k] != "":
			c.errorAt(pos, field, fmt.Sprintf("key %s conflicts with a structured field (%s); remove it", diag.Excerpt(k), conditional[k]))
		case k == "" || !configKeyRE.MatchString(k):
			c.errorAt(pos, field, fmt.Sprintf("key %s is not a PVE configuration key", diag.Excerpt(k)))
		}
	}
}
