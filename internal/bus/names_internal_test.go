package bus

import (
	"regexp"
	"testing"
)

// The languages the name checks accept, as regular expressions.
var nameLanguages = []struct {
	name  string
	re    *regexp.Regexp
	check func(string) bool
}{
	{"cluster", regexp.MustCompile(`^[a-z0-9-]+$`), clusterNameOK},
	{"key token", regexp.MustCompile(`^[-_=/a-zA-Z0-9]+$`), keyTokenOK},
}

var nameSamples = []string{
	"", "-", "a", "Z", "0", "lab", "lab-2", "-lab", "lab-", "a-b-c", "a--b", "pve1", "PVE1", "pve_1", "pve.1",
	"pve 1", "pve1\n", "\npve1", "a=b", "a/b", "x_y", "*", ">", "é", "pve\x00", "r1/op=2E", "AbC-9", "9",
}

// Each byte-by-byte check accepts exactly what its regular expression does.
func TestNameChecksAcceptTheirRegularLanguage(t *testing.T) {
	for _, l := range nameLanguages {
		for _, s := range nameSamples {
			if got, want := l.check(s), l.re.MatchString(s); got != want {
				t.Errorf("%s %q: accepted %v, the expression %v", l.name, s, got, want)
			}
		}
	}
}

func FuzzNameChecksAcceptTheirRegularLanguage(f *testing.F) {
	for _, s := range nameSamples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, l := range nameLanguages {
			if got, want := l.check(s), l.re.MatchString(s); got != want {
				t.Fatalf("%s %q: accepted %v, the expression %v", l.name, s, got, want)
			}
		}
	})
}
