package pvewire_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pvewire"
)

// FuzzParseProps: any property string parses, prints canonically, and the canonical form parses to the same
// tokens (as a set) and prints the same again.
func FuzzParseProps(f *testing.F) {
	for _, s := range []string{"local-lvm:vm-100-disk-0,size=32G,iothread=1", "virtio=BC:24:11:00:00:01,bridge=vmbr0",
		"name=eth0,bridge=vmbr0,ip=dhcp,type=veth", ",,=,a=b=c", "x", "", "mp=/data,volume=local:1"} {
		f.Add(s, "file")
	}
	f.Fuzz(func(t *testing.T, s, def string) {
		p := pvewire.ParseProps(s, def)
		c := p.Canonical(def)
		again := pvewire.ParseProps(c, def)
		if c2 := again.Canonical(def); c2 != c {
			t.Fatalf("canonical form is not stable: %q -> %q -> %q", s, c, c2)
		}
	})
}

// FuzzParseSize: a parsed size prints in PVE's form and parses back to the same byte count.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"32G", "0.5G", "4K", "1048576", "1.25T", "9.999999999999999999999M", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := pvewire.ParseSize(s)
		if err != nil {
			return
		}
		if b < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, b)
		}
		back, err := pvewire.ParseSize(pvewire.FormatSize(b))
		if err != nil || back != b {
			t.Fatalf("FormatSize(%d) = %q reads back as %d, %v", b, pvewire.FormatSize(b), back, err)
		}
	})
}

// FuzzParseTags: the stored form is stable and holds the same set.
func FuzzParseTags(f *testing.F) {
	for _, s := range []string{"web;db", "Web,db proxops", "  ;;, ", "a\tb\nc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tags := pvewire.ParseTags(s)
		stored := pvewire.FormatTags(tags)
		if !slices.Equal(pvewire.ParseTags(stored), tags) {
			t.Fatalf("%q -> %q does not read back as %v", s, stored, tags)
		}
		if !pvewire.SameTags(s, stored) {
			t.Fatalf("SameTags(%q, %q) is false", s, stored)
		}
	})
}

// FuzzSSHKeys: encoded keys hold only characters PVE's urlencoded format allows and decode to the keys,
// trimmed and deduplicated, with the same digest.
func FuzzSSHKeys(f *testing.F) {
	f.Add("ssh-ed25519 AAAA+/= a@b.c", "ssh-rsa B x")
	f.Add("", "%0A")
	f.Fuzz(func(t *testing.T, a, b string) {
		if strings.ContainsAny(a+b, "\n\r") {
			return // one key per line
		}
		enc := pvewire.EncodeSSHKeys([]string{a, b})
		for i := 0; i < len(enc); i++ {
			c := enc[i]
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("-._~%", c) >= 0) {
				t.Fatalf("encoded value %q holds %q", enc, c)
			}
		}
		keys, err := pvewire.DecodeSSHKeys(enc)
		if err != nil {
			t.Fatalf("decode %q: %v", enc, err)
		}
		if inventory.SSHKeysDigest(keys) != inventory.SSHKeysDigest([]string{a, b}) {
			t.Fatalf("keys %q %q decode to %q", a, b, keys)
		}
	})
}

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
