package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestOptionsComeFromFlagsOverEnvironmentAndSecretsFromEnvironmentOnly(t *testing.T) {
	env := envOf(map[string]string{
		"PROXOPS_GIT_URL":            "https://git.example.com/ops/infra.git",
		"PROXOPS_GIT_BRANCH":         "prod",
		"PROXOPS_GIT_TOKEN":          "tok",
		"PROXOPS_POLL_INTERVAL":      "45s",
		"PROXOPS_DATA_DIR":           "/var/lib/proxops",
		"HOOK_SECRET":                "hook",
		"PROXOPS_GIT_SSH_PASSPHRASE": "pass",
	})
	o, err := parseOptions([]string{"-git-branch", "main", "-webhook-secret-env", "HOOK_SECRET", "-listen", "127.0.0.1:9495"}, env, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	c := o.watcher
	if c.URL != "https://git.example.com/ops/infra.git" || c.Branch != "main" || c.PollInterval != 45*time.Second ||
		c.DataDir != "/var/lib/proxops" || c.Listen != "127.0.0.1:9495" {
		t.Errorf("config = %+v", c)
	}
	if c.Token != "tok" || c.WebhookSecret != "hook" || c.SSHKeyPassphrase != "pass" {
		t.Errorf("secrets not read from the environment: token %q secret %q passphrase %q", c.Token, c.WebhookSecret, c.SSHKeyPassphrase)
	}
	for _, secretFlag := range []string{"-git-token", "-webhook-secret", "-git-ssh-passphrase"} {
		if _, err := parseOptions([]string{secretFlag, "x"}, env, &bytes.Buffer{}); err == nil {
			t.Errorf("%s is accepted as a flag: secrets would show in the process list", secretFlag)
		}
	}
}

func TestOptionsRejectBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{nil, map[string]string{"PROXOPS_POLL_INTERVAL": "often"}},
		{nil, map[string]string{"PROXOPS_GIT_INSECURE": "maybe"}},
		{[]string{"-log-level", "loud"}, nil},
		{[]string{"stray"}, nil},
	} {
		if _, err := parseOptions(tc.args, envOf(tc.env), &bytes.Buffer{}); err == nil {
			t.Errorf("args %v env %v: accepted", tc.args, tc.env)
		}
	}
}

func TestRunRefusesToStartWithoutABus(t *testing.T) {
	var stderr bytes.Buffer
	code := run([]string{"-git-path", t.TempDir()}, envOf(nil), &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "nats url required") {
		t.Errorf("exit %d, stderr %s; want 1 and a message asking for a NATS url", code, stderr.String())
	}
	stderr.Reset()
	code = run([]string{"-git-url", "http://u:secret@h/r.git", "-nats-url", "nats://127.0.0.1:4222"}, envOf(map[string]string{"HOME": t.TempDir()}), &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "plain http") || strings.Contains(stderr.String(), "secret") {
		t.Errorf("exit %d, stderr %s; want 2 and a configuration error without the password", code, stderr.String())
	}
}
