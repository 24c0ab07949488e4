package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/services/watcher"
)

// BenchmarkPushToPlan measures a push webhook received until the Plan of the pushed commit is published
// (quality.md P5), through the single-host system: the watcher verifies the webhook, reads the commit of a
// 100-guest repository and stores its snapshot, the planner observes three nodes of the simulator holding
// the 100 guests and diffs. p50-ms and p99-ms are over the iterations (run with -benchtime 20x or more).
func BenchmarkPushToPlan(b *testing.B) {
	const secret = "bench-secret"
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	sim, err := pvesim.New(spec)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	b.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	dir := filepath.Join(b.TempDir(), "repo")
	files := map[string]string{"clusters/lab/config.yaml": fmt.Sprintf("pve:\n  clusters:\n    lab:\n      base-url: %s\n      nodes: [pve1, pve2, pve3]\n", srv.URL)}
	var list []string
	for i := range 100 {
		name := fmt.Sprintf("guest-%03d", i)
		files["vm/lab/"+name+".yaml"] = benchVM(name, 1000+i, fmt.Sprintf("pve%d", i%3+1), 512)
		list = append(list, "  - ../../vm/lab/"+name+".yaml")
	}
	files["clusters/lab/resources.yaml"] = "resources:\n" + strings.Join(list, "\n") + "\n"
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=b", "-c", "user.email=b@example.invalid"}, args...)...).CombinedOutput()
		if err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	git("add", "-A")
	git("commit", "-q", "-m", "100 guests")

	b.Setenv("PROXOPS_PVE_TOKEN_VALUE", pvesim.DefaultRootTokenID+"="+pvesim.DefaultRootTokenSecret)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	snap, err := watcher.SnapshotBranch(ctx, dir, "")
	if err != nil {
		b.Fatal(err)
	}
	r := repo.Load(snap.FS())
	sys, err := startSystem(ctx, systemConfig{DataDir: b.TempDir(), Executors: localExecutors(ctx, io.Discard, r, snap.FS(), dir, []string{"lab"}, pveFlags{}),
		WatcherConfig: &watcher.Config{Path: dir, Listen: "127.0.0.1:0", WebhookSecret: secret, PollInterval: time.Hour, DriftInterval: -1}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sys.stop() })

	events := make(chan any, 64)
	go func() {
		_ = sys.bus.Follow(ctx, bus.StreamPlans, []string{bus.FilterPlans}, 0, func(m *bus.Message, _ time.Time) error {
			if it, ok := decodePlanEvent(ctx, m); ok {
				switch {
				case it.planned != nil:
					events <- *it.planned
				case it.finished != nil:
					events <- *it.finished
				case it.rejected != nil:
					events <- *it.rejected
				}
			}
			return nil
		})
	}()
	// waitFor returns when the commit's plan is published (planned) or its run ends (finished).
	waitFor := func(commit string, finished bool) {
		for {
			select {
			case ev := <-events:
				switch v := ev.(type) {
				case plan.Planned:
					if v.Commit == commit && !finished {
						return
					}
				case plan.FinishedRun:
					if v.Commit == commit && finished {
						if v.Outcome != plan.OutcomeSucceeded {
							b.Fatalf("run of %s: %s", commit, v.Outcome)
						}
						return
					}
				case plan.Rejected:
					b.Fatalf("rejected: %v", v.Rejection.Diagnostics)
				}
			case <-ctx.Done():
				b.Fatal("timed out")
			}
		}
	}
	first := git("rev-parse", "HEAD")
	waitFor(first, true) // the startup announcement creates the 100 guests
	for len(sys.watcher.ListenAddr()) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		name := "vm/lab/guest-000.yaml"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(benchVM("guest-000", 1000, "pve1", 512+64*(i%2+1))), 0o644); err != nil {
			b.Fatal(err)
		}
		git("commit", "-q", "-am", fmt.Sprintf("change %d", i))
		sha := git("rev-parse", "HEAD")
		req := githubPush(b, "http://"+sys.watcher.ListenAddr(), secret, sha)
		b.StartTimer()
		start := time.Now()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusAccepted {
			b.Fatalf("webhook: %s", res.Status)
		}
		waitFor(sha, false)
		lat = append(lat, time.Since(start))
		b.StopTimer()
		waitFor(sha, true)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

func benchVM(name string, vmid int, node string, memory int) string {
	return fmt.Sprintf("apiVersion: proxops/v1alpha1\nkind: VM\nmetadata: {name: %s}\nspec:\n  node: %s\n  vmid: %d\n  memory: %dMiB\n  cpu: {type: host, cores: 1}\n  disks:\n    - {storage: local-lvm, size: 4GiB}\n  networks:\n    - {bridge: vmbr0}\n",
		name, node, vmid, memory)
}

// githubPush is a signed GitHub push webhook for a commit of main.
func githubPush(b *testing.B, base, secret, sha string) *http.Request {
	body, _ := json.Marshal(map[string]any{"ref": "refs/heads/main", "before": strings.Repeat("0", 40), "after": sha,
		"repository": map[string]any{"full_name": "ops/infra"}})
	req, err := http.NewRequest(http.MethodPost, base+watcher.WebhookPath(watcher.ProviderGitHub), bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", "d-"+sha[:12])
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	return req
}
