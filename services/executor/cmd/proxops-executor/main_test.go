package main

import (
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigureTakesCredentialsFromTheEnvironment(t *testing.T) {
	base := []string{"--cluster", "lab", "--node", "pve1", "--nats-url", "nats://127.0.0.1:4222", "--pve-url", "https://pve1:8006"}
	cfg, _, err := configure(base, env(map[string]string{"PROXOPS_PVE_TOKEN_VALUE": "proxops@pve!exec=0b6f2d4e-8a31"}))
	if err != nil || cfg.PVE.TokenID != "proxops@pve!exec" || cfg.PVE.TokenSecret != "0b6f2d4e-8a31" || !cfg.OwnEndpoint {
		t.Fatalf("token value: %+v, %v", cfg.PVE, err)
	}
	cfg, _, err = configure(append(base, "--pve-user", "flag@pve", "--pve-token-id", "exec"),
		env(map[string]string{"PROXOPS_PVE_USER": "env@pve", "PROXOPS_PVE_TOKEN": "s3"}))
	if err != nil || cfg.PVE.TokenID != "env@pve!exec" || cfg.PVE.TokenSecret != "s3" {
		t.Fatalf("user and token: %+v, %v", cfg.PVE, err)
	}
	cfg, _, err = configure(append(base, "--pve-user", "root@pam"), env(map[string]string{"PROXOPS_PVE_PASSWORD": "pw"}))
	if err != nil || cfg.PVE.User != "root@pam" || cfg.PVE.Password != "pw" || cfg.PVE.TokenID != "" {
		t.Fatalf("ticket: %+v, %v", cfg.PVE, err)
	}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"no credentials":       {base, nil, "no PVE credentials"},
		"bad token value":      {base, map[string]string{"PROXOPS_PVE_TOKEN_VALUE": "nope"}, "PROXOPS_PVE_TOKEN_VALUE"},
		"token without id":     {base, map[string]string{"PROXOPS_PVE_TOKEN": "s3", "PROXOPS_PVE_USER": "u@pve"}, "--pve-token-id"},
		"node off allowlist":   {append(base, "--allowed-nodes", "pve2,pve3"), map[string]string{"PROXOPS_PVE_PASSWORD": "pw", "PROXOPS_PVE_USER": "u@pve"}, "allowlist"},
		"missing pve endpoint": {base[:6], map[string]string{"PROXOPS_PVE_PASSWORD": "pw", "PROXOPS_PVE_USER": "u@pve"}, "PVE endpoint"},
	} {
		if _, _, err := configure(tc.args, env(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.want)
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
