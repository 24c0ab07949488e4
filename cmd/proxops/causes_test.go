package main

import (
	"encoding/json"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/render"
)

// closedAddress is a loopback address nothing listens on: connections to it are refused.
func closedAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// pointAt commits the demo cluster's base-url changed to url.
func (e *demoEnv) pointAt(url string) {
	e.t.Helper()
	e.edit("clusters/demo/config.yaml", func(s string) string { return strings.Replace(s, e.srv.URL, url, 1) })
	e.commit("point the demo cluster at " + url)
}

// diff names the root cause of a rejected observe (the node, the request, PVE's answer) in its text and its
// JSON, for refused credentials, an untrusted certificate, a refused connection and a 5xx; it says whether
// the cause may pass; and it never ends on NATS's "no responders".
func TestDiffNamesTheCauseOfARejectedObserve(t *testing.T) {
	for _, c := range []struct {
		name      string
		setup     func(t *testing.T) *demoEnv
		want      []string
		transient bool
	}{
		{name: "refused credentials", setup: func(t *testing.T) *demoEnv {
			return newDemoEnvWith(t, func(s *pvesim.Spec) {
				for i := range s.Tokens {
					s.Tokens[i].Secret = "00000000-0000-0000-0000-000000000000"
				}
			})
		}, want: []string{"node pve1: ", "GET /version", "401 Authentication failed"}},
		{name: "untrusted certificate", setup: func(t *testing.T) *demoEnv {
			e := newDemoEnv(t)
			srv := httptest.NewTLSServer(e.sim)
			t.Cleanup(srv.Close)
			e.pointAt(srv.URL)
			return e
		}, want: []string{"node pve1: ", "/version", "certificate"}},
		{name: "connection refused", setup: func(t *testing.T) *demoEnv {
			e := newDemoEnv(t)
			e.pointAt("http://" + closedAddress(t))
			return e
		}, want: []string{"node pve1: ", "/version", "connection refused"}, transient: true},
		{name: "service unavailable", setup: func(t *testing.T) *demoEnv {
			e := newDemoEnv(t)
			if err := e.sim.SetFaults(pvesim.Faults{Errors: []pvesim.ErrorFault{{Method: "GET", Path: "/nodes/{node}/qemu",
				Rate: 1, Status: 503, Message: "Service Unavailable"}}}); err != nil {
				t.Fatal(err)
			}
			return e
		}, want: []string{"node pve1: ", "GET /nodes/pve1/qemu", "503"}, transient: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := c.setup(t)
			out, errOut, code := e.run("diff")
			if code != 1 || !strings.Contains(out, "=== demo ===\nABORTED: pve inventory read failed") {
				t.Fatalf("diff: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("diff text does not say %q:\n%s", w, out)
				}
			}
			if strings.Contains(out+errOut, "no responders") {
				t.Errorf("diff ends on no responders:\n%s\n%s", out, errOut)
			}

			js, errOut, code := e.run("diff", "-o", "json")
			var doc struct {
				Rejections []render.RejectionJSON `json:"rejections"`
			}
			if err := json.Unmarshal([]byte(js), &doc); err != nil || code != 1 || len(doc.Rejections) != 1 {
				t.Fatalf("diff -o json: exit %d, %v\n%s\n%s", code, err, js, errOut)
			}
			r := doc.Rejections[0]
			if r.Reason != "observe_failed" || len(r.Diagnostics) == 0 || r.Transient != c.transient {
				t.Fatalf("json rejection: %+v (want transient %v)", r, c.transient)
			}
			for _, w := range c.want {
				if !strings.Contains(r.Diagnostics[0].Message, w) {
					t.Errorf("json diagnostic %q does not say %q", r.Diagnostics[0].Message, w)
				}
			}
		})
	}
}
