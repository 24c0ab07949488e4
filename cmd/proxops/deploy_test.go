package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unitFile reads a systemd unit into section → key → values (keys may repeat).
func unitFile(t *testing.T, p string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", p, n, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// The systemd units in deploy/systemd: the single-host unit keeps the predecessor's shape (proxops run from
// the repository's work tree, no flags, its environment file, the age key, hardening), and every unit of a
// distributed install starts a command this repository builds.
func TestSystemdUnits(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "deploy", "systemd")
	single := unitFile(t, filepath.Join(dir, "proxops.service"))
	svc := single["Service"]
	want := map[string]string{
		"Type": "simple", "User": "proxops", "WorkingDirectory": "/var/lib/proxops/gitops",
		"ExecStart": "/usr/local/bin/proxops run", "EnvironmentFile": "-/etc/proxops/proxops.env",
		"Environment": "SOPS_AGE_KEY_FILE=/etc/proxops/age.key", "Restart": "on-failure", "NoNewPrivileges": "yes",
		"ProtectHome": "read-only", "PrivateTmp": "yes", "ProtectSystem": "full",
		"ReadWritePaths": "/home/proxops/.local/share/proxops",
	}
	for k, v := range want {
		if got := svc[k]; len(got) != 1 || got[0] != v {
			t.Errorf("proxops.service: %s = %q, want %q", k, got, v)
		}
	}
	cmd, args, err := newRootCommand().Find([]string{"run"})
	if err != nil || cmd.Name() != "up" || len(args) != 0 {
		t.Errorf("proxops run is %v (%v)", cmd.Name(), err)
	}

	services := map[string]string{
		"proxops-watcher@.service": "watcher", "proxops-planner.service": "planner", "proxops-executor@.service": "executor",
		"proxops-adopter.service": "adopter", "proxops-status.service": "status", "proxops-notifier.service": "notifier",
	}
	for file, name := range services {
		u := unitFile(t, filepath.Join(dir, file))
		exec := u["Service"]["ExecStart"]
		if len(exec) != 1 || !strings.HasPrefix(exec[0], "/usr/local/bin/proxops-"+name) {
			t.Errorf("%s: ExecStart %q", file, exec)
		}
		if _, err := os.Stat(filepath.Join(repoRoot(t), "services", name, "cmd", "proxops-"+name)); err != nil {
			t.Errorf("%s starts a command that is not built here: %v", file, err)
		}
		if u["Service"]["NoNewPrivileges"] == nil || u["Service"]["EnvironmentFile"] == nil || u["Install"]["WantedBy"] == nil {
			t.Errorf("%s: hardening, environment file or install section missing", file)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(services)+1 {
		t.Errorf("deploy/systemd holds %d files; this test knows %d", len(entries), len(services)+1)
	}
}
