package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// rssMB reads a process's resident set size (VmRSS of /proc/<pid>/status) in MB.
func rssMB(tb testing.TB, pid int) float64 {
	tb.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatalf("read the process's status: %v", err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				tb.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb / 1024
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}

// serviceBinaries builds the services' commands into dir.
func serviceBinaries(tb testing.TB, dir string) {
	tb.Helper()
	cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator),
		"github.com/proxops/proxops/services/watcher/cmd/proxops-watcher",
		"github.com/proxops/proxops/services/planner/cmd/proxops-planner",
		"github.com/proxops/proxops/services/executor/cmd/proxops-executor",
		"github.com/proxops/proxops/services/status/cmd/proxops-status",
		"github.com/proxops/proxops/services/adopter/cmd/proxops-adopter")
	cmd.Env = buildEnv
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build the services: %v\n%s", err, out)
	}
}

// idleProcess starts a command, waits until its log (stdout and stderr) says ready, lets it idle, and
// returns its RSS; the process is stopped at the end of the benchmark.
func idleProcess(b *testing.B, env []string, ready string, name string, args ...string) float64 {
	b.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(log.String(), ready) {
		select {
		case <-done:
			b.Fatalf("%s exited:\n%s", filepath.Base(name), log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not ready (%q):\n%s", filepath.Base(name), ready, log)
		}
	}
	// Idle: whatever start-up allocated has been collected once.
	time.Sleep(3 * time.Second)
	return rssMB(b, cmd.Process.Pid)
}

// BenchmarkFootprint (quality.md P6) reports the resident memory (MB-rss) of proxops up idle, after it
// reconciled the demo repository (every service and the embedded NATS server in one process; the figure
// to reach is < 120 MB), and of each service idle as a separate process against a NATS server (< 40 MB
// each). The figures are read from /proc/<pid>/status of the built binaries.
func BenchmarkFootprint(b *testing.B) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		b.Fatal(err)
	}
	spec, err := pvesim.LoadSpec(filepath.Join(root, "examples", "demo", "sim.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	for u, p := range spec.Mirrors {
		spec.Mirrors[u] = filepath.Join(root, p)
	}
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond)}
	sim, err := pvesim.New(spec)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	b.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	repoDir := filepath.Join(b.TempDir(), "repo")
	if err := os.CopyFS(repoDir, os.DirFS(filepath.Join(root, "examples", "demo"))); err != nil {
		b.Fatal(err)
	}
	config := filepath.Join(repoDir, "clusters", "demo", "config.yaml")
	data, err := os.ReadFile(config)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(config, []byte(strings.Replace(string(data), "http://127.0.0.1:8006", srv.URL, 1)), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "demo"}} {
		if out, err := exec.Command("git", append([]string{"-C", repoDir, "-c", "user.name=b", "-c", "user.email=b@example.invalid"}, args...)...).CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	env := append(os.Environ(), "HOME="+b.TempDir(), "SOPS_AGE_KEY=",
		"SOPS_AGE_KEY_FILE="+filepath.Join(root, "internal", "secrets", "testdata", "demo", "demo.agekey"))

	b.Run("up", func(b *testing.B) {
		rss := idleProcess(b, env, `"to":"converged"`, proxopsBinary(b), "up", "--repo", repoDir,
			"--data-dir", filepath.Join(b.TempDir(), "data"), "--listen", "127.0.0.1:0")
		b.ResetTimer() // the figure is the memory, not the time
		for range b.N {
		}
		b.ReportMetric(rss, "MB-rss")
	})

	bins := b.TempDir()
	serviceBinaries(b, bins)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nats, err := bus.StartServer(ctx, bus.ServerConfig{Dir: b.TempDir(), Listen: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nats.Shutdown)
	admin, err := nats.Connect(bus.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := admin.Provision(ctx, bus.ProvisionConfig{}); err != nil {
		b.Fatal(err)
	}
	_ = admin.Close()
	ci := nats.ClientInfo()
	natsArgs := []string{"--nats-url", ci.URL, "--nats-user", ci.User}
	senv := append(env, "PROXOPS_NATS_PASSWORD="+ci.Password, "PROXOPS_PVE_TOKEN_VALUE=root@pam!demo=6d1c2f0a-7b3e-4c59-8a21-0e9f4d3b2c10")
	services := []struct {
		name, ready string
		args        []string
	}{
		{"watcher", `"msg":"repo changed"`, []string{"--git-path", repoDir, "--data-dir", b.TempDir()}},
		{"planner", `"msg":"planner ready"`, []string{"--signing-key-file", testkit.PlannerKeyFile(b)}},
		{"executor", `"msg":"executor ready"`, []string{"--cluster", "demo", "--node", "pve1", "--pve-url", srv.URL,
			"--trusted-planner-key", testkit.PlannerKey(b).PublicKey()}},
		{"status", `"msg":"status http listening"`, []string{"--listen", "127.0.0.1:0"}},
		{"adopter", `"msg":"adopter ready"`, []string{"--metrics-listen", "127.0.0.1:0"}},
	}
	for _, s := range services {
		b.Run(s.name, func(b *testing.B) {
			rss := idleProcess(b, senv, s.ready, filepath.Join(bins, "proxops-"+s.name), append(s.args, natsArgs...)...)
			b.ResetTimer()
			for range b.N {
			}
			b.ReportMetric(rss, "MB-rss")
		})
	}
}
