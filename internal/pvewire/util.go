// Package pvewire translates between manifests and PVE's configuration values: the values ProxOps sends to
// create and update guests, and the parsers that turn a live config into values it can compare. It knows
// drives, NICs, mount points and PCI devices (PVE's value formats themselves are package pveformat's), which
// config keys the manifest model covers, which keys are PVE's bookkeeping, and which changes PVE applies to a
// running guest. It is pure: values in, values out.
package pvewire

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/pveformat"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func itoa[T ~int | ~int64](n T) string { return strconv.FormatInt(int64(n), 10) }

// boolValue reads a PVE boolean value: 1, on, yes, true are true; anything else false.
func boolValue(v string) bool {
	switch strings.ToLower(v) {
	case "1", "on", "yes", "true":
		return true
	}
	return false
}

// boolString is PVE's written form of a boolean.
func boolString(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// propBool reads a boolean token with a default for an absent key.
func propBool(p pveformat.Props, key string, def bool) bool {
	v, ok := p.Get(key)
	if !ok {
		return def
	}
	return boolValue(v)
}

// sameTokenSet reports whether two comma-separated values hold the same tokens in any order.
func sameTokenSet(a, b string) bool {
	if a == b {
		return true
	}
	as, bs := strings.Split(a, ","), strings.Split(b, ",")
	if len(as) != len(bs) {
		return false
	}
	slices.Sort(as)
	slices.Sort(bs)
	return slices.Equal(as, bs)
}
