package pvewire_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pvewire"
)

// FuzzParseLiveValues: the live-value parsers take anything PVE could report without panicking, and the
// printed forms of what they parse are stable.
func FuzzParseLiveValues(f *testing.F) {
	for _, s := range []string{"local-lvm:vm-100-disk-0,size=32G", "none,media=cdrom", "virtio=BC:24:11:00:00:01,bridge=vmbr0",
		"/srv/x,mp=/x,ro=1", "0000:01:00.0,pcie=1,x-vga=1", "name=eth0,bridge=vmbr0", "nesting=1,mount=nfs;cifs", "current=2048"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d := pvewire.ParseDrive(s)
		_, _ = d.Size()
		_ = d.IsVolume() || d.IsCloudInit() || d.IsCDROM()
		if d2 := pvewire.ParseDrive(d.String()); d2.String() != d.String() {
			t.Fatalf("drive %q prints unstably: %q then %q", s, d.String(), d2.String())
		}
		n := pvewire.ParseNIC(s)
		if n2 := pvewire.ParseNIC(n.String()); n.Model != "" && n2.String() != n.String() {
			t.Fatalf("NIC %q prints unstably: %q then %q", s, n.String(), n2.String())
		}
		m := pvewire.ParseMountPoint(s)
		_, _ = m.Size()
		_ = pvewire.ParsePCI(s).String()
		_ = pvewire.ParseLXCNIC(s).String()
		_ = pvewire.ParseFeatures(s).Flag("nesting")
		_, _ = pvewire.Memory(s)
		_ = pvewire.NormalizePCIAddress(s)
		_ = pvewire.LiveSSHKeysDigest(s)
		if tok, ok := pvewire.SizeToken(s); ok {
			_ = pvewire.WithSizeToken(inventory.QEMU, "scsi0", s, tok)
			_ = pvewire.WithSizeToken(inventory.LXC, "rootfs", s, tok)
		}
	})
}

// FuzzRedactValue: redaction is stable (redacting twice changes nothing) and keeps the value's separators
// (whitespace and NUL) where they were.
func FuzzRedactValue(f *testing.F) {
	for _, s := range []string{"DB_PASSWORD=x\x00LANG=C", `A=1\0TOKEN=2`, "-fw_cfg name=opt/t/token,string=abc -no-hpet",
		"--auth-token abc -x", "https://u:p@h/x", "lxc.environment=API_KEY=k", "a=b=c=d key", "\\", "=,=,", ""} {
		f.Add(s)
	}
	seps := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == 0 {
				return r
			}
			return -1
		}, s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		once := pvewire.RedactValue(s)
		if twice := pvewire.RedactValue(once); twice != once {
			t.Fatalf("not stable: %q -> %q -> %q", s, once, twice)
		}
		if seps(once) != seps(s) {
			t.Fatalf("separators changed: %q -> %q", s, once)
		}
	})
}
