package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
)

// newDemoEnvAt is newDemoEnvWith with the simulator listening on addr ("127.0.0.1:0" for any port), so that
// two environments can hold byte-identical repositories (the cluster's endpoint is part of the tree).
func newDemoEnvAt(t *testing.T, addr string, edit func(*pvesim.Spec)) *demoEnv {
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
	var ln net.Listener
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The port an earlier environment closed may take a moment to be free again.
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listen on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: sim}}
	srv.Start()
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	e := &demoEnv{t: t, sim: sim, srv: srv, repo: filepath.Join(t.TempDir(), "repo"), data: filepath.Join(t.TempDir(), "data")}
	if err := os.CopyFS(e.repo, os.DirFS(filepath.Join(root, "examples", "demo"))); err != nil {
		t.Fatal(err)
	}
	e.edit("clusters/demo/config.yaml", func(s string) string {
		return strings.Replace(s, "http://127.0.0.1:8006", srv.URL, 1)
	})
	// Fixed dates make the same content the same commit in every environment.
	t.Setenv("GIT_AUTHOR_DATE", "2026-01-02T03:04:05Z")
	t.Setenv("GIT_COMMITTER_DATE", "2026-01-02T03:04:05Z")
	e.git("init", "-q", "-b", "main")
	e.commit("demo cluster")
	t.Setenv("PROXOPS_PVE_TOKEN_VALUE", demoToken)
	t.Setenv("PROXOPS_PVE_USER", "")
	t.Setenv("SOPS_AGE_KEY", "")
	t.Setenv("SOPS_AGE_KEY_FILE", filepath.Join(root, "internal", "secrets", "testdata", "demo", "demo.agekey"))
	t.Setenv("HOME", t.TempDir())
	return e
}

// reportOf is the deterministic part of a cluster's status as the proxops_status bucket holds it, read
// with proxops status -o json from the data directory of a stopped up.
func (e *demoEnv) reportOf(cluster string) []byte {
	e.t.Helper()
	out := e.mustRunPlain(0, "status", "--output", "json", "--data-dir", e.data, "--cluster", cluster)
	var doc struct {
		Clusters []struct {
			Cluster string          `json:"cluster"`
			Report  json.RawMessage `json:"report"`
		} `json:"clusters"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		e.t.Fatalf("status json: %v\n%s", err, out)
	}
	if len(doc.Clusters) != 1 || doc.Clusters[0].Cluster != cluster {
		e.t.Fatalf("status of %s:\n%s", cluster, out)
	}
	return doc.Clusters[0].Report
}

// phaseOf is the phase of a report.
func phaseOf(t *testing.T, report []byte) string {
	t.Helper()
	var r struct {
		Phase string `json:"phase"`
	}
	if err := json.Unmarshal(report, &r); err != nil {
		t.Fatal(err)
	}
	return r.Phase
}

// deterministicHistory runs the demo through a whole history with proxops up --once, from scratch on the
// simulator at addr: converge, a drift whose correcting PVE task fails, a commit that does not parse. It returns the report after each step.
func deterministicHistory(t *testing.T, addr string) (string, [][]byte) {
	// The plan id hashes the observed digests, which cover the meta ctime PVE writes at a create: a fixed
	// clock makes the live state of both runs the same.
	e := newDemoEnvAt(t, addr, func(s *pvesim.Spec) { s.Clock = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) })
	var reports [][]byte
	step := func(want int, phase string) {
		t.Helper()
		out, errOut, code := e.run("up", "--once", "--listen", "127.0.0.1:0")
		if code != want {
			t.Fatalf("up --once: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, want, out, errOut)
		}
		if len(logLines(errOut, "the status service has not folded every event yet; stopping anyway")) > 0 {
			t.Fatalf("up --once stopped before its report was complete:\n%s", errOut)
		}
		r := e.reportOf("demo")
		if got := phaseOf(t, r); got != phase {
			t.Fatalf("phase %s, want %s:\n%s", got, phase, r)
		}
		reports = append(reports, r)
	}
	step(0, "converged")

	if err := e.sim.SetFaults(pvesim.Faults{TaskFailureRate: 1, TaskTypes: []string{"qmconfig"},
		TaskFailureMessage: "unable to apply the memory change"}); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetConfig(102, "memory", "4096"); err != nil {
		t.Fatal(err)
	}
	step(1, "failed")
	// The memory change restarts the guest, so a safety snapshot was taken first: the failure names it.
	if r := string(reports[1]); !strings.Contains(r, `"last_error": "task qmconfig 102 on pve2 failed: unable to apply the memory change; the safety snapshot proxops-`) {
		t.Fatalf("the failed update is not in the report:\n%s", r)
	}
	e.sim.ClearFaults()

	e.edit("vm/demo/web-01.yaml", func(s string) string { return strings.Replace(s, "  node:", "  nod:", 1) })
	e.commit("a misspelt field")
	step(1, "rejected")
	if r := string(reports[2]); !strings.Contains(r, `"text": "vm/demo/web-01.yaml:6:1: VM/web-01: spec.node: required"`) {
		t.Fatalf("the rejection's diagnostics are not in the report:\n%s", r)
	}
	return e.srv.URL, reports
}

// Two runs of the same history from scratch (fresh simulator, data directory and NATS, the same
// repository) leave byte-identical reports after every step: converged, failed and rejected.
func TestTwoRunsOfTheDemoFromScratchGiveByteIdenticalReports(t *testing.T) {
	var url string
	var first, second [][]byte
	t.Run("first", func(t *testing.T) { url, first = deterministicHistory(t, "127.0.0.1:0") })
	if t.Failed() {
		return
	}
	t.Run("second", func(t *testing.T) { _, second = deterministicHistory(t, strings.TrimPrefix(url, "http://")) })
	if t.Failed() {
		return
	}
	for i := range first {
		if string(first[i]) != string(second[i]) {
			t.Errorf("step %d: the reports differ:\n%s\n---\n%s", i, first[i], second[i])
		}
	}
}
