package pveformat_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pveformat"
)

// FuzzParseProps: any property string parses, prints canonically, and the canonical form parses to the same
// tokens (as a set) and prints the same again.
func FuzzParseProps(f *testing.F) {
	for _, s := range []string{"local-lvm:vm-100-disk-0,size=32G,iothread=1", "virtio=BC:24:11:00:00:01,bridge=vmbr0",
		"name=eth0,bridge=vmbr0,ip=dhcp,type=veth", ",,=,a=b=c", "x", "", "mp=/data,volume=local:1"} {
		f.Add(s, "file")
	}
	f.Fuzz(func(t *testing.T, s, def string) {
		p := pveformat.ParseProps(s, def)
		c := p.Canonical(def)
		again := pveformat.ParseProps(c, def)
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
		b, err := pveformat.ParseSize(s)
		if err != nil {
			return
		}
		if b < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, b)
		}
		back, err := pveformat.ParseSize(pveformat.FormatSize(b))
		if err != nil || back != b {
			t.Fatalf("FormatSize(%d) = %q reads back as %d, %v", b, pveformat.FormatSize(b), back, err)
		}
	})
}

// FuzzParseTags: the stored form is stable and holds the same set.
func FuzzParseTags(f *testing.F) {
	for _, s := range []string{"web;db", "Web,db proxops", "  ;;, ", "a\tb\nc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tags := pveformat.ParseTags(s)
		stored := pveformat.FormatTags(tags)
		if !slices.Equal(pveformat.ParseTags(stored), tags) {
			t.Fatalf("%q -> %q does not read back as %v", s, stored, tags)
		}
		if !pveformat.SameTags(s, stored) {
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
		enc := pveformat.EncodeSSHKeys([]string{a, b})
		for i := 0; i < len(enc); i++ {
			c := enc[i]
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("-._~%", c) >= 0) {
				t.Fatalf("encoded value %q holds %q", enc, c)
			}
		}
		keys, err := pveformat.DecodeSSHKeys(enc)
		if err != nil {
			t.Fatalf("decode %q: %v", enc, err)
		}
		if inventory.SSHKeysDigest(keys) != inventory.SSHKeysDigest([]string{a, b}) {
			t.Fatalf("keys %q %q decode to %q", a, b, keys)
		}
	})
}
