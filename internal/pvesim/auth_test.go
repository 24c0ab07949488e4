package pvesim_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
)

// request sends a form-encoded request with the given headers (no default credentials).
func (c *testCluster) request(method, path string, f url.Values, headers map[string]string) reply {
	c.t.Helper()
	var body *strings.Reader
	target := c.srv.URL + "/api2/json" + path
	if method == http.MethodGet && f != nil {
		target += "?" + f.Encode()
		f = nil
	}
	if f != nil {
		body = strings.NewReader(f.Encode())
	}
	var req *http.Request
	var err error
	if body != nil {
		req, err = http.NewRequest(method, target, body)
	} else {
		req, err = http.NewRequest(method, target, nil)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return c.send(req)
}

func login(t *testing.T, c *testCluster) (ticket, csrf string) {
	t.Helper()
	r := c.request("POST", "/access/ticket", form("username", "root@pam", "password", pvesim.DefaultRootPassword), nil)
	if r.Status != 200 {
		t.Fatalf("login: %d %s", r.Status, r.Message)
	}
	d := r.obj(t)
	ticket, _ = d["ticket"].(string)
	csrf, _ = d["CSRFPreventionToken"].(string)
	if !strings.HasPrefix(ticket, "PVE:root@pam:") || csrf == "" {
		t.Fatalf("login data %v", d)
	}
	return ticket, csrf
}

// Tickets follow pve-access-control and pve-http-server: a bad login is 401 "authentication failure";
// a ticket reads without CSRF but writes need the CSRFPreventionToken header (else 401 "Permission
// denied - invalid csrf token"); a ticket cookie is preferred over a token header; a token header sent to
// POST /access/ticket (allowtoken 0) is refused with PVE's permission text, whatever its secret.
func TestTicketAuthenticationFollowsPVE(t *testing.T) {
	c := defaultCluster(t)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100"))
	ticket, csrf := login(t, c)
	cookie := map[string]string{"Cookie": "PVEAuthCookie=" + url.QueryEscape(ticket)}
	withCSRF := map[string]string{"Cookie": cookie["Cookie"], "CSRFPreventionToken": csrf}
	const tokenOnTicket = "Permission check failed (URI '/access/ticket' not available with API token, need proper ticket.\n)\n"
	tests := []struct {
		name    string
		method  string
		path    string
		form    []string
		headers map[string]string
		status  int
		message string // the whole message when status is not 200
	}{
		{"wrong password", "POST", "/access/ticket", []string{"username", "root@pam", "password", "wrong"}, nil, 401, "authentication failure\n"},
		{"unknown user", "POST", "/access/ticket", []string{"username", "nobody@pve", "password", "x"}, nil, 401, "authentication failure\n"},
		{"ticket renewal", "POST", "/access/ticket", []string{"username", "root@pam", "password", ticket}, nil, 200, ""},
		{"ticket for another user", "POST", "/access/ticket", []string{"username", "proxops@pve", "password", ticket}, nil, 401, "authentication failure\n"},
		{"token sent to the ticket endpoint", "POST", "/access/ticket", []string{"username", "root@pam", "password", pvesim.DefaultRootPassword},
			map[string]string{"Authorization": rootToken}, 403, tokenOnTicket},
		{"unknown token sent to the ticket endpoint", "POST", "/access/ticket", []string{"username", "root@pam", "password", pvesim.DefaultRootPassword},
			map[string]string{"Authorization": "PVEAPIToken=nobody@pve!x=y"}, 403, tokenOnTicket},
		{"read with a ticket", "GET", "/nodes/pve1/qemu/100/config", nil, cookie, 200, ""},
		{"ticket in the Authorization header", "GET", "/nodes", nil, map[string]string{"Authorization": "PVEAuthCookie=" + ticket}, 200, ""},
		{"write with a ticket without CSRF", "PUT", "/nodes/pve1/qemu/100/config", []string{"name", "a"}, cookie, 401, "Permission denied - invalid csrf token\n"},
		{"write with a wrong CSRF token", "PUT", "/nodes/pve1/qemu/100/config", []string{"name", "a"},
			map[string]string{"Cookie": cookie["Cookie"], "CSRFPreventionToken": strings.Split(csrf, ":")[0] + ":bm90LWl0"}, 401, "Permission denied - invalid csrf token\n"},
		{"write with a ticket and CSRF", "PUT", "/nodes/pve1/qemu/100/config", []string{"name", "b"}, withCSRF, 200, ""},
		{"forged ticket", "GET", "/nodes", nil, map[string]string{"Cookie": "PVEAuthCookie=PVE:root@pam:66F1A2B3::c2ln"}, 401, "No ticket\n"},
		{"ticket cookie preferred over a bad token", "GET", "/nodes", nil,
			map[string]string{"Cookie": cookie["Cookie"], "Authorization": "PVEAPIToken=root@pam!proxops=wrong"}, 200, ""},
		{"token writes without CSRF", "PUT", "/nodes/pve1/qemu/100/config", []string{"name", "c"}, map[string]string{"Authorization": rootToken}, 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f url.Values
			if tc.form != nil {
				f = form(tc.form...)
			}
			r := c.request(tc.method, tc.path, f, tc.headers)
			if r.Status != tc.status {
				t.Fatalf("status %d %q, want %d", r.Status, r.Message, tc.status)
			}
			if tc.status == 200 {
				return
			}
			if r.Message != tc.message || string(r.Data) != "null" {
				t.Fatalf("message %q data %s, want %q", r.Message, r.Data, tc.message)
			}
			if r.Reason != strings.SplitN(r.Message, "\n", 2)[0] {
				t.Errorf("reason phrase %q, want the message's first line", r.Reason)
			}
		})
	}
	if got := c.config("pve1", "qemu", 100)["name"]; got != "c" {
		t.Fatalf("name %v after the writes: only the accepted ones may apply", got)
	}
}

// Every 401 waits the configured delay before it is answered (PVE waits about 3 s); other answers,
// including the 403 for a token on the ticket endpoint, do not count as authentication failures.
func TestAuthenticationFailuresAreDelayed(t *testing.T) {
	const delay = 250 * time.Millisecond
	spec := pvesim.DefaultSpec()
	spec.AuthFailureDelay = pvesim.Duration(delay)
	c := newCluster(t, spec)
	ticket, _ := login(t, c)
	failures := []struct {
		name    string
		method  string
		path    string
		form    url.Values
		headers map[string]string
	}{
		{"bad token", "GET", "/nodes", nil, map[string]string{"Authorization": "PVEAPIToken=root@pam!proxops=wrong"}},
		{"no credentials", "GET", "/nodes", nil, nil},
		{"bad login", "POST", "/access/ticket", form("username", "root@pam", "password", "wrong"), nil},
		{"write without CSRF", "POST", "/nodes/pve1/qemu", form("vmid", "100"), map[string]string{"Cookie": "PVEAuthCookie=" + url.QueryEscape(ticket)}},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := c.request(tc.method, tc.path, tc.form, tc.headers)
			if took := time.Since(start); r.Status != 401 || took < delay {
				t.Fatalf("got %d after %v, want 401 after at least %v", r.Status, took, delay)
			}
		})
	}
	if c.sim.Exists(100) {
		t.Fatal("a refused write must not create the guest")
	}
}
