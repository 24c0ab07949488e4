package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/plan"
)

// fakeClock is a reporter clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func createResult(status plan.ResultStatus, elapsed time.Duration, msg string) plan.Result {
	return plan.Result{RunID: "r1", OpID: "vm-101-create", Cluster: "lab", Node: "pve1", VMID: 101,
		Ref: "VM/web-01", Action: plan.ActionCreate, Status: status, Elapsed: elapsed, Message: msg}
}

func TestApplyProgressSaysWhatStartsWhatIsStillRunningAndHowItEnded(t *testing.T) {
	var out bytes.Buffer
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	r := newReporter(&out, &out, reconcileOptions{output: "text"}, true)
	r.now = clock.now

	r.result(createResult(plan.StatusStarted, 0, ""))
	r.result(createResult(plan.StatusProgress, 0, "")) // heartbeats print nothing more
	clock.advance(4 * time.Second)
	r.tick() // too early for a "still" line
	clock.advance(6 * time.Second)
	r.tick()
	clock.advance(5 * time.Second)
	r.tick() // 5 s after the last "still" line: nothing
	clock.advance(5 * time.Second)
	r.tick()
	r.result(createResult(plan.StatusSucceeded, 21*time.Second, ""))
	r.result(createResult(plan.StatusSucceeded, 21*time.Second, "")) // a duplicate final result prints nothing
	r.tick()                                                         // nothing runs any more

	fail := plan.Result{RunID: "r1", OpID: "iso-pve2-download", Cluster: "lab", Node: "pve2", Ref: "ISO/debian-12",
		Action: plan.ActionDownload, Status: plan.StatusFailed, Elapsed: 2 * time.Second, Message: "checksum mismatch"}
	r.result(fail)

	want := "Creating VM/web-01 on pve1…\n" +
		"VM/web-01: Still creating… [10s elapsed]\n" +
		"VM/web-01: Still creating… [20s elapsed]\n" +
		"VM/web-01: creation complete after 21s [vmid 101]\n" +
		"ISO/debian-12: download failed after 2s on pve2: checksum mismatch\n"
	if out.String() != want {
		t.Errorf("progress:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestApplyProgressAsJSONLines(t *testing.T) {
	var out bytes.Buffer
	r := newReporter(&out, &out, reconcileOptions{output: "json"}, true)
	r.result(createResult(plan.StatusStarted, 0, ""))
	r.result(createResult(plan.StatusFailed, 1500*time.Millisecond, "storage 'fast' does not exist"))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 JSON lines, got:\n%s", out.String())
	}
	var ops []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		ops = append(ops, m)
	}
	if ops[0]["type"] != "operation" || ops[0]["status"] != "started" || ops[0]["ref"] != "VM/web-01" || ops[0]["vmid"] != 101.0 {
		t.Errorf("started line: %v", ops[0])
	}
	if ops[1]["status"] != "failed" || ops[1]["elapsed_ms"] != 1500.0 || ops[1]["message"] != "storage 'fast' does not exist" {
		t.Errorf("failed line: %v", ops[1])
	}
}

func TestApplyWithDiffPrintsThePlanBeforeApplying(t *testing.T) {
	p := plan.Planned{RunInfo: plan.RunInfo{Cluster: "lab", RunID: "r1", PlanID: "p1"}, Plan: plan.Plan{ID: "p1", Cluster: "lab",
		Operations: []plan.Operation{{ID: "vm-101-create", Node: "pve1", VMID: 101, Ref: "VM/web-01", Action: plan.ActionCreate,
			Reason: "VM/web-01: not on PVE; will create"}}}}
	var plain, withDiff bytes.Buffer
	newReporter(&plain, &plain, reconcileOptions{output: "text"}, true).planned(p)
	newReporter(&withDiff, &withDiff, reconcileOptions{output: "text", showDiff: true}, true).planned(p)
	if plain.String() != "lab: plan p1: 1 operation\n" {
		t.Errorf("apply without --diff: %q", plain.String())
	}
	if !strings.Contains(withDiff.String(), "=== will create (1) ===") || !strings.Contains(withDiff.String(), "VM/web-01: not on PVE; will create") {
		t.Errorf("apply --diff does not print the plan:\n%s", withDiff.String())
	}
}

// apply says what a safety snapshot operation does, and how a failed protected change ended.
func TestApplyProgressNamesSnapshotsAndRollbacks(t *testing.T) {
	var out bytes.Buffer
	r := newReporter(&out, &out, reconcileOptions{output: "text"}, true)
	op := func(action plan.Action, status plan.ResultStatus, msg string) plan.Result {
		return plan.Result{RunID: "r1", OpID: "vm-101-" + string(action), Cluster: "lab", Node: "pve1", VMID: 101,
			Ref: "VM/web-01", Action: action, Status: status, Elapsed: time.Second, Message: msg}
	}
	for _, res := range []plan.Result{
		op(plan.ActionSnapshot, plan.StatusStarted, ""),
		op(plan.ActionSnapshot, plan.StatusSucceeded, ""),
		op(plan.ActionStart, plan.StatusFailed, "start failed; rolling back to the safety snapshot proxops-0123456789ab"),
		op(plan.ActionRollback, plan.StatusStarted, ""),
		op(plan.ActionRollback, plan.StatusSucceeded, ""),
		op(plan.ActionDeleteSnapshot, plan.StatusSucceeded, ""),
	} {
		r.result(res)
	}
	want := "Taking a safety snapshot of VM/web-01 on pve1…\n" +
		"VM/web-01: safety snapshot complete after 1s [vmid 101]\n" +
		"VM/web-01: start failed after 1s [vmid 101]: start failed; rolling back to the safety snapshot proxops-0123456789ab\n" +
		"Rolling back VM/web-01 on pve1…\n" +
		"VM/web-01: rollback complete after 1s [vmid 101]\n" +
		"VM/web-01: snapshot removal complete after 1s [vmid 101]\n"
	if out.String() != want {
		t.Errorf("progress:\n%s\nwant:\n%s", out.String(), want)
	}
}
