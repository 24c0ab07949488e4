package sourcehealth_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/services/status"
	"github.com/proxops/proxops/services/watcher"
)

// A watcher whose repository cannot be read tells the status service over NATS: the desired state is
// flagged stale on /status, /healthz and the page while the failure lasts, and cleared by the next success.
func TestAWatcherThatCannotReadItsRepositoryMarksTheDesiredStateStale(t *testing.T) {
	t.Parallel()
	sys := startSystem(t)
	sys.converge("3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f")

	repoDir := filepath.Join(t.TempDir(), "infra")
	if err := os.MkdirAll(filepath.Join(repoDir, "clusters", "alpha"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repoDir, "clusters", "alpha", "config.yaml"), []byte("base-url: https://pve1:8006\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, repoDir, "init", "-q", "-b", "main")
	git(t, repoDir, "add", ".")
	git(t, repoDir, "commit", "-q", "-m", "alpha")
	commit := git(t, repoDir, "rev-parse", "HEAD")

	conn, err := sys.server.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	w, err := watcher.New(watcher.Config{Path: repoDir, DataDir: t.TempDir(), PollInterval: 30 * time.Millisecond,
		RetryMax: 60 * time.Millisecond, DriftInterval: -1}, watcher.BusDeps(conn, prometheus.NewRegistry(), testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	})

	source := func() (sourceDoc, bool, bool) {
		d := sys.status()
		if len(d.Sources) != 1 || d.LastCycle == nil {
			return sourceDoc{}, false, false
		}
		stale, _ := d.LastCycle["desired_stale"].(bool)
		return d.Sources[0], stale, true
	}
	testkit.Eventually(t, 20*time.Second, "the watcher's first report", func() bool {
		s, stale, ok := source()
		return ok && !s.Stale && !stale && s.Commit == commit
	})

	moved := repoDir + ".moved"
	if err := os.Rename(repoDir, moved); err != nil {
		t.Fatal(err)
	}
	var s sourceDoc
	testkit.Eventually(t, 20*time.Second, "desired_stale after the repository became unreadable", func() bool {
		var stale, ok bool
		s, stale, ok = source()
		return ok && s.Stale && stale
	})
	if s.Commit != commit || s.LastError == "" || s.Repo != w.Repo() || s.Branch != "main" {
		t.Errorf("stale source %+v; want the last good commit %s and the error", s, commit)
	}
	code, body := sys.get("/healthz")
	if flat := strings.Join(strings.Fields(string(body)), " "); code != http.StatusServiceUnavailable ||
		!strings.Contains(flat, `"reason": "stale"`) || !strings.Contains(flat, `"repos": [ "`+w.Repo()+`" ]`) {
		t.Errorf("/healthz while stale: %d %s", code, body)
	}
	if code, page := sys.get("/"); code != http.StatusOK || !strings.Contains(string(page), "Desired state is stale") ||
		!strings.Contains(string(page), commit) {
		t.Errorf("the page does not flag the stale desired state: %d\n%s", code, page)
	}
	// A client reading the bus (proxops status) finds the same and prints the predecessor's line.
	sources, err := status.Sources(testContext(t), sys.bus)
	if err != nil || len(sources) != 1 || !sources[0].Stale || sources[0].Commit != commit {
		t.Fatalf("status.Sources = %+v, %v; want one stale source on %s", sources, err, commit)
	}
	var text bytes.Buffer
	if err := render.StatusText(&text, render.StatusView{Sources: sources}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "DESIRED STATE IS STALE: "+w.Repo()+" (main) cannot be read; planning uses the last good commit "+commit) {
		t.Errorf("status text:\n%s", text.String())
	}

	if err := os.Rename(moved, repoDir); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "desired_stale cleared by the next successful read", func() bool {
		s, stale, ok := source()
		return ok && !s.Stale && !stale && s.LastError == ""
	})
	if code, body := sys.get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after recovery: %d %s", code, body)
	}
	if code, page := sys.get("/"); code != http.StatusOK || strings.Contains(string(page), "Desired state is stale") {
		t.Errorf("the page still flags the desired state as stale: %d", code)
	}
	if sources, err := status.Sources(testContext(t), sys.bus); err != nil || len(sources) != 1 || sources[0].Stale {
		t.Errorf("status.Sources after recovery = %+v, %v", sources, err)
	}
}
