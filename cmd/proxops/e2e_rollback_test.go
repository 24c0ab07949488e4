package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// resourceOf is one resource of a report by Kind/name: its state, reason and last error.
func resourceOf(t *testing.T, report []byte, kind, name string) (state, reason, lastError string) {
	t.Helper()
	var r struct {
		Resources []struct {
			Kind      string `json:"kind"`
			Name      string `json:"name"`
			State     string `json:"state"`
			Reason    string `json:"reason"`
			LastError string `json:"last_error"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(report, &r); err != nil {
		t.Fatal(err)
	}
	for _, x := range r.Resources {
		if x.Kind == kind && x.Name == name {
			return x.State, x.Reason, x.LastError
		}
	}
	t.Fatalf("no %s/%s in the report:\n%s", kind, name, report)
	return "", "", ""
}

// handSnapshot takes a snapshot of a guest through the PVE API, as an operator would, and waits for it.
func (e *demoEnv) handSnapshot(node string, vmid int, name string) {
	e.t.Helper()
	e.post(fmt.Sprintf("/nodes/%s/qemu/%d/snapshot", node, vmid), url.Values{"snapname": {name}})
	testkit.Eventually(e.t, 30*time.Second, "the hand-made snapshot", func() bool {
		raw, _ := e.sim.RawConfig(vmid)
		cfg, _ := e.sim.Config(vmid)
		return strings.Contains(raw, "["+name+"]") && cfg["lock"] == ""
	})
}

// commitMoreMemory commits a memory change of web-01 (a restart, so a protected change).
func (e *demoEnv) commitMoreMemory() {
	e.edit("vm/demo/web-01.yaml", func(s string) string { return strings.Replace(s, "memory: 2GiB", "memory: 3GiB", 1) })
	e.commit("more memory for web-01")
}

// upWithFailingStart runs up --once while every start fails, and wants its exit 1.
func (e *demoEnv) upWithFailingStart() {
	t := e.t
	t.Helper()
	if err := e.sim.SetFaults(pvesim.Faults{TaskFailureRate: 1, TaskTypes: []string{"qmstart"}, TaskFailureMessage: "start failed: injected"}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := e.run("up", "--once", "--listen", "127.0.0.1:0")
	e.sim.ClearFaults()
	if code != 1 {
		t.Fatalf("up --once with a failing start: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// The whole story of a change gone wrong, on one host: a commit raises web-01's memory, the start after the
// change fails, and with rollback: never the run keeps the safety snapshot and the status names it. The
// operator rolls web-01 back with proxops rollback: without a terminal it needs --yes; a snapshot taken by
// hand, even one named proxops-…, is refused; with --yes the newest of ProxOps' own is rolled back to through
// the planner and the executor. The next reconcile shows web-01 suspended with its drift from git and does
// not undo the rollback; proxops resume lets the next reconcile correct it.
func TestARollbackUndoesAFailedChangeAndSuspendsTheGuestUntilResumed(t *testing.T) {
	e := newDemoEnv(t)
	e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	memory := func() string {
		cfg, _ := e.sim.Config(101)
		return cfg["memory"]
	}
	before := memory()

	e.commitMoreMemory()
	e.upWithFailingStart()
	if memory() == before {
		t.Fatal("setup: the memory change was not written before the failing start")
	}
	_, _, lastError := resourceOf(t, e.reportOf("demo"), "VM", "web-01")
	kept := regexp.MustCompile(`the safety snapshot (proxops-[a-z0-9]{12}) taken before it is kept`).FindStringSubmatch(lastError)
	if kept == nil {
		t.Fatalf("the status does not name the kept snapshot: last error %q", lastError)
	}
	snapshot := kept[1]
	e.handSnapshot("pve1", 101, "proxops-byhand")

	// No terminal, no --yes: refused before anything is asked of anyone.
	out, errOut, code := e.run("rollback", "demo/web-01")
	if code != 1 || !strings.Contains(errOut, "give --yes") {
		t.Fatalf("rollback without a terminal or --yes: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// A snapshot ProxOps did not take is refused, with why.
	out, errOut, code = e.run("rollback", "demo/web-01", "proxops-byhand", "--yes")
	if code != 1 || !strings.Contains(out, "rollback refused") || !strings.Contains(out, "snapshot proxops-byhand of VM/web-01 (vmid 101) was not taken by ProxOps") {
		t.Fatalf("rollback to a hand-made snapshot: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if memory() == before {
		t.Fatal("a refused rollback changed the guest")
	}

	out = e.mustRun(0, "rollback", "demo/web-01", "--yes")
	for _, want := range []string{"rollback", snapshot, "Rolling back VM/web-01", "VM/web-01: rollback complete",
		"suspended from correction", "proxops resume demo/web-01"} {
		if !strings.Contains(out, want) {
			t.Fatalf("proxops rollback does not say %q:\n%s", want, out)
		}
	}
	if got := memory(); got != before {
		t.Fatalf("after the rollback web-01 has memory %s, want %s as before the change", got, before)
	}

	// The drift is shown, not corrected, by diff and by the next reconcile.
	diff := e.mustRun(0, "diff")
	if !strings.Contains(diff, "suspended from correction") || !strings.Contains(diff, "rolled back to "+snapshot+" by local") ||
		!strings.Contains(diff, "memory") {
		t.Fatalf("diff after the rollback does not show web-01 suspended with its drift:\n%s", diff)
	}
	// up --once does not call the cluster converged: the suspended guest differs from git.
	if out, errOut, code := e.run("up", "--once", "--listen", "127.0.0.1:0"); code != 1 ||
		!strings.Contains(out, "demo: converged (nothing to do); rolled back by an operator and suspended from correction: VM/web-01") {
		t.Fatalf("up --once after the rollback: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if got := memory(); got != before {
		t.Fatalf("the reconcile after the rollback undid it: memory %s", got)
	}
	report := e.reportOf("demo")
	state, reason, _ := resourceOf(t, report, "VM", "web-01")
	if state != "suspended" || !strings.Contains(reason, "rolled back to "+snapshot) || !strings.Contains(reason, "memory") {
		t.Fatalf("status of web-01 after the rollback: %s: %s", state, reason)
	}
	if p := phaseOf(t, report); p != "drifted" || !strings.Contains(string(report), "rolled back by an operator and suspended from correction: VM/web-01") {
		t.Fatalf("the cluster after the rollback: phase %s\n%s", p, report)
	}

	if out := e.mustRunPlain(0, "resume", "demo/web-01", "--data-dir", e.data); !strings.Contains(out, "resumed") {
		t.Fatalf("resume: %s", out)
	}
	e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	if got := memory(); got == before {
		t.Fatal("after resume the reconcile did not correct web-01")
	}
	if state, reason, _ := resourceOf(t, e.reportOf("demo"), "VM", "web-01"); state != "converged" {
		t.Fatalf("after resume web-01 is %s: %s", state, reason)
	}
}

// A commit that changes the rolled-back guest's manifest ends its suspension: the next reconcile applies it.
func TestACommitToTheGuestsManifestEndsItsSuspension(t *testing.T) {
	e := newDemoEnv(t)
	e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	e.commitMoreMemory()
	e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	e.mustRun(0, "rollback", "demo/101", "--yes")
	if cfg, _ := e.sim.Config(101); cfg["memory"] != "2048" {
		t.Fatalf("after the rollback: memory %s", cfg["memory"])
	}
	// A commit that touches another manifest leaves the suspension as it is.
	e.edit("proxops.yaml", func(s string) string { return s + "# touched\n" })
	e.commit("unrelated")
	e.run("up", "--once", "--listen", "127.0.0.1:0")
	if cfg, _ := e.sim.Config(101); cfg["memory"] != "2048" {
		t.Fatalf("an unrelated commit undid the rollback: memory %s", cfg["memory"])
	}
	e.edit("vm/demo/web-01.yaml", func(s string) string { return strings.Replace(s, "memory: 3GiB", "memory: 4GiB", 1) })
	e.commit("even more memory for web-01")
	e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	if cfg, _ := e.sim.Config(101); cfg["memory"] != "4096" {
		t.Fatalf("the commit to web-01's manifest was not applied: memory %s", cfg["memory"])
	}
	if diff := e.mustRun(0, "diff"); strings.Contains(diff, "suspended") {
		t.Fatalf("web-01 is still suspended after a commit to its manifest:\n%s", diff)
	}
}

// With --output json a rollback prints one JSON object per line for a program: the preview (the diff's
// document, naming the rollback and its snapshot), the plan, results and summary as apply prints them, and
// the outcome. Without --yes it is refused before anything is planned.
func TestARollbackPrintsOneJSONObjectPerLine(t *testing.T) {
	e := newDemoEnv(t)
	e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	e.commitMoreMemory()
	e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	if out, errOut, code := e.run("rollback", "demo/web-01", "-o", "json"); code != 1 || out != "" ||
		!strings.Contains(errOut, "--output json needs --yes") {
		t.Fatalf("rollback -o json without --yes: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if cfg, _ := e.sim.Config(101); cfg["memory"] != "3072" {
		t.Fatalf("a refused rollback changed the guest: memory %s", cfg["memory"])
	}

	// A refused rollback ends after the preview, whose rejections say why.
	e.handSnapshot("pve1", 101, "proxops-byhand")
	refused, errOut, code := e.run("rollback", "demo/web-01", "proxops-byhand", "-o", "json", "--yes")
	var preview struct {
		Type   string `json:"type"`
		Report struct {
			Rejections []struct {
				Cluster string `json:"cluster"`
			} `json:"rejections"`
		} `json:"report"`
	}
	if err := json.Unmarshal([]byte(refused), &preview); code != 1 || err != nil || strings.Count(refused, "\n") != 1 ||
		preview.Type != "preview" || len(preview.Report.Rejections) != 1 || !strings.Contains(refused, "was not taken by ProxOps") {
		t.Fatalf("refused rollback -o json: exit %d (%v)\nstdout:\n%s\nstderr:\n%s", code, err, refused, errOut)
	}

	out := e.mustRun(0, "rollback", "demo/web-01", "-o", "json", "--yes")
	type line struct {
		Type   string `json:"type"`
		Report struct {
			Clusters []struct {
				Operations []struct {
					Action string `json:"action"`
					Ref    string `json:"ref"`
					Params []struct {
						Key   string `json:"key"`
						Value string `json:"value"`
					} `json:"params"`
				} `json:"operations"`
			} `json:"clusters"`
		} `json:"report"`
		OK        bool   `json:"ok"`
		Ref       string `json:"ref"`
		VMID      int    `json:"vmid"`
		Snapshot  string `json:"snapshot"`
		Suspended bool   `json:"suspended"`
		Resume    string `json:"resume"`
	}
	var lines []line
	for _, text := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var l line
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			t.Fatalf("not one JSON object: %q (%v)\n%s", text, err, out)
		}
		lines = append(lines, l)
	}
	first, last := lines[0], lines[len(lines)-1]
	previewed := ""
	if first.Type == "preview" && len(first.Report.Clusters) == 1 {
		for _, op := range first.Report.Clusters[0].Operations {
			for _, p := range op.Params {
				if op.Action == "rollback" && op.Ref == "VM/web-01" && p.Key == "snapname" {
					previewed = p.Value
				}
			}
		}
	}
	if previewed == "" || !strings.HasPrefix(previewed, "proxops-") {
		t.Fatalf("the first line is not a preview naming the rollback and its snapshot:\n%s", out)
	}
	types := map[string]bool{}
	for _, l := range lines {
		types[l.Type] = true
		if l.Type == "summary" && !l.OK {
			t.Fatalf("the summary says the rollback failed:\n%s", out)
		}
	}
	if !types["plan"] || !types["summary"] {
		t.Fatalf("the plan and the summary are not printed as apply prints them:\n%s", out)
	}
	if last.Type != "rolled-back" || last.Ref != "VM/web-01" || last.VMID != 101 || last.Snapshot != previewed ||
		!last.Suspended || last.Resume != "proxops resume demo/web-01" {
		t.Fatalf("the last line is not the outcome: %+v\n%s", last, out)
	}
	if cfg, _ := e.sim.Config(101); cfg["memory"] != "2048" {
		t.Fatalf("after the rollback: memory %s", cfg["memory"])
	}
}

// The confirmation on a terminal takes only "yes".
func TestRollbackConfirmationTakesOnlyYes(t *testing.T) {
	for answer, want := range map[string]bool{"yes\n": true, "y\n": false, "\n": false, "YES\n": false, "": false} {
		var out bytes.Buffer
		if got := askOnTerminal(strings.NewReader(answer), &out)("Roll VM/web-01 back?"); got != want {
			t.Errorf("answer %q: confirmed %v, want %v", answer, got, want)
		}
		if !strings.Contains(out.String(), "Roll VM/web-01 back?") || !strings.Contains(out.String(), "Only 'yes' confirms") {
			t.Errorf("the question is not asked: %q", out.String())
		}
	}
}

// On a deployed system (--nats) a rollback is an operator's: the cli user's request on the operator subject
// is denied and nothing is rolled back; the operator's rollback is run by the deployed planner and executor,
// a reconcile of the same commit then leaves the guest as it is, and the operator's resume lets the next one
// correct it.
func TestOnlyAnOperatorRollsBackOnADeployedSystem(t *testing.T) {
	e := newDemoEnv(t)
	e.edit("proxops.yaml", func(s string) string {
		return strings.Replace(s, "reconcile:\n", "reconcile:\n  poll-interval: 200ms\n", 1)
	})
	e.commit("poll often")
	d := e.deployed()
	memory := func() string {
		cfg, _ := e.sim.Config(101)
		return cfg["memory"]
	}
	before := memory()
	e.commitMoreMemory()
	d.waitFor("the memory change applied", func() bool { return memory() == "3072" && e.sim.Running(101) })
	cli := d.connect("cli")
	d.waitFor("the memory change's run finished", func() bool {
		st, err := readStatuses(d.ctx, cli, nil)
		return err == nil && len(st) == 1 && st[0].LastCommitApplied == e.head()
	})

	if out := d.as("cli", 1, "rollback", "demo/web-01", "--yes"); !strings.Contains(out, "ask for a reconcile") {
		t.Fatalf("rollback as cli failed otherwise:\n%s", out)
	}
	if got := memory(); got != "3072" {
		t.Fatalf("the cli's refused rollback changed web-01: memory %s", got)
	}
	out := d.as("operator", 0, "rollback", "demo/web-01", "--yes")
	if !strings.Contains(out, "VM/web-01: rollback complete") {
		t.Fatalf("the operator's rollback:\n%s", out)
	}
	if got := memory(); got != before {
		t.Fatalf("after the operator's rollback web-01 has memory %s, want %s", got, before)
	}
	// The status records the rollback and who asked for it.
	d.waitFor("the rollback in the status", func() bool {
		st, err := readStatuses(d.ctx, cli, nil)
		if err != nil || len(st) != 1 {
			return false
		}
		for _, r := range st[0].Resources {
			if r.Name == "web-01" {
				return r.State == "suspended" && strings.Contains(r.Reason, "rolled back: VM/web-01: roll back to the snapshot proxops-") &&
					strings.Contains(r.Reason, "as operator asked")
			}
		}
		return false
	})
	d.as("operator", 0, "apply")
	if got := memory(); got != before {
		t.Fatalf("a reconcile of the same commit undid the rollback: memory %s", got)
	}
	if st := d.as("cli", 0, "status"); !strings.Contains(st, "web-01 101 suspended") {
		t.Fatalf("proxops status does not show web-01 suspended:\n%s", st)
	}
	if ev := d.as("cli", 0, "events"); !regexp.MustCompile(`rollback of demo/web-01 to proxops-[a-z0-9]{12} requested by operator operator`).MatchString(ev) ||
		!regexp.MustCompile(`\(rollback of web-01 to proxops-[a-z0-9]{12} asked by operator\)`).MatchString(ev) {
		t.Fatalf("proxops events does not show the operator's rollback:\n%s", ev)
	}
	d.as("operator", 0, "resume", "demo/web-01")
	d.as("operator", 0, "apply")
	if got := memory(); got != "3072" {
		t.Fatalf("after resume the reconcile did not correct web-01: memory %s", got)
	}
}

// With a proxops up running on the data directory, proxops rollback talks to it: the running system rolls the
// guest back, and its next reconcile of the same commit leaves the guest alone until it is resumed.
func TestARollbackThroughARunningUp(t *testing.T) {
	e := newDemoEnv(t)
	e.edit("proxops.yaml", func(s string) string {
		return strings.Replace(s, "reconcile:\n", "reconcile:\n  poll-interval: 200ms\n", 1)
	})
	e.commit("poll often")
	u := e.startUp()
	addr := u.addr()
	waitConverged(t, u, addr, "demo", e.head())
	memory := func() string {
		cfg, _ := e.sim.Config(101)
		return cfg["memory"]
	}
	before := memory()
	e.commitMoreMemory()
	waitConverged(t, u, addr, "demo", e.head())

	if out := e.mustRun(0, "rollback", "demo/web-01", "--yes"); !strings.Contains(out, "VM/web-01: rollback complete") {
		t.Fatalf("rollback through the running up:\n%s", out)
	}
	if got := memory(); got != before {
		t.Fatalf("after the rollback: memory %s, want %s", got, before)
	}
	if out := e.mustRun(0, "apply"); !strings.Contains(out, "VM/web-01: suspended from correction: rolled back to proxops-") {
		t.Fatalf("apply does not say web-01 is suspended:\n%s", out)
	}
	if got := memory(); got != before {
		t.Fatalf("the running up's reconcile undid the rollback: memory %s", got)
	}
	e.mustRunPlain(0, "resume", "demo/web-01", "--data-dir", e.data)
	e.mustRun(0, "apply")
	if got := memory(); got != "3072" {
		t.Fatalf("after resume the reconcile did not correct web-01: memory %s", got)
	}
	if code := u.stop(); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, u.errOut)
	}
}

// With reconcile.rollback: on-failure, a change whose start fails leaves the guest as it was before the plan,
// running, and the status says the run rolled it back to its safety snapshot.
func TestAFailedStartWithRollbackOnFailureLeavesTheGuestAsBeforeAndTheStatusSaysSo(t *testing.T) {
	e := newDemoEnv(t)
	e.edit("proxops.yaml", func(s string) string {
		return strings.Replace(s, "reconcile:\n", "reconcile:\n  rollback: on-failure\n", 1)
	})
	e.commit("roll back failed changes")
	e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	before, _ := e.sim.Config(101)
	e.commitMoreMemory()
	e.upWithFailingStart()
	after, _ := e.sim.Config(101)
	if after["memory"] != before["memory"] || !e.sim.Running(101) {
		t.Fatalf("after the failed change: memory %s (before %s), running %v", after["memory"], before["memory"], e.sim.Running(101))
	}
	report := e.reportOf("demo")
	state, reason, lastError := resourceOf(t, report, "VM", "web-01")
	if state != "failed" || !regexp.MustCompile(`start failed: injected.*rolling back to the safety snapshot proxops-[a-z0-9]{12}`).MatchString(lastError) || !strings.Contains(reason, "rolled back to its safety snapshot: it is as it was before the plan") {
		t.Fatalf("status of web-01: %s: %s: %q", state, reason, lastError)
	}
	if p := phaseOf(t, report); p != "failed" {
		t.Fatalf("phase %s, want failed: the change did not happen", p)
	}
}
