package main

import (
	"strings"
	"testing"
)

// A suspended cluster whose live state drifted from git shows the suspended phase, with the drifted resource
// and what would correct it, and nothing is written to PVE; once resumed, the next reconcile corrects it.
func TestASuspendedClusterThatDriftedIsShownNotTouchedAndCorrectedAfterResume(t *testing.T) {
	e := newDemoEnv(t)
	e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	if p := phaseOf(t, e.reportOf("demo")); p != "converged" {
		t.Fatalf("after the first reconcile: phase %s", p)
	}
	e.mustRunPlain(0, "suspend", "--cluster", "demo", "--data-dir", e.data)
	if err := e.sim.SetConfig(101, "memory", "4096"); err != nil {
		t.Fatal(err)
	}
	writes := func() int {
		n := 0
		for _, r := range e.sim.Requests() {
			if r.Method != "GET" {
				n++
			}
		}
		return n
	}
	before := writes()
	out, errOut, code := e.run("up", "--once", "--listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(out, "demo:") {
		t.Fatalf("up --once on a suspended, drifted cluster: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if n := writes() - before; n != 0 {
		t.Fatalf("%d PVE writes while the cluster is suspended", n)
	}
	report := e.reportOf("demo")
	if p := phaseOf(t, report); p != "suspended" {
		t.Fatalf("suspended and drifted: phase %s\n%s", p, report)
	}
	if !strings.Contains(string(report), `"state": "drift"`) || !strings.Contains(string(report), "VM/web-01: restart to apply memory") {
		t.Errorf("the report does not show VM/web-01 drifted with what would correct it:\n%s", report)
	}

	e.mustRunPlain(0, "resume", "--cluster", "demo", "--data-dir", e.data)
	e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	if p := phaseOf(t, e.reportOf("demo")); p != "converged" {
		t.Fatalf("after resume: phase %s", p)
	}
	if conf, _ := e.sim.Config(101); conf["memory"] == "4096" {
		t.Error("the drift was not corrected after resume")
	}
}
