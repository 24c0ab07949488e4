package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/testkit"
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
	code := run(context.Background(), []string{"-git-path", t.TempDir()}, envOf(nil), &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "nats url required") {
		t.Errorf("exit %d, stderr %s; want 1 and a message asking for a NATS url", code, stderr.String())
	}
	stderr.Reset()
	code = run(context.Background(), []string{"-git-url", "http://u:secret@h/r.git", "-nats-url", "nats://127.0.0.1:4222"}, envOf(map[string]string{"HOME": t.TempDir()}), &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "plain http") || strings.Contains(stderr.String(), "secret") {
		t.Errorf("exit %d, stderr %s; want 2 and a configuration error without the password", code, stderr.String())
	}
}

func TestMetricsListenDefaultsToLoopbackWithoutTheWebhookServer(t *testing.T) {
	o, err := parseOptions(nil, envOf(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.watcher.MetricsListen != DefaultMetricsListen || !strings.HasPrefix(o.watcher.MetricsListen, "127.0.0.1:") || o.watcher.Listen != "" {
		t.Fatalf("metrics %q, webhook %q; want %s and no webhook server", o.watcher.MetricsListen, o.watcher.Listen, DefaultMetricsListen)
	}
	o, err = parseOptions([]string{"-metrics-listen", ""}, envOf(nil), &bytes.Buffer{})
	if err != nil || o.watcher.MetricsListen != "" {
		t.Fatalf("-metrics-listen \"\": %q, %v; want off", o.watcher.MetricsListen, err)
	}
}

func TestWatcherProcessServesMetricsAndHealthWithoutAWebhook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: t.TempDir(), Listen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	admin, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	if _, err := admin.Provision(ctx, bus.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	repoDir := t.TempDir()
	commit := commitFile(t, repoDir, "clusters/lab/config.yaml", "name: lab\n")
	info := srv.ClientInfo()
	addr := testkit.FreeAddr(t)
	env := envOf(map[string]string{"PROXOPS_NATS_PASSWORD": info.Password, "HOME": t.TempDir()})
	runCtx, stop := context.WithCancel(ctx)
	var stderr testkit.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"-git-path", repoDir, "-data-dir", t.TempDir(), "-nats-url", info.URL,
			"-nats-user", info.User, "-metrics-listen", addr}, env, &stderr)
	}()
	want := `proxops_watcher_revision_info{branch="main",commit="` + commit + `"`
	body := ""
	testkit.WaitUntil(t, "the announced commit on /metrics", done, &stderr, func() bool {
		body = testkit.Get("http://" + addr + "/metrics")
		return strings.Contains(body, want)
	})
	for _, series := range []string{"go_goroutines ", "proxops_watcher_stale 0", "proxops_desired_stale 0", "proxops_git_last_fetch_age_seconds "} {
		if !strings.Contains(body, series) {
			t.Errorf("/metrics lacks %q", series)
		}
	}
	// The commit counts as announced once its RepoChanged is stored, just after it was read.
	testkit.WaitUntil(t, "/healthz ok with the announced commit", done, &stderr, func() bool {
		h := testkit.Get("http://" + addr + "/healthz")
		return strings.Contains(h, `"ok":true`) && strings.Contains(h, commit)
	})
	if resp, err := http.Post("http://"+addr+"/webhook/github", "application/json", strings.NewReader("{}")); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("the metrics endpoint answers webhooks: %s", resp.Status)
		}
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after the context ended; log:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher did not stop")
	}
}

// commitFile commits one file to a new repository at dir on branch main and returns the commit hash.
func commitFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	r, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{
		InitOptions: git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName("main")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	wt, err := r.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Add(name); err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "ops", Email: "ops@example.com", When: time.Unix(1700000000, 0)}
	h, err := wt.Commit("first", &git.CommitOptions{Author: sig, Committer: sig})
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}
