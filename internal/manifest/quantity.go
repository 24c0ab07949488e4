package manifest

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/diag"
)

// Quantity is a size as written in a manifest: an integer followed by an optional unit. Decimal units
// (K, KB, M, MB, G, GB, T, TB, P, PB) are powers of 1000; binary units (Ki, KiB, Mi, MiB, ..., Pi, PiB) are
// powers of 1024; no unit or B is bytes. Units are case-insensitive.
type Quantity string

const (
	// KiB, MiB and GiB are binary byte multiples.
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
)

var units = map[string]int64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12, "p": 1e15, "pb": 1e15,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30,
	"ti": 1 << 40, "tib": 1 << 40, "pi": 1 << 50, "pib": 1 << 50,
}

// errUnits is the reason given for an unknown unit.
const allowedUnits = "B, K, KB, M, MB, G, GB, T, TB, P, PB (decimal) or Ki, KiB, Mi, MiB, Gi, GiB, Ti, TiB, Pi, PiB (binary)"

// IsZero reports whether the quantity is unset.
func (q Quantity) IsZero() bool { return strings.TrimSpace(string(q)) == "" }

// Bytes parses the quantity.
func (q Quantity) Bytes() (int64, error) {
	s := strings.TrimSpace(string(q))
	if s == "" {
		return 0, errors.New("empty size")
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		if strings.HasPrefix(s, "-") {
			return 0, fmt.Errorf("size %s is negative", diag.Excerpt(s))
		}
		return 0, fmt.Errorf("size %s does not start with a whole number", diag.Excerpt(s))
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	if strings.HasPrefix(unit, ".") || strings.HasPrefix(unit, ",") {
		return 0, fmt.Errorf("size %s is not a whole number (write 512MiB, not 0.5GiB)", diag.Excerpt(s))
	}
	mult, ok := units[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("size %s has unknown unit %s (want %s)", diag.Excerpt(s), diag.Excerpt(unit), allowedUnits)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %s is too large", diag.Excerpt(s))
	}
	hi, lo := bits.Mul64(uint64(n), uint64(mult))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("size %s is too large", diag.Excerpt(s))
	}
	return int64(lo), nil
}

// MiB parses the quantity and requires a whole number of MiB (memory and swap).
func (q Quantity) MiB() (int64, error) {
	b, err := q.Bytes()
	if err != nil {
		return 0, err
	}
	if b%MiB != 0 {
		if _, err := strconv.ParseInt(strings.TrimSpace(string(q)), 10, 64); err == nil {
			return 0, fmt.Errorf("size %s is not a whole number of MiB: a number without a unit is bytes (write %sMiB)", diag.Excerpt(string(q)), strings.TrimSpace(string(q)))
		}
		return 0, fmt.Errorf("size %s is not a whole number of MiB (%d bytes; note G is 10^9 bytes, GiB is 2^30)", diag.Excerpt(string(q)), b)
	}
	return b / MiB, nil
}

// FormatBytes renders a byte count with the largest binary unit that divides it exactly (4GiB, 512MiB,
// 4KiB, 1000B... as 1000), the form adoption writes.
func FormatBytes(b int64) Quantity {
	if b == 0 {
		return "0"
	}
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b%u.size == 0 {
			return Quantity(strconv.FormatInt(b/u.size, 10) + u.suffix)
		}
	}
	return Quantity(strconv.FormatInt(b, 10))
}

// GiBString renders a byte count as GiB in the shortest exact decimal form PVE's size syntax takes (8, 0.5,
// 0.00390625).
func GiBString(b int64) string {
	whole, rest := b/GiB, b%GiB
	if rest == 0 {
		return strconv.FormatInt(whole, 10)
	}
	// rest/2^30 has at most 30 fractional decimal digits; compute them exactly.
	frac := make([]byte, 0, 30)
	for rest != 0 && len(frac) < 30 {
		rest *= 10
		frac = append(frac, byte('0'+rest/GiB))
		rest %= GiB
	}
	return strconv.FormatInt(whole, 10) + "." + string(frac)
}
