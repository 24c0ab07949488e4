package pvewire

import (
	"strings"

	"github.com/proxops/proxops/internal/inventory"
)

// SecurityWarning is a live setting that weakens the isolation between a guest and its host: what an
// operator adopting a cluster must know about whether ProxOps models the key or not.
type SecurityWarning struct {
	Key string
	// Value is the live value, secret-looking parts redacted (RedactValue).
	Value string
	Why   string
}

// SecurityWarnings lists the settings of a guest that weaken its isolation, in config order: for a
// container an unconfined AppArmor profile, an empty lxc.cap.drop (no capability dropped), device allows
// and passed-through devices, writable proc or sys mounts, and nesting with keyctl on a privileged container;
// for a VM raw QEMU arguments. Current values are read (what runs now).
func SecurityWarnings(g inventory.Guest) []SecurityWarning {
	var out []SecurityWarning
	add := func(e inventory.Entry, why string) {
		out = append(out, SecurityWarning{Key: e.Key, Value: RedactValue(e.Value), Why: why})
	}
	privileged := true
	for _, e := range g.Config {
		if e.Key == "unprivileged" && e.HasValue && Bool(e.Value) {
			privileged = false
		}
	}
	for _, e := range g.Config {
		if !e.HasValue {
			continue
		}
		v := strings.TrimSpace(e.Value)
		if g.Type == inventory.QEMU {
			if e.Key == "args" {
				add(e, "raw QEMU arguments bypass PVE's checks and can give the guest any host device or file")
			}
			continue
		}
		switch {
		case e.Key == "lxc.apparmor.profile" && v == "unconfined":
			add(e, "the container runs without an AppArmor profile")
		case e.Key == "lxc.cap.drop" && v == "":
			add(e, "an empty lxc.cap.drop drops no capability: the container keeps every capability of the host's root")
		case e.Key == "lxc.cgroup2.devices.allow" || e.Key == "lxc.cgroup.devices.allow":
			why := "gives the container access to host devices"
			if v == "a" || strings.HasPrefix(v, "a ") {
				why = "gives the container access to every host device"
			}
			add(e, why)
		case e.Key == "lxc.mount.auto" && (strings.Contains(v, "proc:rw") || strings.Contains(v, "sys:rw")):
			add(e, "mounts the host's proc or sys writable in the container")
		case isIndexed(e.Key, "dev"):
			add(e, "passes a host device into the container")
		case e.Key == "features" && privileged:
			f := ParseFeatures(v)
			if f.Flag("nesting") && f.Flag("keyctl") {
				add(e, "nesting with keyctl on a privileged container exposes the host's kernel keyring and its proc and sys")
			}
		}
	}
	return out
}
