package pveformat

import (
	"regexp"
	"testing"
)

// nodeFormat is PVE's pve-node format as a regular expression.
var nodeFormat = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$`)

var nodeSamples = []string{
	"", "-", "a", "Z", "0", "lab", "lab-2", "-lab", "lab-", "a-b-c", "a--b", "pve1", "PVE1", "pve_1", "pve.1",
	"pve 1", "pve1\n", "\npve1", "a=b", "a/b", "x_y", "*", ">", "é", "pve\x00", "r1/op=2E", "AbC-9", "9",
}

// The byte-by-byte node name check accepts exactly what PVE's pve-node expression does.
func TestValidNodeNameAcceptsPVENodeFormat(t *testing.T) {
	for _, s := range nodeSamples {
		if got, want := ValidNodeName(s), nodeFormat.MatchString(s); got != want {
			t.Errorf("%q: accepted %v, the expression %v", s, got, want)
		}
	}
}

func FuzzValidNodeName(f *testing.F) {
	for _, s := range nodeSamples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidNodeName(s), nodeFormat.MatchString(s); got != want {
			t.Fatalf("%q: accepted %v, the expression %v", s, got, want)
		}
	})
}
