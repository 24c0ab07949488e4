package pvewire

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/manifest"
)

// ParseSize parses a size as PVE reports it (a drive's size= token, a resize argument): a number with an
// optional fraction and an optional unit K, M, G or T, all binary (powers of 1024); a bare number is bytes.
// The result is rounded down to whole bytes.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty size")
	}
	mult := int64(1)
	switch s[len(s)-1] {
	case 'K', 'k':
		mult = 1 << 10
	case 'M', 'm':
		mult = 1 << 20
	case 'G', 'g':
		mult = 1 << 30
	case 'T', 't':
		mult = 1 << 40
	case 'P', 'p':
		mult = 1 << 50
	}
	num := s
	if mult != 1 {
		num = s[:len(s)-1]
	}
	whole, frac, hasFrac := strings.Cut(num, ".")
	if whole == "" || !allDigits(whole) || (hasFrac && (frac == "" || !allDigits(frac))) {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	hi, lo := bits.Mul64(uint64(w), uint64(mult))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	total := int64(lo)
	if hasFrac {
		// Exact fraction: frac/10^len(frac) * mult, rounded down; digits beyond 18 cannot matter.
		if len(frac) > 18 {
			frac = frac[:18]
		}
		f, _ := strconv.ParseInt(frac, 10, 64)
		den := int64(1)
		for range len(frac) {
			den *= 10
		}
		hi, lo := bits.Mul64(uint64(f), uint64(mult))
		q, _ := bits.Div64(hi, lo, uint64(den))
		if q > math.MaxInt64-uint64(total) {
			return 0, fmt.Errorf("size %q is too large", s)
		}
		total += int64(q)
	}
	return total, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatSize renders a byte count the way PVE prints sizes (PVE::JSONSchema::format_size): the largest
// binary unit T, G, M or K that divides it exactly, else bytes. It is also the form of a resize argument.
func FormatSize(b int64) string {
	if b <= 0 || b%1024 != 0 {
		return strconv.FormatInt(b, 10)
	}
	kb := b / 1024
	if kb%1024 != 0 {
		return strconv.FormatInt(kb, 10) + "K"
	}
	mb := kb / 1024
	if mb%1024 != 0 {
		return strconv.FormatInt(mb, 10) + "M"
	}
	gb := mb / 1024
	if gb%1024 != 0 {
		return strconv.FormatInt(gb, 10) + "G"
	}
	return strconv.FormatInt(gb/1024, 10) + "T"
}

// CreateSize is the size part of a create form, <storage>:<size>: the byte count in GiB, shortest exact
// decimal (8, 0.5, 0.00390625). PVE reads the number as GiB, never as bytes.
func CreateSize(b int64) string { return manifest.GiBString(b) }

// ParseCreateSize reads the GiB number of a create form back into bytes (rounded down).
func ParseCreateSize(s string) (int64, error) {
	b, err := ParseSize(s + "G")
	if err != nil {
		return 0, fmt.Errorf("invalid create size %q", s)
	}
	return b, nil
}
