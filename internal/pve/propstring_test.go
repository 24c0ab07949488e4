package pve_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/pve"
)

func TestParsePropertyStringKeepsOrderAndTheDefaultKey(t *testing.T) {
	got, err := pve.ParsePropertyString("local-lvm:vm-100-disk-0,discard=on,iothread=1,size=32G")
	if err != nil {
		t.Fatal(err)
	}
	want := pve.PropertyString{{Key: "", Value: "local-lvm:vm-100-disk-0"}, {Key: "discard", Value: "on"},
		{Key: "iothread", Value: "1"}, {Key: "size", Value: "32G"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("parse (-want +got):\n%s", d)
	}
	if v, ok := got.Get("size"); !ok || v != "32G" {
		t.Fatalf("Get(size) = %q, %v", v, ok)
	}
	for _, bad := range []string{"a,,b", "size=1,size=2", "a,b", "=x"} {
		if _, err := pve.ParsePropertyString(bad); err == nil {
			t.Errorf("ParsePropertyString(%q) accepted", bad)
		}
	}
}

func TestParseSizeReadsPVEBinaryUnits(t *testing.T) {
	for in, want := range map[string]int64{"32G": 32 << 30, "4M": 4 << 20, "512K": 512 << 10, "1T": 1 << 40,
		"1073741824": 1 << 30, "0.5G": 1 << 29} {
		got, err := pve.ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "G", "-1G", "1e3", "+4G", "12X"} {
		if _, err := pve.ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func FuzzParsePropertyString(f *testing.F) {
	for _, s := range []string{"local-lvm:vm-100-disk-0,size=32G", "virtio=BC:24:11:5E:7A:01,bridge=vmbr0,tag=10",
		"name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:02:00,type=veth", "uuid=6f1b2c3d", "", ",", "a=b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := pve.ParsePropertyString(s)
		if err != nil {
			return
		}
		// Re-joining the parsed elements gives the input back.
		parts := make([]string, 0, len(ps))
		for _, p := range ps {
			if p.Key == "" {
				parts = append(parts, p.Value)
			} else {
				parts = append(parts, p.Key+"="+p.Value)
			}
		}
		if strings.Join(parts, ",") != s {
			t.Fatalf("%q re-joined as %q", s, strings.Join(parts, ","))
		}
		if v, ok := ps.Get("size"); ok {
			_, _ = pve.ParseSize(v)
		}
	})
}
