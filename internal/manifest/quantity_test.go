package manifest_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/manifest"
)

func TestQuantityUnitsAreDecimalOrBinary(t *testing.T) {
	cases := []struct {
		in   manifest.Quantity
		want int64
		err  string
	}{
		{"512", 512, ""},
		{"512B", 512, ""},
		{"4K", 4000, ""},
		{"4kb", 4000, ""},
		{"8G", 8_000_000_000, ""},
		{"1T", 1_000_000_000_000, ""},
		{"1P", 1_000_000_000_000_000, ""},
		{"4Ki", 4096, ""},
		{"4KiB", 4096, ""},
		{"8GiB", 8 << 30, ""},
		{"8gib", 8 << 30, ""},
		{"2Ti", 2 << 40, ""},
		{"1PiB", 1 << 50, ""},
		{" 20GiB ", 20 << 30, ""},
		{"", 0, "empty size"},
		{"1.5GiB", 0, "not a whole number"},
		{"-5G", 0, "negative"},
		{"GiB", 0, "does not start with a whole number"},
		{"5XB", 0, `unknown unit "XB"`},
		{"99999999999999999999", 0, "too large"},
		{"9000000PiB", 0, "too large"},
	}
	for _, c := range cases {
		got, err := c.in.Bytes()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Quantity(%q).Bytes() error = %v, want one containing %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Quantity(%q).Bytes() = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestMemoryMustBeWholeMiB(t *testing.T) {
	if mib, err := manifest.Quantity("8GiB").MiB(); err != nil || mib != 8192 {
		t.Errorf("8GiB = %d MiB, %v; want 8192", mib, err)
	}
	if mib, err := manifest.Quantity("1048576").MiB(); err != nil || mib != 1 {
		t.Errorf("1048576 = %d MiB, %v; want 1", mib, err)
	}
	if _, err := manifest.Quantity("8G").MiB(); err == nil || !strings.Contains(err.Error(), "not a whole number of MiB") {
		t.Errorf("8G MiB() error = %v, want not a whole number of MiB", err)
	}
}

func TestFormatBytesUsesTheLargestExactBinaryUnit(t *testing.T) {
	for in, want := range map[int64]manifest.Quantity{
		0: "0", 4 << 30: "4GiB", 512 << 20: "512MiB", 4096: "4KiB", 1000: "1000", 3 << 40: "3TiB", 1536 << 20: "1536MiB",
	} {
		if got := manifest.FormatBytes(in); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestGiBStringIsShortestExactDecimal(t *testing.T) {
	for in, want := range map[int64]string{
		8 << 30: "8", 512 << 20: "0.5", 4 << 20: "0.00390625", 1536 << 20: "1.5", 1: "0.000000000931322574615478515625",
	} {
		if got := manifest.GiBString(in); got != want {
			t.Errorf("GiBString(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestABareNumberAsMemoryExplainsThatItIsBytes(t *testing.T) {
	_, err := manifest.Quantity("2048").MiB()
	if err == nil || err.Error() != `size "2048" is not a whole number of MiB: a number without a unit is bytes (write 2048MiB)` {
		t.Errorf("MiB() error = %v", err)
	}
}
