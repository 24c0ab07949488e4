package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/testkit"
)

// syncBuffer is a buffer several goroutines write and read.
type syncBuffer = testkit.SyncBuffer

var statusPageLine = regexp.MustCompile(`status page at http://([0-9.]+:[0-9]+)/`)

// upRun is a proxops up: in this process (cancel stops it) or a built binary (a signal stops it).
type upRun struct {
	t       *testing.T
	out     *syncBuffer
	errOut  *syncBuffer
	done    chan struct{}
	code    int
	cancel  context.CancelFunc
	process *os.Process
}

// startUp runs proxops up in this process on the demo repository and data directory.
func (e *demoEnv) startUp(args ...string) *upRun {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	u := &upRun{t: e.t, out: &syncBuffer{}, errOut: &syncBuffer{}, done: make(chan struct{}), cancel: cancel}
	cmd := newRootCommand()
	cmd.SetOut(u.out)
	cmd.SetErr(u.errOut)
	cmd.SetArgs(append(append([]string{"up"}, args...), "--repo", e.repo, "--data-dir", e.data, "--listen", "127.0.0.1:0"))
	go func() {
		defer close(u.done)
		err := cmd.ExecuteContext(ctx)
		var ee *exitError
		switch {
		case errors.As(err, &ee):
			u.code = ee.code
		case err != nil:
			u.code = 1
			fmt.Fprintf(u.errOut, "error: %v\n", err)
		}
	}()
	e.t.Cleanup(func() { u.stop() })
	return u
}

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
	out  []byte
}

// buildEnv is the environment the tests start with: the go command builds with it (tests change HOME,
// where its caches live).
var buildEnv []string

// TestMain removes the binary the process tests build.
func TestMain(m *testing.M) {
	buildEnv = os.Environ()
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// proxopsBinary builds the command once per test run.
func proxopsBinary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "proxops-up-test")
		if built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "proxops")
		cmd := exec.Command("go", "build", "-o", built.path, ".")
		cmd.Env = buildEnv
		built.out, built.err = cmd.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("build proxops: %v\n%s", built.err, built.out)
	}
	return built.path
}

// startUpProcess runs proxops up as a separate process (the built binary) with this test's environment.
func (e *demoEnv) startUpProcess(args ...string) *upRun {
	e.t.Helper()
	u := &upRun{t: e.t, out: &syncBuffer{}, errOut: &syncBuffer{}, done: make(chan struct{})}
	cmd := exec.Command(proxopsBinary(e.t), append(append([]string{"up"}, args...),
		"--repo", e.repo, "--data-dir", e.data, "--listen", "127.0.0.1:0")...)
	cmd.Stdout, cmd.Stderr = u.out, u.errOut
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	u.process = cmd.Process
	go func() {
		defer close(u.done)
		_ = cmd.Wait()
		u.code = cmd.ProcessState.ExitCode()
	}()
	e.t.Cleanup(func() {
		select {
		case <-u.done:
		default:
			_ = u.process.Kill()
			<-u.done
		}
	})
	return u
}

// addr waits for the status page's address.
func (u *upRun) addr() string {
	u.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if m := statusPageLine.FindStringSubmatch(u.out.String()); m != nil {
			return m[1]
		}
		select {
		case <-u.done:
			u.t.Fatalf("proxops up exited %d before serving\nstdout:\n%s\nstderr:\n%s", u.code, u.out, u.errOut)
		case <-time.After(20 * time.Millisecond):
		}
	}
	u.t.Fatalf("proxops up did not serve within 2 minutes\nstderr:\n%s", u.errOut)
	return ""
}

// stop stops up (SIGTERM for a process) and returns its exit code.
func (u *upRun) stop() int {
	if u.cancel != nil {
		u.cancel()
	} else {
		_ = u.process.Signal(syscall.SIGTERM)
	}
	select {
	case <-u.done:
	case <-time.After(2 * time.Minute):
		u.t.Errorf("proxops up did not stop within 2 minutes\nstderr:\n%s", u.errOut)
		if u.process != nil {
			_ = u.process.Kill()
		}
		<-u.done
	}
	return u.code
}

// wait waits for up to exit on its own and returns its exit code.
func (u *upRun) wait() int {
	u.t.Helper()
	select {
	case <-u.done:
	case <-time.After(3 * time.Minute):
		u.t.Fatalf("proxops up did not exit\nstderr:\n%s", u.errOut)
	}
	return u.code
}

// head is the repository's HEAD commit.
func (e *demoEnv) head() string {
	e.t.Helper()
	out, err := exec.Command("git", "-C", e.repo, "rev-parse", "HEAD").Output()
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// get fetches a URL of up's HTTP server.
func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, body
}

// waitConverged polls /status/<cluster> until the cluster converged at commit.
func waitConverged(t *testing.T, u *upRun, addr, cluster, commit string) render.ClusterDocument {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	var doc render.ClusterDocument
	for time.Now().Before(deadline) {
		res, err := http.Get("http://" + addr + "/status/" + cluster)
		if err == nil {
			doc = render.ClusterDocument{}
			err = json.NewDecoder(res.Body).Decode(&doc)
			_ = res.Body.Close()
			if err == nil && doc.Report.Phase == "converged" && doc.Report.LastCommitApplied == commit {
				return doc
			}
		}
		select {
		case <-u.done:
			t.Fatalf("proxops up exited %d\nstderr:\n%s", u.code, u.errOut)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("cluster %s did not converge at %s: phase %q, applied %q, reason %q\nstderr:\n%s", cluster, commit,
		doc.Report.Phase, doc.Report.LastCommitApplied, doc.Report.Reason, u.errOut)
	return doc
}

// logLines are up's JSON log lines with a message.
func logLines(s, msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// proxops up --once reconciles the demo repository and exits 0; the reports it leaves show every resource
// converged, the diff that follows is empty, and a second start finds nothing to do.
func TestUpOnceConvergesTheDemoRepository(t *testing.T) {
	e := newDemoEnv(t)
	out := e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	if !strings.Contains(out, "demo: converged (17 operations applied)\n") || !strings.Contains(out, "every cluster converged") {
		t.Fatalf("up --once:\n%s", out)
	}
	statusJSON := e.mustRunPlain(0, "status", "--output", "json", "--data-dir", e.data)
	var doc render.StatusDocument
	if err := json.Unmarshal([]byte(statusJSON), &doc); err != nil {
		t.Fatalf("status json: %v\n%s", err, statusJSON)
	}
	if len(doc.Clusters) != 1 || doc.Clusters[0].Report.Phase != "converged" || len(doc.Clusters[0].Report.Resources) != 11 {
		t.Fatalf("status: %s", statusJSON)
	}
	for _, r := range doc.Clusters[0].Report.Resources {
		if r.State != "converged" {
			t.Errorf("%s/%s: state %s", r.Kind, r.Name, r.State)
		}
	}
	if out := e.mustRun(0, "diff", "--exit-code"); !strings.Contains(out, "no drift — PVE matches git") {
		t.Fatalf("diff:\n%s", out)
	}
	if out := e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0"); !strings.Contains(out, "demo: converged (nothing to do)\n") {
		t.Fatalf("second up --once:\n%s", out)
	}
}

// mustRunPlain runs proxops without the demo flags.
func (e *demoEnv) mustRunPlain(want int, args ...string) string {
	e.t.Helper()
	out, errOut, code := runCommand(e.t, args...)
	if code != want {
		e.t.Fatalf("proxops %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out
}

// A running up serves /status, /healthz, /readyz, the page and one /metrics for every service; diff and
// status on its data directory talk to it, a second up refuses the data directory, and SIGTERM (here: the
// command's context) stops it cleanly.
func TestUpServesStatusHealthAndMetricsOfEveryService(t *testing.T) {
	e := newDemoEnv(t)
	u := e.startUp()
	addr := u.addr()
	waitConverged(t, u, addr, "demo", e.head())
	// The address and credentials other commands use are readable by the owner only.
	if info, err := os.Stat(filepath.Join(e.data, bus.ClientInfoFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, %v; want mode 0600", bus.ClientInfoFile, err, info)
	}

	if code, body := get(t, "http://"+addr+"/healthz"); code != http.StatusOK || !strings.Contains(string(body), `"ok": true`) {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if code, body := get(t, "http://"+addr+"/"); code != http.StatusOK || !strings.Contains(string(body), "demo") {
		t.Errorf("/: %d", code)
	}
	code, body := get(t, "http://"+addr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	for _, name := range []string{
		"proxops_build_info", "go_goroutines", "process_resident_memory_bytes", // process
		"proxops_cycles_total", "proxops_objects", // status
		"proxops_executor_operations_total", "proxops_executor_pve_request_duration_seconds", // executor
		"proxops_watcher_events_published_total", "proxops_watcher_last_fetch_success_timestamp_seconds", // watcher
		"proxops_planner_runs_total", "proxops_planner_plan_seconds", // planner
	} {
		if _, ok := families[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if f := families["proxops_executor_operations_total"]; f != nil {
		nodes := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "node" {
					nodes[l.GetValue()] = true
				}
			}
		}
		if !nodes["pve1"] || !nodes["pve2"] {
			t.Errorf("executor series by node: %v", nodes)
		}
	}

	_, errOut, code2 := e.run("up", "--listen", "127.0.0.1:0")
	if code2 != 1 || !strings.Contains(errOut, "is in use by another proxops process") {
		t.Errorf("a second up: exit %d\n%s", code2, errOut)
	}
	if out := e.mustRunPlain(0, "status", "--data-dir", e.data); !strings.Contains(out, "[demo] phase=converged") {
		t.Errorf("status through up:\n%s", out)
	}
	if out := e.mustRun(0, "diff", "--exit-code"); !strings.Contains(out, "no drift") {
		t.Errorf("diff through up:\n%s", out)
	}
	if code := u.stop(); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, u.errOut)
	}
	if len(logLines(u.errOut.String(), "stopped")) != 1 {
		t.Errorf("no clean stop in the log:\n%s", u.errOut)
	}
}

// slowTasks makes the simulator's creates, clones and downloads take long enough to stop a process in the
// middle of an apply.
func slowTasks(spec *pvesim.Spec) {
	spec.TaskDurations = map[string]pvesim.Duration{
		"default":  pvesim.Duration(50 * time.Millisecond),
		"qmcreate": pvesim.Duration(1500 * time.Millisecond), "vzcreate": pvesim.Duration(1500 * time.Millisecond),
		"qmclone": pvesim.Duration(1500 * time.Millisecond), "download": pvesim.Duration(time.Second),
	}
}

// submissions counts, per guest or artifact, the creating requests PVE accepted: creates and clones by vmid,
// downloads by node and file name.
func submissions(sim *pvesim.Sim) map[string]int {
	out := map[string]int{}
	for _, r := range sim.Requests() {
		if r.Method != http.MethodPost || r.Status != http.StatusOK {
			continue
		}
		switch r.Template {
		case "/nodes/{node}/qemu", "/nodes/{node}/lxc":
			out["create "+r.Params["vmid"]]++
		case "/nodes/{node}/qemu/{vmid}/clone":
			out["create "+r.Params["newid"]]++
		case "/nodes/{node}/storage/{storage}/download-url":
			out["download "+strings.Split(r.Path, "/")[2]+" "+r.Params["filename"]]++
		}
	}
	return out
}

// R3: proxops up killed with SIGKILL in the middle of an apply and started again on the same data directory
// carries the open plan on to its end: every guest is created exactly once, every artifact downloaded once
// per node, and the diff that follows is empty.
func TestUpKilledMidApplyFinishesTheOpenPlanOnRestart(t *testing.T) {
	e := newDemoEnvWith(t, slowTasks)
	first := e.startUpProcess()
	first.addr()
	deadline := time.Now().Add(2 * time.Minute)
	for e.sim.Count(http.MethodPost, "/nodes/{node}/qemu")+e.sim.Count(http.MethodPost, "/nodes/{node}/lxc") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no create reached PVE\n%s", first.errOut)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.process.Kill(); err != nil {
		t.Fatal(err)
	}
	first.wait()
	if before := submissions(e.sim); before["create 103"] > 0 {
		t.Fatalf("the apply was not interrupted (the clone had begun): %v", before)
	}
	opened := logLines(first.errOut.String(), "plan published")
	if len(opened) != 1 {
		t.Fatalf("the killed up published %d plans\n%s", len(opened), first.errOut)
	}
	runID := opened[0]["run_id"]

	second := e.startUpProcess()
	addr := second.addr()
	waitConverged(t, second, addr, "demo", e.head())
	if code := second.stop(); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, second.errOut)
	}
	carried := logLines(second.errOut.String(), "carrying on an open run")
	finished := logLines(second.errOut.String(), "run finished")
	if len(carried) != 1 || carried[0]["run_id"] != runID || len(finished) == 0 || finished[0]["run_id"] != runID ||
		finished[0]["outcome"] != "succeeded" {
		t.Fatalf("run %v was not carried on to its end: carried %v, finished %v", runID, carried, finished)
	}
	want := []string{"create 101", "create 102", "create 103", "create 200", "create 9000", "create 9100",
		"download pve1 debian-13-genericcloud-amd64.qcow2", "download pve2 debian-13-standard_13.1-1_amd64.tar.zst",
		"download pve1 demo-installer-1.0.iso", "download pve2 demo-installer-1.0.iso"}
	got := submissions(e.sim)
	for _, k := range want {
		if got[k] != 1 {
			t.Errorf("%s: submitted %d times, want once (all: %v)", k, got[k], got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("submissions: %v", got)
	}
	if out := e.mustRun(0, "diff", "--exit-code"); !strings.Contains(out, "no drift") {
		t.Fatalf("diff after the restart:\n%s", out)
	}
}
