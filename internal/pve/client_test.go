package pve_test

import (
	"encoding/pem"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

// TLS is verified by default; a CA file makes a private CA's certificate acceptable; insecure skips the
// check; an unreadable or empty CA file is an error, never silently ignored.
func TestTLSIsVerifiedWithTheSystemRootsOrTheCAFile(t *testing.T) {
	sim, err := pvesim.New(baseSpec())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(sim)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := pve.Config{BaseURL: srv.URL, TokenID: pvesim.DefaultRootTokenID, TokenSecret: pvesim.DefaultRootTokenSecret, ReadAttempts: 1}
	connect := func(mod func(*pve.Config)) error {
		c := cfg
		mod(&c)
		_, err := pve.New(testContext(t), c, slog.New(slog.DiscardHandler))
		return err
	}
	if err := connect(func(*pve.Config) {}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("unverified certificate accepted: %v", err)
	}
	if err := connect(func(c *pve.Config) { c.CAFile = ca }); err != nil {
		t.Errorf("with the CA file: %v", err)
	}
	if err := connect(func(c *pve.Config) { c.Insecure = true }); err != nil {
		t.Errorf("insecure: %v", err)
	}
	if err := connect(func(c *pve.Config) { c.CAFile = junk }); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("junk CA file: %v", err)
	}
	if err := connect(func(c *pve.Config) { c.CAFile = filepath.Join(dir, "missing.pem") }); err == nil {
		t.Error("missing CA file accepted")
	}
}

// Ticket auth logs in once, even when many requests start together, and renews the ticket when PVE
// refuses it.
func TestTicketAuthLogsInOnceForConcurrentRequests(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	c := newSim(t, spec)
	cfg := c.config()
	cfg.TokenID, cfg.TokenSecret = "", ""
	cfg.User, cfg.Password = "root@pam", pvesim.DefaultRootPassword
	cl := c.clientWith(t, cfg)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cl.Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "pve1"})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent observe with a ticket: %v", err)
		}
	}
	if n := c.count("POST", "/access/ticket"); n != 1 {
		t.Fatalf("%d logins, want 1", n)
	}
	if cl.Principal() != "root@pam" {
		t.Errorf("principal %q", cl.Principal())
	}
	// Wrong password: the connection fails with PVE's answer.
	cfg.Password = "wrong"
	if _, err := pve.New(testContext(t), cfg, nil); err == nil || !strings.Contains(err.Error(), "login") {
		t.Errorf("wrong password: %v", err)
	}
}

func TestConnectRefusesPVEOlderThanEight(t *testing.T) {
	spec := baseSpec()
	spec.Version = "7.4.17"
	c := newSim(t, spec)
	_, err := pve.New(testContext(t), c.config(), nil)
	if err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("pve 7.4 accepted: %v", err)
	}
	spec.Version = "8.0.3"
	c = newSim(t, spec)
	if cl := c.client(t); cl.Version() != "8.0.3" {
		t.Fatalf("version %q", cl.Version())
	}
}

func TestConfigValidatesCredentialsAndBaseURL(t *testing.T) {
	c := newSim(t, baseSpec())
	for name, mod := range map[string]func(*pve.Config){
		"no credentials":      func(c *pve.Config) { c.TokenID, c.TokenSecret = "", "" },
		"token without realm": func(c *pve.Config) { c.TokenID = "proxops" },
		"bad url":             func(c *pve.Config) { c.BaseURL = "ftp://pve" },
		"url with user":       func(c *pve.Config) { c.BaseURL = "https://u:p@pve:8006" },
		"wrong secret":        func(c *pve.Config) { c.TokenSecret = "nope" },
	} {
		cfg := c.config()
		mod(&cfg)
		if _, err := pve.New(testContext(t), cfg, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if !pve.SameEndpoint("https://pve.example:8006", "https://PVE.example:8006/api2/json/") ||
		pve.SameEndpoint("https://pve.example:8006", "https://evil.example:8006") ||
		pve.SameEndpoint("https://pve.example", "http://pve.example") {
		t.Error("SameEndpoint")
	}
}

// metrics records adapter measurements.
type metrics struct {
	mu       sync.Mutex
	requests map[string]int
	tasks    map[string]int
}

func (m *metrics) Request(method, path, status string, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[method+" "+path+" "+status]++
}

func (m *metrics) Task(typ, result string, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tasks[typ+" "+result]++
}

func TestMetricsSeeRequestsByTemplateAndTasksByResult(t *testing.T) {
	c := newSim(t, baseSpec())
	m := &metrics{requests: map[string]int{}, tasks: map[string]int{}}
	cfg := c.config()
	cfg.Metrics = m
	cl := c.clientWith(t, cfg)
	if _, err := cl.Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "pve1"}); err != nil {
		t.Fatal(err)
	}
	if m.requests["GET /version 200"] != 1 || m.requests["GET /nodes/{node}/qemu 200"] != 1 {
		t.Fatalf("requests %v", m.requests)
	}
}
