package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/services/watcher"
)

const demoToken = "root@pam!demo=6d1c2f0a-7b3e-4c59-8a21-0e9f4d3b2c10"

// demoEnv is the demo repository, committed in a temporary git repository, pointed at a simulator
// serving examples/demo/sim.yaml, and a data directory.
type demoEnv struct {
	t    *testing.T
	sim  *pvesim.Sim
	srv  *httptest.Server
	repo string
	data string
}

// repoRoot is the root of this source tree.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func newDemoEnv(t *testing.T) *demoEnv {
	t.Helper()
	return newDemoEnvWith(t, nil)
}

// newDemoEnvWith is newDemoEnv with the simulator's spec changed by edit (after the fast task durations
// every test uses are set).
func newDemoEnvWith(t *testing.T, edit func(*pvesim.Spec)) *demoEnv {
	t.Helper()
	root := repoRoot(t)
	spec, err := pvesim.LoadSpec(filepath.Join(root, "examples", "demo", "sim.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for u, p := range spec.Mirrors {
		spec.Mirrors[u] = filepath.Join(root, p)
	}
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond)}
	if edit != nil {
		edit(&spec)
	}
	sim, err := pvesim.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	e := &demoEnv{t: t, sim: sim, srv: srv, repo: filepath.Join(t.TempDir(), "repo"), data: filepath.Join(t.TempDir(), "data")}
	if err := os.CopyFS(e.repo, os.DirFS(filepath.Join(root, "examples", "demo"))); err != nil {
		t.Fatal(err)
	}
	e.edit("clusters/demo/config.yaml", func(s string) string {
		return strings.Replace(s, "http://127.0.0.1:8006", srv.URL, 1)
	})
	e.git("init", "-q")
	e.commit("demo cluster")
	t.Setenv("PROXOPS_PVE_TOKEN_VALUE", demoToken)
	t.Setenv("PROXOPS_PVE_USER", "")
	// The demo cluster's credentials are in its SOPS file, encrypted to this throwaway test key.
	t.Setenv("SOPS_AGE_KEY", "")
	t.Setenv("SOPS_AGE_KEY_FILE", filepath.Join(root, "internal", "secrets", "testdata", "demo", "demo.agekey"))
	t.Setenv("HOME", t.TempDir())
	return e
}

func (e *demoEnv) git(args ...string) {
	e.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", e.repo, "-c", "user.name=test", "-c", "user.email=test@example.invalid"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func (e *demoEnv) commit(msg string) {
	e.t.Helper()
	e.git("add", "-A")
	e.git("commit", "-q", "--allow-empty", "-m", msg)
}

// edit rewrites one file of the repository (not committed).
func (e *demoEnv) edit(rel string, f func(string) string) {
	e.t.Helper()
	p := filepath.Join(e.repo, filepath.FromSlash(rel))
	data, err := os.ReadFile(p)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(f(string(data))), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// run runs proxops with the repository and data directory and returns stdout, stderr and the exit code.
func (e *demoEnv) run(args ...string) (string, string, int) {
	e.t.Helper()
	args = append(args, "--repo", e.repo, "--data-dir", e.data)
	return runCommand(e.t, args...)
}

func runCommand(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	code := 0
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code = ee.code
		if ee.err != nil {
			fmt.Fprintf(&errOut, "error: %v\n", ee.err)
		}
	case err != nil:
		code = 1
		fmt.Fprintf(&errOut, "error: %v\n", err)
	}
	return out.String(), errOut.String(), code
}

// mustRun runs proxops and fails the test unless it exits with want.
func (e *demoEnv) mustRun(want int, args ...string) string {
	e.t.Helper()
	out, errOut, code := e.run(args...)
	if code != want {
		e.t.Fatalf("proxops %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out
}

// The demo repository converges in one apply, and the diff that follows is empty, exits 0 with
// --exit-code and is byte-identical run after run. A field changed by hand on PVE is corrected by the next
// apply; a manifest removed from git prunes its guest and nothing else: not a guest cloned by hand from a
// managed one, across separate runs on the same data directory.
func TestDemoRepositoryConvergesAndStaysConverged(t *testing.T) {
	e := newDemoEnv(t)
	out := e.mustRun(0, "apply")
	if !strings.Contains(out, "Apply complete: 20 succeeded, 0 failed, 0 skipped.") || !strings.Contains(out, "VM/web-01: creation complete after") {
		t.Fatalf("apply output:\n%s", out)
	}
	first := e.mustRun(0, "diff", "--exit-code")
	second := e.mustRun(0, "diff", "--exit-code")
	if first != "=== demo ===\nno drift — PVE matches git\n" || first != second {
		t.Fatalf("diffs of a converged cluster:\n%s\n---\n%s", first, second)
	}

	if err := e.sim.SetConfig(102, "memory", "4096"); err != nil {
		t.Fatal(err)
	}
	drift := e.mustRun(2, "diff", "--exit-code")
	if !strings.Contains(drift, "VM/web-02") || !strings.Contains(drift, "memory: 4096 → 2048") {
		t.Fatalf("drift not shown:\n%s", drift)
	}
	e.mustRun(0, "apply")
	if cfg, _ := e.sim.Config(102); cfg["memory"] != "2048" {
		t.Fatalf("memory after apply: %s", cfg["memory"])
	}

	e.handClone("pve1", 101, 301)
	e.edit("clusters/demo/resources.yaml", func(s string) string {
		s = strings.Replace(s, "  - ../../vm/demo/web-02.yaml\n", "", 1)
		return strings.Replace(s, "  - ../../ha/demo/web-02-prefers-pve2.yaml\n", "", 1) // the HA rule that names it
	})
	e.commit("retire web-02")
	out = e.mustRun(0, "apply")
	if !strings.Contains(out, "VM/web-02: destruction complete") {
		t.Fatalf("prune not applied:\n%s", out)
	}
	for vmid, want := range map[int]bool{101: true, 102: false, 103: true, 200: true, 301: true, 9000: true, 9100: true} {
		if e.sim.Exists(vmid) != want {
			t.Fatalf("guest %d exists %v, want %v", vmid, !want, want)
		}
	}
	e.mustRun(0, "diff", "--exit-code")
}

// A plan that would prune three of four owned VMs is held: apply applies nothing and says how to confirm;
// apply --yes confirms it.
func TestApplyHoldsAMassPruneUntilYes(t *testing.T) {
	e := newDemoEnv(t)
	e.mustRun(0, "apply")
	for _, f := range []string{"vm/demo/web-01", "vm/demo/web-02", "vm/demo/app-01", "ha/demo/web-02-prefers-pve2"} {
		e.edit("clusters/demo/resources.yaml", func(s string) string { return strings.Replace(s, "  - ../../"+f+".yaml\n", "", 1) })
	}
	e.commit("retire the web and app servers")
	out := e.mustRun(1, "apply")
	if !strings.Contains(out, "is held") || !strings.Contains(out, "proxops apply --yes") {
		t.Fatalf("held plan not reported:\n%s", out)
	}
	for _, vmid := range []int{101, 102, 103} {
		if !e.sim.Exists(vmid) {
			t.Fatalf("guest %d pruned without confirmation", vmid)
		}
	}
	out = e.mustRun(0, "apply", "--yes")
	if !strings.Contains(out, "confirmed with --yes") {
		t.Fatalf("confirmation not reported:\n%s", out)
	}
	for vmid, want := range map[int]bool{101: false, 102: false, 103: false, 200: true, 9000: true} {
		if e.sim.Exists(vmid) != want {
			t.Fatalf("guest %d exists %v, want %v", vmid, !want, want)
		}
	}
}

// diff plans the committed HEAD unless --worktree; a suspended cluster is planned and nothing is applied;
// JSON output is one document.
func TestDiffWorktreeSuspendAndJSON(t *testing.T) {
	e := newDemoEnv(t)
	e.mustRun(0, "apply")
	e.edit("vm/demo/web-02.yaml", func(s string) string { return strings.Replace(s, "memory: 2GiB", "memory: 3GiB", 1) })
	e.mustRun(0, "diff", "--exit-code")
	worktree := e.mustRun(2, "diff", "--exit-code", "--worktree")
	if !strings.Contains(worktree, "memory: 2048 → 3072") {
		t.Fatalf("work tree diff:\n%s", worktree)
	}
	js := e.mustRun(0, "diff", "--worktree", "--output", "json")
	if !strings.HasPrefix(js, "{\n  \"clusters\": [") || !strings.Contains(js, `"no_drift": false`) {
		t.Fatalf("json diff:\n%s", js)
	}

	if out, errOut, code := runCommand(t, "suspend", "--cluster", "demo", "--data-dir", e.data); code != 0 || out != "demo: suspended\n" {
		t.Fatalf("suspend: %d %q %s", code, out, errOut)
	}
	out := e.mustRun(1, "apply", "--worktree")
	if !strings.Contains(out, "suspended") {
		t.Fatalf("apply of a suspended cluster:\n%s", out)
	}
	if cfg, _ := e.sim.Config(102); cfg["memory"] != "2048" {
		t.Fatalf("a suspended cluster was changed: memory %s", cfg["memory"])
	}
	if out, _, code := runCommand(t, "resume", "--cluster", "demo", "--data-dir", e.data); code != 0 || out != "demo: resumed\n" {
		t.Fatalf("resume: %d %q", code, out)
	}
	lines := strings.Split(strings.TrimSpace(e.mustRun(0, "apply", "--worktree", "--output", "json")), "\n")
	if cfg, _ := e.sim.Config(102); cfg["memory"] != "3072" {
		t.Fatalf("memory after resume and apply: %s", cfg["memory"])
	}
	var types []string
	for _, l := range lines {
		var v struct {
			Type string `json:"type"`
			OK   bool   `json:"ok"`
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		types = append(types, v.Type)
		if v.Type == "summary" && !v.OK {
			t.Fatalf("summary not ok: %s", l)
		}
	}
	if types[0] != "plan" || types[len(types)-1] != "summary" || !slices.Contains(types, "operation") || !slices.Contains(types, "finished") {
		t.Fatalf("JSON lines of an apply: %v", types)
	}
}

// handClone clones a guest through the PVE API, as an operator would.
func (e *demoEnv) handClone(node string, vmid, newID int) {
	e.t.Helper()
	e.post(fmt.Sprintf("/nodes/%s/qemu/%d/clone", node, vmid), url.Values{"newid": {strconv.Itoa(newID)}, "full": {"1"}, "name": {"hand-clone"}})
	e.waitUnlocked(newID, "", "the hand-made clone")
}

// handMove migrates a running VM with its local disks through the PVE API, as an operator would.
func (e *demoEnv) handMove(node string, vmid int, target string) {
	e.t.Helper()
	e.post(fmt.Sprintf("/nodes/%s/qemu/%d/migrate", node, vmid), url.Values{"target": {target}, "online": {"1"}, "with-local-disks": {"1"}})
	e.waitUnlocked(vmid, target, "the hand move")
}

// post sends a write to the simulator as root, outside ProxOps, and fails the test unless PVE accepts it.
func (e *demoEnv) post(path string, form url.Values) {
	e.t.Helper()
	if err := e.sim.AdminRequest(http.MethodPost, path, form); err != nil {
		e.t.Fatal(err)
	}
}

// waitUnlocked polls until the guest exists without a lock (on node, when node is not empty).
func (e *demoEnv) waitUnlocked(vmid int, node, what string) {
	e.t.Helper()
	testkit.Eventually(e.t, 30*time.Second, what, func() bool {
		cfg, ok := e.sim.Config(vmid)
		at, _, _ := e.sim.NodeOf(vmid)
		return ok && cfg["lock"] == "" && (node == "" || at == node)
	})
}

// While a process runs ProxOps on the data directory and has written where it listens (proxops up), diff
// becomes its client; without that address the data directory is refused as busy. With --nats, diff
// previews the local tree on a deployed system's planner and executors.
func TestDiffTalksToTheSystemHoldingTheDataDirectory(t *testing.T) {
	e := newDemoEnv(t)
	e.mustRun(0, "apply")
	lock, err := lockDataDir(e.data)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.release()
	_, errOut, code := e.run("diff")
	if code != 1 || !strings.Contains(errOut, "data directory in use") {
		t.Fatalf("busy data directory: exit %d\n%s", code, errOut)
	}
	snapRepo := e.repo
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, fsys := loadForTest(t, snapRepo)
	sys, err := startSystem(ctx, systemConfig{DataDir: e.data, Listen: true, Repo: e.repo, RequestsOnly: true,
		Executors: localExecutors(ctx, io.Discard, r, fsys, e.repo, r.ClusterNames(), pveFlags{})})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sys.stop(); err != nil {
			t.Error(err)
		}
	}()
	if err := e.sim.SetConfig(101, "cores", "8"); err != nil {
		t.Fatal(err)
	}
	out := e.mustRun(2, "diff", "--exit-code")
	if !strings.Contains(out, "cores: 8 → 2") {
		t.Fatalf("diff through the running system:\n%s", out)
	}
	ci := sys.server.ClientInfo()
	t.Setenv("PROXOPS_NATS_PASSWORD", ci.Password)
	remote, errOut, code := runCommand(t, "diff", "--exit-code", "--repo", e.repo, "--nats", ci.URL, "--nats-user", ci.User)
	if code != 2 || remote != out {
		t.Fatalf("remote preview: exit %d\n%s\n%s", code, remote, errOut)
	}

	// The command reads only the configuration of a tree it hands to the running system: a broken manifest
	// is found by that system's planner, with its position.
	e.edit("vm/demo/web-01.yaml", func(s string) string { return strings.Replace(s, "memory: 2GiB", "memory: lots", 1) })
	e.commit("a memory size no one can read")
	out, errOut, code = e.run("diff")
	if code != 1 || !strings.Contains(out, "vm/demo/web-01.yaml:") || !strings.Contains(out, "memory") {
		t.Fatalf("broken manifest through the running system: exit %d\n%s\n%s", code, out, errOut)
	}
}

func loadForTest(t *testing.T, root string) (*repo.Repository, fs.FS) {
	t.Helper()
	snap, err := watcher.SnapshotBranch(context.Background(), root, "")
	if err != nil {
		t.Fatal(err)
	}
	return repo.Load(snap.FS()), snap.FS()
}

// A cluster whose PVE cannot be reached is rejected with the cause (its executor answers with it); the other
// clusters are planned and printed first.
func TestUnreachableClusterIsRejectedAndTheOthersPlanned(t *testing.T) {
	e := newDemoEnv(t)
	if err := os.MkdirAll(filepath.Join(e.repo, "clusters", "dark"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"clusters/dark/config.yaml":    "pve:\n  clusters:\n    dark:\n      base-url: http://127.0.0.1:1\n      nodes: [pve1]\n",
		"clusters/dark/resources.yaml": "resources: []\n",
	}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(e.repo, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.commit("a cluster nobody can reach")
	out, errOut, code := e.run("diff")
	if code != 1 || !strings.Contains(out, "node pve1: ") || !strings.Contains(out, "connection refused") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	demo, dark := strings.Index(out, "=== demo ==="), strings.Index(out, "=== dark ===\nABORTED: pve inventory read failed")
	if demo < 0 || dark < demo || !strings.Contains(out, "VM/web-01") {
		t.Fatalf("diff output:\n%s", out)
	}
}
