package pve_test

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

// Connecting names the request and PVE's answer, and classifies it: refused credentials and an untrusted
// certificate are terminal (waiting does not help), a refused connection and a 503 retryable.
func TestConnectFailuresNameTheirCauseAndClass(t *testing.T) {
	sim, err := pvesim.New(pvesim.DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	plain := httptest.NewServer(sim)
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(sim)
	defer tlsSrv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	_ = l.Close()

	good := pve.Config{TokenID: pvesim.DefaultRootTokenID, TokenSecret: pvesim.DefaultRootTokenSecret,
		ReadAttempts: 2, ReadBackoff: time.Millisecond}
	for _, c := range []struct {
		name  string
		cfg   func(pve.Config) pve.Config
		fault bool
		want  []string
		class plan.ErrorClass
	}{
		{name: "refused credentials", cfg: func(c pve.Config) pve.Config {
			c.BaseURL, c.TokenSecret = plain.URL, "00000000-0000-0000-0000-000000000000"
			return c
		}, want: []string{"GET /version", "401 Authentication failed"}, class: plan.ErrorTerminal},
		{name: "untrusted certificate", cfg: func(c pve.Config) pve.Config { c.BaseURL = tlsSrv.URL; return c },
			want: []string{"/version", "certificate"}, class: plan.ErrorTerminal},
		{name: "connection refused", cfg: func(c pve.Config) pve.Config { c.BaseURL = closed; return c },
			want: []string{"/version", "connection refused"}, class: plan.ErrorRetryable},
		{name: "service unavailable", cfg: func(c pve.Config) pve.Config { c.BaseURL = plain.URL; return c }, fault: true,
			want: []string{"GET /version", "503"}, class: plan.ErrorRetryable},
	} {
		t.Run(c.name, func(t *testing.T) {
			sim.ClearFaults()
			if c.fault {
				if err := sim.SetFaults(pvesim.Faults{Errors: []pvesim.ErrorFault{{Method: "GET", Path: "/version", Rate: 1,
					Status: 503, Message: "Service Unavailable"}}}); err != nil {
					t.Fatal(err)
				}
				defer sim.ClearFaults()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := pve.New(ctx, c.cfg(good), nil)
			if err == nil {
				t.Fatal("connected")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if got := pve.ClassOf(err); got != c.class {
				t.Errorf("class %s, want %s (%v)", got, c.class, err)
			}
		})
	}
}
