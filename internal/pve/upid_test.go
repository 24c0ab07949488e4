package pve_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/pve"
)

func TestParseUPIDAcceptsPVEFormsAndRejectsTheRest(t *testing.T) {
	good := []struct {
		in            string
		node, typ, id string
		user          string
		start         int64
	}{
		{"UPID:pve:0003A1B2:0156C2D1:6740A1B2:qmcreate:100:root@pam!proxops:", "pve", "qmcreate", "100", "root@pam!proxops", 0x6740A1B2},
		{"UPID:node-2:00001000:123456789:6740A1B2:download:debian-12.iso:proxops@pve!ci:", "node-2", "download", "debian-12.iso", "proxops@pve!ci", 0x6740A1B2},
		{"UPID:a:00000001:00000002:00000003:imgcopy::root@pam:", "a", "imgcopy", "", "root@pam", 3},
	}
	for _, g := range good {
		u, err := pve.ParseUPID(g.in)
		if err != nil {
			t.Errorf("ParseUPID(%q): %v", g.in, err)
			continue
		}
		if u.Node != g.node || u.Type != g.typ || u.ID != g.id || u.User != g.user || u.StartTime != g.start || u.String() != g.in {
			t.Errorf("ParseUPID(%q) = %+v", g.in, u)
		}
	}
	bad := []string{
		"",
		"UPID:pve:0003A1B2:0156C2D1:6740A1B2:qmcreate:100:root@pam",        // no trailing colon
		"UPID:pve:0003A1B2:0156C2D1:6740A1B2:qmcreate:100:",                // no user
		"UPID:pve:3A1B2:0156C2D1:6740A1B2:qmcreate:100:root@pam:",          // short pid
		"UPID:pve:0003A1B2:0156C2D1:6740A1BZ:qmcreate:100:root@pam:",       // not hex
		"UPID:-pve:0003A1B2:0156C2D1:6740A1B2:qmcreate:100:root@pam:",      // bad node
		"UPID:pve:0003A1B2:0156C2D1:6740A1B2:qm create:100:root@pam:",      // space in type
		"UPID:pve:0003A1B2:0156C2D1:6740A1B2:qmcreate:1/0:root@pam:",       // slash in id
		"UPID:pve:0003A1B2:0156C2D1:6740A1B2:qmcreate:100:root@pam:extra:", // too many fields
		"upid:pve:0003A1B2:0156C2D1:6740A1B2:qmcreate:100:root@pam:",       // prefix case
		"UPID:pve:0003A1B2:0156C2D1AB:6740A1B2:qmcreate:100:root@pam:",     // long pstart
	}
	for _, b := range bad {
		if u, err := pve.ParseUPID(b); err == nil {
			t.Errorf("ParseUPID(%q) accepted: %+v", b, u)
		} else if !strings.Contains(err.Error(), "malformed upid") {
			t.Errorf("ParseUPID(%q) error %q does not say malformed upid", b, err)
		}
	}
}

func FuzzParseUPID(f *testing.F) {
	f.Add("UPID:pve:0003A1B2:0156C2D1:6740A1B2:qmcreate:100:root@pam!proxops:")
	f.Add("UPID:pve:0003A1B2:0156C2D1:6740A1B2:qmcreate:100:root@pam")
	f.Add("UPID:::::::::")
	f.Add("UPID:a:00000001:00000002:00000003:imgcopy::root@pam:")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := pve.ParseUPID(s)
		if err != nil {
			return
		}
		if u.String() != s {
			t.Fatalf("round trip: %q became %q", s, u.String())
		}
		if u.Node == "" || u.Type == "" || u.User == "" {
			t.Fatalf("accepted %q with an empty required field: %+v", s, u)
		}
		again, err := pve.ParseUPID(u.String())
		if err != nil || again != u {
			t.Fatalf("reparse of %q: %+v, %v", s, again, err)
		}
	})
}
