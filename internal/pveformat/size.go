package pveformat

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
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
// binary unit T, G, M or K that divides it exactly, else bytes (zero, divisible by every unit, prints as
// 0T, as PVE prints it). It is also the form of a resize argument.
func FormatSize(b int64) string {
	kb := b / 1024
	if kb*1024 != b {
		return strconv.FormatInt(b, 10)
	}
	mb := kb / 1024
	if mb*1024 != kb {
		return strconv.FormatInt(kb, 10) + "K"
	}
	gb := mb / 1024
	if gb*1024 != mb {
		return strconv.FormatInt(mb, 10) + "M"
	}
	tb := gb / 1024
	if tb*1024 != gb {
		return strconv.FormatInt(gb, 10) + "G"
	}
	return strconv.FormatInt(tb, 10) + "T"
}
