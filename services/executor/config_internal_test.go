package executor

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/pve"
)

// Only an executor with its own endpoint compares the base-url a request names with it, as PVE endpoints:
// scheme, host (any case), port (the scheme's default when none is given) and path (with or without
// /api2/json and a trailing slash).
func TestRequestBaseURLIsComparedAsAnEndpoint(t *testing.T) {
	cases := []struct {
		own      bool
		endpoint string
		named    string
		refused  bool
	}{
		{true, "https://pve.example.invalid:8006", "", false},
		{true, "https://pve.example.invalid:8006", "https://pve.example.invalid:8006", false},
		{true, "https://pve.example.invalid:8006", "https://PVE.example.invalid:8006/", false},
		{true, "https://pve.example.invalid:8006", "https://pve.example.invalid:8006/api2/json", false},
		{true, "https://pve.example.invalid", "https://pve.example.invalid:443/", false},
		{true, "http://pve.example.invalid:80", "http://pve.example.invalid", false},
		{true, "https://pve.example.invalid:8006", "https://pve.attacker.example:8006", true},
		{true, "https://pve.example.invalid:8006", "http://pve.example.invalid:8006", true},
		{true, "https://pve.example.invalid:8006", "https://pve.example.invalid:8007", true},
		{true, "https://pve.example.invalid:8006", "https://pve.example.invalid:8006/proxy", true},
		{true, "https://pve.example.invalid:8006", "not a url", true},
		{false, "https://pve.example.invalid:8006", "https://pve.attacker.example:8006", false},
	}
	for _, c := range cases {
		cfg := Config{Cluster: "lab", OwnEndpoint: c.own, PVE: pve.Config{BaseURL: c.endpoint}}
		msg := cfg.requestMismatch(c.named)
		if (msg != "") != c.refused {
			t.Errorf("own endpoint %t, endpoint %s, named %q: refusal %q, want refused %t", c.own, c.endpoint, c.named, msg, c.refused)
		}
		if c.refused && (!strings.Contains(msg, c.named) || !strings.Contains(msg, c.endpoint)) {
			t.Errorf("refusal %q does not name both %q and %s", msg, c.named, c.endpoint)
		}
	}
}
