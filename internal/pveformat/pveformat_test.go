package pveformat_test

import (
	"slices"
	"testing"

	"github.com/proxops/proxops/internal/pveformat"
)

func TestParseSizeReadsPVESizesAsBinary(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"32G", 32 << 30}, {"512M", 512 << 20}, {"4K", 4096}, {"0.5G", 512 << 20}, {"1T", 1 << 40},
		{"1048576", 1 << 20}, {"4M", 4 << 20}, {"1.5K", 1536}, {"0.00390625G", 4 << 20},
	} {
		got, err := pveformat.ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "G", "1.G", "-1G", "1X", "1e3", ".5G", "99999999999999999999G"} {
		if _, err := pveformat.ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
}

func TestFormatSizeUsesTheLargestExactUnit(t *testing.T) {
	for b, want := range map[int64]string{32 << 30: "32G", 512 << 20: "512M", 1536: "1536", 4096: "4K",
		3 << 40: "3T", 1000: "1000", 1536 << 20: "1536M"} {
		if got := pveformat.FormatSize(b); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", b, got, want)
		}
	}
}

func TestTagsSplitOnEverySeparatorAndComparedAsSets(t *testing.T) {
	if got := pveformat.ParseTags("Web,db;web proxops\tPROD"); !slices.Equal(got, []string{"db", "prod", "proxops", "web"}) {
		t.Errorf("ParseTags = %v", got)
	}
	if !pveformat.Owned("db;proxops;web") || !pveformat.Owned("web,Proxops") || pveformat.Owned("pveconform") || pveformat.Owned("proxops-old") {
		t.Error("ownership tag detection is wrong")
	}
	if !pveformat.SameTags("a;b", "b,a") || pveformat.SameTags("a", "a;b") {
		t.Error("SameTags is not a set comparison")
	}
}

func TestPropsCanonicalPutsTheDefaultKeyFirstThenSortsTheRest(t *testing.T) {
	p := pveformat.ParseProps("local-lvm:vm-100-disk-0,size=32G,iothread=1,backup=0", "file")
	if got := p.Canonical("file"); got != "local-lvm:vm-100-disk-0,backup=0,iothread=1,size=32G" {
		t.Errorf("Canonical = %q", got)
	}
	p = p.With("iothread", "0").Without("backup").With("aio", "native")
	if got := p.Canonical("file"); got != "local-lvm:vm-100-disk-0,aio=native,iothread=0,size=32G" {
		t.Errorf("after edits = %q", got)
	}
	if got := pveformat.ParseProps("volume=/srv/x,mp=/x,ro=1", "volume").Canonical("volume", "mp"); got != "/srv/x,mp=/x,ro=1" {
		t.Errorf("explicit default key = %q", got)
	}
}

func TestSizesReachPetabytesExactly(t *testing.T) {
	for in, want := range map[string]int64{"1P": 1 << 50, "2p": 2 << 50, "0.5P": 1 << 49, "8191P": 8191 << 50} {
		if got, err := pveformat.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := pveformat.ParseSize("8192P"); err == nil {
		t.Error("ParseSize(8192P) overflows int64 but succeeded")
	}
	// format_size stops at T and prints zero as 0T, as PVE does.
	for b, want := range map[int64]string{1 << 50: "1024T", 0: "0T", 1023: "1023"} {
		if got := pveformat.FormatSize(b); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", b, got, want)
		}
	}
}

func TestSplitListSplitsOnNULWhenPresentElseOnSeparators(t *testing.T) {
	if got := pveformat.SplitList("a b\x00c;d"); !slices.Equal(got, []string{"a b", "c;d"}) {
		t.Errorf("NUL-separated = %q", got)
	}
	if got := pveformat.SplitList(" net0, ide2;;scsi1\tunused0 "); !slices.Equal(got, []string{"net0", "ide2", "scsi1", "unused0"}) {
		t.Errorf("separated = %q", got)
	}
	if got := pveformat.FormatTags([]string{"Web;db", "web proxops"}); got != "db;proxops;web" {
		t.Errorf("FormatTags = %q", got)
	}
}

func TestDecodeSSHKeysLeavesPlusAloneAndRejectsBadEscapes(t *testing.T) {
	keys, err := pveformat.DecodeSSHKeys("ssh-ed25519%20AA+A%0A%0Assh-rsa%20B")
	if err != nil || !slices.Equal(keys, []string{"ssh-ed25519 AA+A", "ssh-rsa B"}) {
		t.Errorf("decode = %q, %v", keys, err)
	}
	for _, bad := range []string{"abc%", "abc%4", "%zz"} {
		if _, err := pveformat.DecodeSSHKeys(bad); err == nil {
			t.Errorf("DecodeSSHKeys(%q) succeeded", bad)
		}
	}
}
