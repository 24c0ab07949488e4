package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/testkit"
)

func TestConfigureReadsFlagsAndTheEnvironment(t *testing.T) {
	key := testkit.PlannerKeyFile(t)
	env := map[string]string{"PROXOPS_NATS_URL": "nats://127.0.0.1:4222", "PROXOPS_NATS_PASSWORD": "pw",
		"PROXOPS_SIGNING_KEY_FILE": key}
	cfg, listen, level, err := configure([]string{"--name", "p1", "--lease-ttl", "10s", "--nats-user", "planner",
		"--local-secrets", "--metrics-listen", "", "--log-level", "debug"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "p1" || cfg.LeaseTTL != 10*time.Second || cfg.NATS.URL != "nats://127.0.0.1:4222" ||
		cfg.NATS.User != "planner" || cfg.NATS.Password != "pw" || !cfg.LocalSecrets || listen != "" || level.String() != "DEBUG" {
		t.Fatalf("config %+v, listen %q, level %s", cfg, listen, level)
	}
	if cfg.Signer == nil || cfg.Signer.PublicKey() != testkit.PlannerKey(t).PublicKey() {
		t.Fatalf("signing key from PROXOPS_SIGNING_KEY_FILE: %v", cfg.Signer)
	}
}

func TestConfigureRefusesWhatCannotRun(t *testing.T) {
	none := func(string) string { return "" }
	notASeed := filepath.Join(t.TempDir(), "planner.nk")
	if err := os.WriteFile(notASeed, []byte("UCWLNKOLNKNRF3VMRVQVB6LVNYDVWTVRMQEBJK2YJ6EDMCPJA3ZHIL6M\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no NATS server"},
		{[]string{"--nats-url", "nats://x:4222"}, "no signing key: give --signing-key-file"},
		{[]string{"--nats-url", "nats://x:4222", "--signing-key-file", notASeed}, "--signing-key-file"},
		{[]string{"--nats-url", "nats://x:4222", "--log-level", "loud"}, "--log-level"},
		{[]string{"--nats-url", "nats://x:4222", "--lease-ttl", "100ms"}, "lease ttl"},
		{[]string{"--nats-url", "nats://x:4222", "extra"}, "unexpected arguments"},
	} {
		if _, _, _, err := configure(c.args, none); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}
