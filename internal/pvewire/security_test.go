package pvewire_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pvewire"
)

func guestWith(t inventory.GuestType, lines ...string) inventory.Guest {
	g := inventory.Guest{VMID: 100, Type: t}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, ": ")
		g.Config = append(g.Config, inventory.Entry{Key: k, Value: v, HasValue: true})
	}
	return g
}

// Each setting that weakens a guest's isolation is a warning, and its harmless neighbours are not.
func TestSecurityWarningsFlagWhatWeakensIsolation(t *testing.T) {
	cases := []struct {
		name string
		g    inventory.Guest
		want string // keys, comma-separated
	}{
		{"unconfined apparmor", guestWith(inventory.LXC, "lxc.apparmor.profile: unconfined"), "lxc.apparmor.profile"},
		{"a named apparmor profile", guestWith(inventory.LXC, "lxc.apparmor.profile: lxc-container-default-cgns"), ""},
		{"empty cap.drop", guestWith(inventory.LXC, "lxc.cap.drop: "), "lxc.cap.drop"},
		{"cap.drop of one capability", guestWith(inventory.LXC, "lxc.cap.drop: sys_time"), ""},
		{"device allows", guestWith(inventory.LXC, "lxc.cgroup2.devices.allow: c 10:200 rwm", "lxc.cgroup.devices.allow: a"),
			"lxc.cgroup2.devices.allow,lxc.cgroup.devices.allow"},
		{"writable sys", guestWith(inventory.LXC, "lxc.mount.auto: proc:mixed sys:rw"), "lxc.mount.auto"},
		{"passed-through device", guestWith(inventory.LXC, "dev0: /dev/dri/renderD128,gid=104"), "dev0"},
		{"nesting and keyctl, privileged", guestWith(inventory.LXC, "features: keyctl=1,nesting=1"), "features"},
		{"nesting and keyctl, privileged explicitly", guestWith(inventory.LXC, "unprivileged: 0", "features: keyctl=1,nesting=1"), "features"},
		{"nesting and keyctl, unprivileged", guestWith(inventory.LXC, "unprivileged: 1", "features: keyctl=1,nesting=1"), ""},
		{"nesting alone, privileged", guestWith(inventory.LXC, "features: nesting=1"), ""},
		{"qemu args", guestWith(inventory.QEMU, "args: -no-hpet"), "args"},
		{"qemu hookscript", guestWith(inventory.QEMU, "hookscript: local:snippets/x.pl"), ""},
	}
	for _, c := range cases {
		var keys []string
		for _, w := range pvewire.SecurityWarnings(c.g) {
			if w.Why == "" {
				t.Errorf("%s: %s has no reason", c.name, w.Key)
			}
			keys = append(keys, w.Key)
		}
		if got := strings.Join(keys, ","); got != c.want {
			t.Errorf("%s: warnings on %q, want %q", c.name, got, c.want)
		}
	}
}
