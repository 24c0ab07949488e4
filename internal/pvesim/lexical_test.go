package pvesim

import (
	"regexp"
	"testing"
)

// The languages of the byte-by-byte checks, as the regular expressions they replace.
var (
	numberRE      = regexp.MustCompile(`^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$`)
	integerRE     = regexp.MustCompile(`^[+-]?\d+$`)
	driveKeyRE    = regexp.MustCompile(`^(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|efidisk0|tpmstate0)$`)
	tokenHeaderRE = regexp.MustCompile(`(?:^|\s)PVEAPIToken(?:=| )([^;]*)`)
	keyValueRE    = regexp.MustCompile(`^([^=]+)=(.+)$`)
	unsafeRE      = regexp.MustCompile(`[^\x20-\x7e]`)
)

var lexicalSamples = []string{
	"", "0", "7", "-1", "+12", "1.", ".5", "1.5", "-.5", "+1.e3", "1e", "1e+", "1e-7", "1E10", "e5", ".", "-",
	"+", "1.2.3", "12a", " 1", "1 ", "٣", "0x10", "1_000", "00", "01",
	"ide0", "ide3", "ide4", "ide", "ide00", "sata5", "sata6", "scsi0", "scsi9", "scsi10", "scsi29", "scsi30",
	"scsi31", "scsi05", "scsi300", "virtio15", "virtio16", "virtio07", "efidisk0", "efidisk1", "tpmstate0",
	"tpmstate00", "net0", "xide0", "ide0x", "unused0",
	"PVEAPIToken=root@pam!t=s", "PVEAPIToken root@pam!t=s", "PVEAPITokenX=1", "PVEAPIToken", "PVEAPIToken=",
	"x PVEAPIToken=a;b", "xPVEAPIToken=a", "xPVEAPIToken=a PVEAPIToken=b", "\tPVEAPIToken=a; c",
	"PVEAuthCookie=t; PVEAPIToken=u=v", "a=b", "=b", "a=", "a==b", "a=b=c", "a\n=b", "a=b\n", "a=\nb", "a=\xff",
	"virtio=BC:24:11:00:00:01", "bridge=vmbr0", "local-lvm:32", "x\r=y",
	"OK", "VM 100 is locked (create)", "unable to parse 'é'", "line\tone\r", "\x7f\x80\xc3", "日本", "~ ", "\xed\xa0\x80", "PVEAPIToken\t=a", "PVEAPIToken==;", "\vPVEAPIToken=a", "\fPVEAPIToken=\xff;",
}

// Each check accepts exactly what its regular expression does, and the token it finds is the expression's
// capture.
func TestLexicalChecksAcceptTheirRegularLanguage(t *testing.T) {
	for _, s := range lexicalSamples {
		checkLexical(t, s)
	}
}

func FuzzLexicalChecksAcceptTheirRegularLanguage(f *testing.F) {
	for _, s := range lexicalSamples {
		f.Add(s)
	}
	f.Fuzz(checkLexical)
}

func checkLexical(t *testing.T, s string) {
	for _, c := range []struct {
		name  string
		re    *regexp.Regexp
		check func(string) bool
	}{{"number", numberRE, isNumber}, {"integer", integerRE, isInteger}, {"drive key", driveKeyRE, isDrive}} {
		if got, want := c.check(s), c.re.MatchString(s); got != want {
			t.Errorf("%s %q: accepted %v, the expression %v", c.name, s, got, want)
		}
	}
	kv := keyValueRE.FindStringSubmatch(s)
	if k, v, ok := keyValue(s); ok != (kv != nil) || ok && (k != kv[1] || v != kv[2]) {
		t.Errorf("key=value %q: %q %q %v, the expression %q", s, k, v, ok, kv)
	}
	if got, want := safeReason(s), unsafeRE.ReplaceAllString(s, " "); got != want {
		t.Errorf("reason %q: %q, the expression %q", s, got, want)
	}
	m := tokenHeaderRE.FindStringSubmatch(s)
	token, ok := tokenHeader(s)
	if ok != (m != nil) || ok && token != m[1] {
		t.Errorf("token header %q: %q %v, the expression %q", s, token, ok, m)
	}
}
