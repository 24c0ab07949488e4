package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var base = []string{"--cluster", "lab", "--node", "pve1", "--nats-url", "nats://127.0.0.1:4222", "--pve-url", "https://pve1:8006",
	"--trusted-planner-key", plannerKey}

// plannerKey is a valid public nkey of a planner.
const plannerKey = "UCWLNKOLNKNRF3VMRVQVB6LVNYDVWTVRMQEBJK2YJ6EDMCPJA3ZHIL6M"

func TestConfigureTakesCredentialsFromTheEnvironment(t *testing.T) {
	ctx := testContext(t)
	cfg, _, err := configure(ctx, base, env(map[string]string{"PROXOPS_PVE_TOKEN_VALUE": "proxops@pve!exec=0b6f2d4e-8a31"}), io.Discard)
	if err != nil || cfg.PVE.TokenID != "proxops@pve!exec" || cfg.PVE.TokenSecret != "0b6f2d4e-8a31" || !cfg.OwnEndpoint {
		t.Fatalf("token value: %+v, %v", cfg.PVE, err)
	}
	cfg, _, err = configure(ctx, append(base, "--pve-user", "flag@pve", "--pve-token-id", "exec"),
		env(map[string]string{"PROXOPS_PVE_USER": "env@pve", "PROXOPS_PVE_TOKEN": "s3"}), io.Discard)
	if err != nil || cfg.PVE.TokenID != "env@pve!exec" || cfg.PVE.TokenSecret != "s3" {
		t.Fatalf("user and token: %+v, %v", cfg.PVE, err)
	}
	if cfg.PVE.ObserveConcurrency != 8 {
		t.Fatalf("default observe concurrency %d, want 8", cfg.PVE.ObserveConcurrency)
	}
	cfg, _, err = configure(ctx, append(base, "--observe-concurrency", "32"), env(map[string]string{"PROXOPS_PVE_TOKEN_VALUE": "proxops@pve!exec=0b6f2d4e-8a31"}), io.Discard)
	if err != nil || cfg.PVE.ObserveConcurrency != 32 {
		t.Fatalf("--observe-concurrency 32: %d, %v", cfg.PVE.ObserveConcurrency, err)
	}
	cfg, _, err = configure(ctx, append(base, "--pve-user", "root@pam"), env(map[string]string{"PROXOPS_PVE_PASSWORD": "pw"}), io.Discard)
	if err != nil || cfg.PVE.User != "root@pam" || cfg.PVE.Password != "pw" || cfg.PVE.TokenID != "" {
		t.Fatalf("ticket: %+v, %v", cfg.PVE, err)
	}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"no credentials":         {base, nil, "no effective PVE user/token"},
		"bad token value":        {base, map[string]string{"PROXOPS_PVE_TOKEN_VALUE": "nope"}, "PROXOPS_PVE_TOKEN_VALUE"},
		"token without id":       {base, map[string]string{"PROXOPS_PVE_TOKEN": "s3", "PROXOPS_PVE_USER": "u@pve"}, "pve.token-id"},
		"ticket without user":    {base, map[string]string{"PROXOPS_PVE_PASSWORD": "pw"}, "pve.user"},
		"refs without a file":    {append(base, "--secrets-pve-token", "t"), map[string]string{"PROXOPS_PVE_PASSWORD": "pw"}, "--secrets-file"},
		"node off allowlist":     {append(base, "--allowed-nodes", "pve2,pve3"), map[string]string{"PROXOPS_PVE_PASSWORD": "pw", "PROXOPS_PVE_USER": "u@pve"}, "allowlist"},
		"missing pve endpoint":   {base[:6], map[string]string{"PROXOPS_PVE_PASSWORD": "pw", "PROXOPS_PVE_USER": "u@pve"}, "PVE endpoint"},
		"no observe concurrency": {append(base, "--observe-concurrency", "0"), map[string]string{"PROXOPS_PVE_PASSWORD": "pw", "PROXOPS_PVE_USER": "u@pve"}, "--observe-concurrency"},
		"no trusted planner key": {base[:8], map[string]string{"PROXOPS_PVE_PASSWORD": "pw", "PROXOPS_PVE_USER": "u@pve"}, "--trusted-planner-key"},
		"malformed planner key":  {append(base, "--trusted-planner-key", "UNOTAKEY"), map[string]string{"PROXOPS_PVE_PASSWORD": "pw", "PROXOPS_PVE_USER": "u@pve"}, `trusted planner key "UNOTAKEY"`},
	} {
		if _, _, err := configure(ctx, tc.args, env(tc.env), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.want)
		}
	}
}

// The demo fixtures: a SOPS file encrypted to demo.agekey, holding the token proxops@pve!proxops and
// cloud-init secrets.
var (
	demoDir     = filepath.Join("..", "..", "..", "..", "internal", "secrets", "testdata", "demo")
	demoSecrets = filepath.Join(demoDir, "secrets.sops.yaml")
	demoKey     = filepath.Join(demoDir, "demo.agekey")
)

const demoToken = "0b6f2d4e-8a31-4c57-9e02-d1c3a5f7b9e4"

var demoRefs = []string{"--secrets-file", demoSecrets, "--secrets-pve-user", "proxops-user",
	"--secrets-pve-token-id", "proxops-token-id", "--secrets-pve-token", "proxops-token"}

// --secrets-file takes PVE credentials from the SOPS file (named entries win over the environment, and a
// composed token value from the environment is ignored) and makes its cloud-init secrets resolvable.
func TestSecretsFileSuppliesCredentialsAndCloudInitSecrets(t *testing.T) {
	ctx := testContext(t)
	keyText, err := os.ReadFile(demoKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, keys := range map[string]map[string]string{
		"key file":   {"SOPS_AGE_KEY_FILE": demoKey},
		"inline key": {"SOPS_AGE_KEY": string(keyText)},
	} {
		e := map[string]string{"PROXOPS_PVE_TOKEN_VALUE": "other@pve!x=not-this", "PROXOPS_PVE_USER": "other@pve",
			"PROXOPS_PVE_TOKEN": "not-this-either", "HOME": t.TempDir()}
		for k, v := range keys {
			e[k] = v
		}
		cfg, _, err := configure(ctx, append(base, demoRefs...), env(e), io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cfg.PVE.TokenID != "proxops@pve!proxops" || cfg.PVE.TokenSecret != demoToken {
			t.Fatalf("%s: credentials %q / secret from the file? %v", name, cfg.PVE.TokenID, cfg.PVE.TokenSecret == demoToken)
		}
		if cfg.Secrets == nil {
			t.Fatalf("%s: no secret resolver", name)
		}
		key, err := cfg.Secrets.Resolve(ctx, "cloud-init.ssh-keys.main")
		if err != nil || !strings.HasPrefix(key, "ssh-ed25519 ") || !strings.HasSuffix(key, "demo-main@proxops.invalid") {
			t.Fatalf("%s: ssh key %q, %v", name, key, err)
		}
		if _, err := cfg.Secrets.Resolve(ctx, "cloud-init.ssh-keys.absent"); err == nil {
			t.Fatalf("%s: an absent entry resolved", name)
		}
	}

	// Without named entries the file still serves cloud-init secrets, and credentials come from the
	// environment as usual.
	cfg, _, err := configure(ctx, append(base, "--secrets-file", demoSecrets),
		env(map[string]string{"SOPS_AGE_KEY_FILE": demoKey, "PROXOPS_PVE_TOKEN_VALUE": "ops@pve!exec=s3cret"}), io.Discard)
	if err != nil || cfg.PVE.TokenID != "ops@pve!exec" || cfg.PVE.TokenSecret != "s3cret" || cfg.Secrets == nil {
		t.Fatalf("file without credential entries: %+v, %v", cfg.PVE, err)
	}
	if pw, err := cfg.Secrets.Resolve(ctx, "cloud-init.passwords.default"); err != nil || pw == "" {
		t.Fatalf("password: %v", err)
	}

	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"no age key":      {append(base, demoRefs...), map[string]string{"HOME": t.TempDir()}, "secrets.sops.yaml"},
		"missing file":    {append(base, "--secrets-file", filepath.Join(t.TempDir(), "none.sops.yaml")), nil, "--secrets-file"},
		"missing entry":   {append(base, "--secrets-file", demoSecrets, "--secrets-pve-user", "nope", "--secrets-pve-token-id", "proxops-token-id", "--secrets-pve-token", "proxops-token"), map[string]string{"SOPS_AGE_KEY_FILE": demoKey}, "nope"},
		"not a sops file": {append(base, "--secrets-file", filepath.Join(demoDir, "secrets.plain.yaml")), map[string]string{"SOPS_AGE_KEY_FILE": demoKey}, "not encrypted"},
	} {
		_, _, err := configure(ctx, tc.args, env(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), demoToken) {
			t.Errorf("%s: the error shows the token", name)
		}
	}
}

func TestFaultHookIsOffUnlessAskedFor(t *testing.T) {
	for _, spec := range []string{"", "kill", "explode:submitted", "submitted"} {
		if fault(spec) != nil {
			t.Errorf("fault(%q) is enabled", spec)
		}
	}
	if fault("block:submitted") == nil || fault("kill:submitted") == nil {
		t.Error("fault hooks not enabled")
	}
}

// The executor keeps reading --secrets-file: after the file is replaced by a rotated version, the
// credentials it hands out are the rotated ones, without a restart.
func TestSecretsFileIsReadAgainAfterARotation(t *testing.T) {
	ctx := testContext(t)
	path := filepath.Join(t.TempDir(), "secrets.sops.yaml")
	copyFile := func(from string) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(demoSecrets)
	args := append(slices.Clone(base), "--secrets-file", path, "--secrets-pve-user", "proxops-user",
		"--secrets-pve-token-id", "proxops-token-id", "--secrets-pve-token", "proxops-token")
	cfg, _, err := configure(ctx, args, env(map[string]string{"SOPS_AGE_KEY_FILE": demoKey}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PVE.TokenSecret != demoToken || cfg.Credentials == nil {
		t.Fatalf("at start: token from the file? %v, credential source %v", cfg.PVE.TokenSecret == demoToken, cfg.Credentials != nil)
	}
	copyFile(filepath.Join(demoDir, "rotated.sops.yaml"))
	c, err := cfg.Credentials.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.TokenID != "proxops@pve!proxops" || c.TokenSecret == demoToken || c.TokenSecret == "" || c.Secrets == nil {
		t.Fatalf("after the rotation: %v (still the old token? %v)", c, c.TokenSecret == demoToken)
	}
}

// The executor's NATS settings follow the same flags and environment variables as every other service, so an
// environment file written from docs/deploy.md connects it.
func TestConfigureTakesTheNATSConnectionFromTheEnvironmentLikeEveryService(t *testing.T) {
	ctx := testContext(t)
	args := []string{"--cluster", "lab", "--node", "pve1", "--pve-url", "https://pve1:8006", "--trusted-planner-key", plannerKey}
	cfg, _, err := configure(ctx, args, env(map[string]string{"PROXOPS_PVE_TOKEN_VALUE": "proxops@pve!exec=0b6f2d4e-8a31",
		"PROXOPS_NATS_URL": "tls://nats-1:4222", "PROXOPS_NATS_USER": "executor-lab-pve1", "PROXOPS_NATS_PASSWORD": "pw",
		"PROXOPS_NATS_CA": "/etc/proxops/nats-ca.pem", "PROXOPS_NATS_CREDS": "/etc/proxops/exec.creds", "PROXOPS_NATS_NKEY": "/etc/proxops/exec.nk"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.NATS
	if n.URL != "tls://nats-1:4222" || n.User != "executor-lab-pve1" || n.Password != "pw" || n.TLSCA != "/etc/proxops/nats-ca.pem" ||
		n.CredsFile != "/etc/proxops/exec.creds" || n.NKeySeedFile != "/etc/proxops/exec.nk" {
		t.Fatalf("NATS settings from the environment: %+v", n)
	}
	cfg, _, err = configure(ctx, append(args, "--nats-url", "nats://127.0.0.1:4222", "--nats-nkey", "/run/exec.nk", "--nats-user", "flag-user"),
		env(map[string]string{"PROXOPS_PVE_TOKEN_VALUE": "proxops@pve!exec=0b6f2d4e-8a31", "PROXOPS_NATS_USER": "env-user"}), io.Discard)
	if err != nil || cfg.NATS.URL != "nats://127.0.0.1:4222" || cfg.NATS.NKeySeedFile != "/run/exec.nk" || cfg.NATS.User != "flag-user" {
		t.Fatalf("flags over the environment: %+v, %v", cfg.NATS, err)
	}
}

// The planner keys an executor trusts come from repeated --trusted-planner-key flags, or else from
// PROXOPS_TRUSTED_PLANNER_KEYS (comma-separated), as the other settings fall back on the environment.
func TestConfigureTrustsPlannerKeysFromFlagsOrEnvironment(t *testing.T) {
	ctx := testContext(t)
	const second = "UC5DVJ2AP5QTWMPRQDX6JZELSA5NSXJZLHWRFPSGSNPBAUMDZ6WGOCOX"
	creds := map[string]string{"PROXOPS_PVE_PASSWORD": "pw", "PROXOPS_PVE_USER": "u@pve"}
	cfg, _, err := configure(ctx, append(base, "--trusted-planner-key", second), env(creds), io.Discard)
	if err != nil || !slices.Equal(cfg.TrustedPlannerKeys, []string{plannerKey, second}) {
		t.Fatalf("flags: %v, %v", cfg.TrustedPlannerKeys, err)
	}
	creds["PROXOPS_TRUSTED_PLANNER_KEYS"] = second + "," + plannerKey
	cfg, _, err = configure(ctx, base[:8], env(creds), io.Discard)
	if err != nil || !slices.Equal(cfg.TrustedPlannerKeys, []string{second, plannerKey}) {
		t.Fatalf("environment: %v, %v", cfg.TrustedPlannerKeys, err)
	}
	cfg, _, err = configure(ctx, base, env(creds), io.Discard)
	if err != nil || !slices.Equal(cfg.TrustedPlannerKeys, []string{plannerKey}) {
		t.Fatalf("a flag wins over the environment: %v, %v", cfg.TrustedPlannerKeys, err)
	}
}
