package firewall

import (
	"strings"
	"testing"
)

func in(action string, f func(*Rule)) Rule {
	r := Rule{Type: "in", Action: action, Enable: true}
	if f != nil {
		f(&r)
	}
	return r
}

func TestGuestLockout(t *testing.T) {
	web := map[string][]Rule{"web": {in("ACCEPT", func(r *Rule) { r.Macro = "HTTPS" })}}
	cases := []struct {
		name string
		g    Guest
		want bool
	}{
		{"disabled firewall", Guest{Enabled: false, PolicyIn: "DROP"}, false},
		{"accepting policy", Guest{Enabled: true, PolicyIn: "ACCEPT"}, false},
		{"default policy drops, no rules", Guest{Enabled: true}, true},
		{"reject, only outbound rules", Guest{Enabled: true, PolicyIn: "REJECT", Rules: []Rule{{Type: "out", Action: "ACCEPT", Enable: true}}}, true},
		{"drop with an inbound accept", Guest{Enabled: true, PolicyIn: "DROP", Rules: []Rule{in("ACCEPT", func(r *Rule) { r.Macro = "SSH" })}}, false},
		{"the accept is disabled", Guest{Enabled: true, Rules: []Rule{in("ACCEPT", func(r *Rule) { r.Enable = false })}}, true},
		{"accept through a group", Guest{Enabled: true, Rules: []Rule{{Type: "group", Action: "web", Enable: true}}, Groups: web}, false},
		{"a group that is not known", Guest{Enabled: true, Rules: []Rule{{Type: "group", Action: "nosuch", Enable: true}}, Groups: web}, true},
	}
	for _, tc := range cases {
		got, why := GuestLockout(tc.g)
		if got != tc.want || (got && why == "") {
			t.Errorf("%s: %v %q, want %v", tc.name, got, why, tc.want)
		}
	}
}

func TestClusterLockout(t *testing.T) {
	ssh := in("ACCEPT", func(r *Rule) { r.Macro = "SSH" })
	gui := in("ACCEPT", func(r *Rule) { r.Proto = "tcp"; r.DPort = "8006" })
	cases := []struct {
		name string
		c    Cluster
		want string // "" for no lock-out, else the ports cut off
	}{
		{"disabled", Cluster{PolicyIn: "DROP"}, ""},
		{"accepting policy", Cluster{Enabled: true, PolicyIn: "ACCEPT"}, ""},
		{"no rules", Cluster{Enabled: true}, "8006 and 22"},
		{"management ip set", Cluster{Enabled: true, Management: []string{"10.0.0.0/24"}}, ""},
		{"ssh only", Cluster{Enabled: true, Rules: []Rule{ssh}}, "8006"},
		{"ssh macro and gui port", Cluster{Enabled: true, Rules: []Rule{ssh, gui}}, ""},
		{"a port range", Cluster{Enabled: true, Rules: []Rule{in("ACCEPT", func(r *Rule) { r.Proto = "tcp"; r.DPort = "20:25,8000:8010" })}}, ""},
		{"service name", Cluster{Enabled: true, Rules: []Rule{gui, in("ACCEPT", func(r *Rule) { r.Proto = "tcp"; r.DPort = "ssh" })}}, ""},
		{"udp does not count", Cluster{Enabled: true, Rules: []Rule{in("ACCEPT", func(r *Rule) { r.Proto = "udp"; r.DPort = "22,8006" })}}, "8006 and 22"},
		{"restricted sources still keep it reachable", Cluster{Enabled: true, Rules: []Rule{in("ACCEPT", func(r *Rule) { r.Source = "+admins"; r.Proto = "tcp"; r.DPort = "22,8006" })}}, ""},
		{"a drop for everyone first shadows the accept", Cluster{Enabled: true, PolicyIn: "REJECT", Rules: []Rule{in("DROP", func(r *Rule) { r.Proto = "tcp"; r.DPort = "22" }), ssh, gui}}, "22"},
		{"accept everything", Cluster{Enabled: true, Rules: []Rule{in("ACCEPT", nil)}}, ""},
		{"through a group", Cluster{Enabled: true, Rules: []Rule{{Type: "group", Action: "admin", Enable: true}}, Groups: map[string][]Rule{"admin": {ssh, gui}}}, ""},
	}
	for _, tc := range cases {
		got, why := ClusterLockout(tc.c)
		if got != (tc.want != "") || (got && !strings.Contains(why, "port "+tc.want+" reachable")) {
			t.Errorf("%s: %v %q, want %q", tc.name, got, why, tc.want)
		}
	}
}
