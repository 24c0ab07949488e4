package report_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/report"
)

func fold(cluster string, events ...report.Event) report.ClusterStatus {
	s := report.New(cluster)
	for _, e := range events {
		s, _ = report.Apply(s, e)
	}
	return s
}

type resourceRow struct {
	Ref       string
	State     report.ResourceState
	Action    plan.Action
	LastError string
}

func rows(r report.Report) []resourceRow {
	var out []resourceRow
	for _, x := range r.Resources {
		out = append(out, resourceRow{x.Ref(), x.State, x.LastAction, x.LastError})
	}
	return out
}

func TestApplyFoldsHistoriesIntoPhasesAndResourceStates(t *testing.T) {
	type want struct {
		phase     report.Phase
		reason    string
		seen      string
		applied   string
		resources []resourceRow
		counters  report.Counters
	}
	tests := []struct {
		name    string
		history func(h *history) []report.Event
		want    want
	}{
		{
			name: "a run whose operations all succeed converges",
			history: func(h *history) []report.Event {
				e := h.repo("c1", event.TriggerWebhook)
				r := runInfo("alpha", "c1", "run-1", e)
				return []report.Event{e,
					h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{createWeb, startWeb, configureDB},
						Findings: []plan.Finding{foreignGuest}}),
					h.result(r, createWeb, plan.StatusStarted, ""),
					h.result(r, createWeb, plan.StatusSucceeded, "created"),
					h.result(r, configureDB, plan.StatusSucceeded, "configured"),
					h.result(r, startWeb, plan.StatusSucceeded, "started"),
					h.finished(r, plan.OutcomeSucceeded, outcome(createWeb, plan.OpSucceeded, "created"),
						outcome(startWeb, plan.OpSucceeded, "started"), outcome(configureDB, plan.OpSucceeded, "configured")),
				}
			},
			want: want{phase: report.PhaseConverged, seen: "c1", applied: "c1",
				resources: []resourceRow{
					{"ISO/debian-12", report.StateConverged, "", ""},
					{"LXC/cache", report.StateConverged, "", ""},
					{"VM/db-01", report.StateConverged, plan.ActionConfigure, ""},
					{"VM/legacy", report.StateSkipped, "", ""},
					{"VM/web-01", report.StateConverged, plan.ActionStart, ""},
				},
				counters: report.Counters{Objects: 5, ActionsOK: 3, Skipped: 1, Plans: 1}},
		},
		{
			name: "a run in flight is applying and shows its progress",
			history: func(h *history) []report.Event {
				e := h.repo("c1", event.TriggerPoll)
				r := runInfo("alpha", "c1", "run-1", e)
				return []report.Event{e,
					h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{createWeb, startWeb, downloadISO}}),
					h.result(r, downloadISO, plan.StatusSucceeded, ""),
					h.result(r, createWeb, plan.StatusProgress, "task running"),
				}
			},
			want: want{phase: report.PhaseApplying, reason: "1 of 3 operations done", seen: "c1",
				resources: []resourceRow{
					{"ISO/debian-12", report.StateConverged, plan.ActionDownload, ""},
					{"LXC/cache", report.StateConverged, "", ""},
					{"VM/db-01", report.StateConverged, "", ""},
					{"VM/web-01", report.StateInProgress, "", ""},
				},
				counters: report.Counters{Objects: 4, ActionsOK: 1, Plans: 1}},
		},
		{
			name: "a failed operation fails the run and skips its dependants",
			history: func(h *history) []report.Event {
				e := h.repo("c1", event.TriggerWebhook)
				r := runInfo("alpha", "c1", "run-1", e)
				return []report.Event{e,
					h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{createWeb, startWeb, configureDB}}),
					h.result(r, createWeb, plan.StatusFailed, "can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout"),
					h.result(r, configureDB, plan.StatusSucceeded, ""),
					h.finished(r, plan.OutcomeFailed,
						outcome(createWeb, plan.OpFailed, "can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout"),
						outcome(startWeb, plan.OpSkipped, "dependency op-001 failed"), outcome(configureDB, plan.OpSucceeded, "")),
				}
			},
			want: want{phase: report.PhaseFailed, reason: "1 operation failed; the next plan retries", seen: "c1",
				resources: []resourceRow{
					{"ISO/debian-12", report.StateConverged, "", ""},
					{"LXC/cache", report.StateConverged, "", ""},
					{"VM/db-01", report.StateConverged, plan.ActionConfigure, ""},
					{"VM/web-01", report.StateFailed, plan.ActionCreate, "can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout"},
				},
				counters: report.Counters{Objects: 4, ActionsOK: 1, ActionsErr: 1, ActionsSkipped: 1, Plans: 1}},
		},
		{
			name: "a rejection keeps the last known resources and shows every diagnostic",
			history: func(h *history) []report.Event {
				e1 := h.repo("c1", event.TriggerWebhook)
				r1 := runInfo("alpha", "c1", "run-1", e1)
				e2 := h.repo("c2", event.TriggerWebhook)
				r2 := runInfo("alpha", "c2", "", e2)
				return []report.Event{e1,
					h.planned(r1, plan.Plan{Resources: declared}),
					e2,
					h.rejected(r2, plan.RejectParse,
						diag.Diagnostic{Severity: diag.Error, File: "vm/alpha/web.yaml", Line: 7, Column: 3, Ref: "VM/web-01", Field: "spec.memory", Message: `invalid size "lots"`},
						diag.Diagnostic{Severity: diag.Error, File: "clusters/alpha/resources.yaml", Line: 2, Column: 5, Message: "unknown file ../../vm/alpha/gone.yaml"}),
				}
			},
			want: want{phase: report.PhaseRejected, reason: "parse_error: 2 errors; nothing was applied; " + report.WaitsForChange, seen: "c2", applied: "c1",
				resources: []resourceRow{
					{"ISO/debian-12", report.StateConverged, "", ""},
					{"LXC/cache", report.StateConverged, "", ""},
					{"VM/db-01", report.StateConverged, "", ""},
					{"VM/web-01", report.StateConverged, "", ""},
				},
				counters: report.Counters{Objects: 4, Plans: 1, Rejections: 1}},
		},
		{
			name: "an observe rejected for a transient cause names the cause and the next attempt",
			history: func(h *history) []report.Event {
				e := h.repo("c1", event.TriggerPoll)
				r := runInfo("alpha", "c1", "run-1", e)
				ev := h.rejected(r, plan.RejectObserve, diag.Diagnostic{Severity: diag.Error, File: "proxops.yaml",
					Message: "pve inventory read failed: node pve1: GET /nodes/pve1/qemu: 503 Service Unavailable"})
				ev.Rejected.Rejection.Transient = true
				ev.Rejected.Rejection.RetryAt = time.Date(2026, 12, 2, 10, 0, 4, 0, time.UTC)
				return []report.Event{e, ev}
			},
			want: want{phase: report.PhaseRejected, seen: "c1",
				reason: "observe_failed: 1 error (pve inventory read failed: node pve1: GET /nodes/pve1/qemu: 503 Service Unavailable); " +
					"nothing was applied; planned again at 2026-12-02T10:00:04Z",
				counters: report.Counters{Rejections: 1}},
		},
		{
			name: "a dry-run plan with operations is drift, and nothing counts as applied",
			history: func(h *history) []report.Event {
				e := h.repo("c1", event.TriggerDrift)
				e.Repo.DryRun = true
				r := runInfo("alpha", "c1", "", e)
				r.DryRun = true
				return []report.Event{e,
					h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{configureDB, downloadISO, pruneOld},
						Findings: []plan.Finding{diskAnomaly}}),
				}
			},
			want: want{phase: report.PhaseDrifted, reason: "dry run: 3 operations not applied", seen: "c1",
				resources: []resourceRow{
					{"ISO/debian-12", report.StateDesired, "", ""},
					{"LXC/cache", report.StateConverged, "", ""},
					{"LXC/old-ct", report.StateOrphan, "", ""},
					{"VM/db-01", report.StateDrift, "", ""},
					{"VM/web-01", report.StateConverged, "", ""},
				},
				counters: report.Counters{Objects: 5, Anomalies: 1, Drifted: 3, Plans: 1}},
		},
		{
			name: "a held plan waits for confirmation, and the confirmation releases it",
			history: func(h *history) []report.Event {
				e := h.repo("c1", event.TriggerWebhook)
				r := runInfo("alpha", "c1", "run-1", e)
				return []report.Event{e,
					h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{pruneOld}, Held: true,
						HeldReason: "would prune 3 of 4 owned LXC guests"}),
					h.held(r, "would prune 3 of 4 owned LXC guests", "LXC/old-ct"),
				}
			},
			want: want{phase: report.PhaseHeld, reason: "would prune 3 of 4 owned LXC guests", seen: "c1",
				resources: []resourceRow{
					{"ISO/debian-12", report.StateConverged, "", ""},
					{"LXC/cache", report.StateConverged, "", ""},
					{"LXC/old-ct", report.StateOrphan, "", ""},
					{"VM/db-01", report.StateConverged, "", ""},
					{"VM/web-01", report.StateConverged, "", ""},
				},
				counters: report.Counters{Objects: 5, Drifted: 1, Plans: 1}},
		},
		{
			name: "a confirmed hold applies and a prune that succeeds is pruned",
			history: func(h *history) []report.Event {
				e := h.repo("c1", event.TriggerWebhook)
				r := runInfo("alpha", "c1", "run-1", e)
				return []report.Event{e,
					h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{pruneOld}, Held: true}),
					h.held(r, "", "LXC/old-ct"),
					h.confirmed(r),
					h.result(r, pruneOld, plan.StatusSucceeded, "deleted"),
					h.finished(r, plan.OutcomeSucceeded, outcome(pruneOld, plan.OpSucceeded, "deleted")),
				}
			},
			want: want{phase: report.PhaseConverged, seen: "c1", applied: "c1",
				resources: []resourceRow{
					{"ISO/debian-12", report.StateConverged, "", ""},
					{"LXC/cache", report.StateConverged, "", ""},
					{"LXC/old-ct", report.StatePruned, plan.ActionDelete, ""},
					{"VM/db-01", report.StateConverged, "", ""},
					{"VM/web-01", report.StateConverged, "", ""},
				},
				counters: report.Counters{Objects: 5, ActionsOK: 1, Pruned: 1, Plans: 1}},
		},
		{
			name: "a suspended cluster shows what it would do",
			history: func(h *history) []report.Event {
				e := h.repo("c1", event.TriggerWebhook)
				r := runInfo("alpha", "c1", "", e)
				r.Suspended = true
				return []report.Event{e, h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{configureDB}})}
			},
			want: want{phase: report.PhaseSuspended, reason: "cluster suspended: 1 operation not applied", seen: "c1",
				resources: []resourceRow{
					{"ISO/debian-12", report.StateConverged, "", ""},
					{"LXC/cache", report.StateConverged, "", ""},
					{"VM/db-01", report.StateDrift, "", ""},
					{"VM/web-01", report.StateConverged, "", ""},
				},
				counters: report.Counters{Objects: 4, Drifted: 1, Plans: 1}},
		},
		{
			name: "a new commit puts a converged cluster into planning until its plan arrives",
			history: func(h *history) []report.Event {
				e1 := h.repo("c1", event.TriggerWebhook)
				r1 := runInfo("alpha", "c1", "run-1", e1)
				return []report.Event{e1, h.planned(r1, plan.Plan{Resources: declared}), h.repo("c2abcdef0123456789", event.TriggerPoll)}
			},
			want: want{phase: report.PhasePlanning, reason: "waiting for the plan of commit c2abcdef0123", seen: "c2abcdef0123456789", applied: "c1",
				resources: []resourceRow{
					{"ISO/debian-12", report.StateConverged, "", ""},
					{"LXC/cache", report.StateConverged, "", ""},
					{"VM/db-01", report.StateConverged, "", ""},
					{"VM/web-01", report.StateConverged, "", ""},
				},
				counters: report.Counters{Objects: 4, Plans: 1}},
		},
		{
			name: "a drift tick whose plan is empty after a failure converges and clears the error",
			history: func(h *history) []report.Event {
				e1 := h.repo("c1", event.TriggerWebhook)
				r1 := runInfo("alpha", "c1", "run-1", e1)
				e2 := h.repo("c1", event.TriggerDrift)
				r2 := runInfo("alpha", "c1", "run-2", e2)
				e3 := h.repo("c1", event.TriggerDrift)
				r3 := runInfo("alpha", "c1", "run-3", e3)
				return []report.Event{e1,
					h.planned(r1, plan.Plan{Resources: declared, Operations: []plan.Operation{configureDB}}),
					h.finished(r1, plan.OutcomeFailed, outcome(configureDB, plan.OpFailed, "500 Internal Server Error")),
					e2,
					h.planned(r2, plan.Plan{Resources: declared, Operations: []plan.Operation{configureDB}}),
					h.result(r2, configureDB, plan.StatusSucceeded, ""),
					h.finished(r2, plan.OutcomeSucceeded, outcome(configureDB, plan.OpSucceeded, "")),
					e3,
					h.planned(r3, plan.Plan{Resources: declared}),
				}
			},
			want: want{phase: report.PhaseConverged, seen: "c1", applied: "c1",
				resources: []resourceRow{
					{"ISO/debian-12", report.StateConverged, "", ""},
					{"LXC/cache", report.StateConverged, "", ""},
					{"VM/db-01", report.StateConverged, plan.ActionConfigure, ""},
					{"VM/web-01", report.StateConverged, "", ""},
				},
				counters: report.Counters{Objects: 4, Plans: 3}},
		},
		{
			name: "gap reports replace each other",
			history: func(h *history) []report.Event {
				other := argsGap
				other.Key = "hookscript"
				return []report.Event{h.gaps("alpha", other, argsGap), h.gaps("alpha", argsGap, argsGap)}
			},
			want: want{phase: report.PhaseUnknown, counters: report.Counters{Gaps: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fold("alpha", tt.history(newHistory())...)
			got := want{phase: s.Phase, reason: s.Reason, seen: s.LastCommitSeen, applied: s.LastCommitApplied,
				resources: rows(s.Report), counters: s.Counters}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApplyKeepsLastErrorAndReasonsForAPersonToRead(t *testing.T) {
	h := newHistory()
	e := h.repo("c1", event.TriggerWebhook)
	r := runInfo("alpha", "c1", "run-1", e)
	s := fold("alpha", e,
		h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{createWeb, startWeb, configureDB, pruneOld},
			Findings: []plan.Finding{diskAnomaly, {Kind: plan.FindingDeferredPrune, Ref: "LXC/older-ct", Node: "pve2", VMID: 191, Message: "prune budget 1 reached"}}}),
		h.result(r, configureDB, plan.StatusSucceeded, ""),
		h.finished(r, plan.OutcomeFailed, outcome(createWeb, plan.OpFailed, "storage 'fast' does not exist"),
			outcome(startWeb, plan.OpSkipped, "dependency op-001 failed"), outcome(configureDB, plan.OpSucceeded, ""),
			outcome(pruneOld, plan.OpSkipped, "superseded")),
	)
	want := []report.Resource{
		{Kind: "ISO", Name: "debian-12", State: report.StateConverged},
		{Kind: "LXC", Name: "cache", State: report.StateConverged},
		{Kind: "LXC", Name: "old-ct", Node: "pve2", VMID: 190, State: report.StateOrphan,
			Reason:      "not applied (superseded): present on PVE (proxops-tagged) but absent in git",
			PruneReason: "present on PVE (proxops-tagged) but absent in git"},
		{Kind: "LXC", Name: "older-ct", Node: "pve2", VMID: 191, State: report.StateSkipped,
			Reason: "prune deferred: prune budget 1 reached", PruneReason: "prune budget 1 reached"},
		{Kind: "VM", Name: "db-01", Node: "pve2", VMID: 102, State: report.StateAnomalous, LastAction: plan.ActionConfigure,
			Reason: diskAnomaly.Message},
		{Kind: "VM", Name: "web-01", Node: "pve1", VMID: 101, State: report.StateFailed, LastAction: plan.ActionCreate,
			LastError: "storage 'fast' does not exist", Reason: createWeb.Reason},
	}
	if diff := cmp.Diff(want, s.Resources); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	if s.Counters.PruneDeferred != 1 || s.Counters.Anomalies != 1 {
		t.Errorf("counters = %+v, want one deferred prune and one anomaly", s.Counters)
	}
}

func TestApplySkipsEventsAlreadyFolded(t *testing.T) {
	h := newHistory()
	e := h.repo("c1", event.TriggerWebhook)
	r := runInfo("alpha", "c1", "", e)
	planned := h.planned(runInfo("alpha", "c1", "run-0", e), plan.Plan{Resources: declared})
	rej := h.rejected(r, plan.RejectNode)
	s := fold("alpha", e, planned, rej)
	again, folded := report.Apply(s, rej)
	if folded {
		t.Fatal("a rejection folded twice")
	}
	if again.Counters.Rejections != 1 || again.Revision != s.Revision {
		t.Errorf("after a redelivery: rejections %d revision %d, want 1 and %d", again.Counters.Rejections, again.Revision, s.Revision)
	}
	older := rej
	older.Seq--
	if _, folded := report.Apply(s, older); folded {
		t.Error("an event below the folded sequence was folded")
	}
}

func TestApplyLeavesTheGivenStatusUnchanged(t *testing.T) {
	h := newHistory()
	e := h.repo("c1", event.TriggerWebhook)
	r := runInfo("alpha", "c1", "run-1", e)
	s := fold("alpha", e, h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{createWeb}}))
	before := fmt.Sprintf("%+v", s)
	report.Apply(s, h.finished(r, plan.OutcomeFailed, outcome(createWeb, plan.OpFailed, "boom")))
	if after := fmt.Sprintf("%+v", s); after != before {
		t.Error("Apply changed the status it was given")
	}
}

func TestPreviewsNeverChangeAClustersStatus(t *testing.T) {
	h := newHistory()
	e := h.repo("c1", event.TriggerWebhook)
	r := runInfo("alpha", "c1", "run-1", e)
	base := fold("alpha", e, h.planned(r, plan.Plan{Resources: declared}))

	preview := h.repo("", event.TriggerManual)
	preview.Repo.DryRun, preview.Repo.RequestID = true, "req-1"
	pr := runInfo("alpha", "", "", preview)
	pr.DryRun, pr.RequestID = true, "req-1"
	s := base
	for _, ev := range []report.Event{preview, h.planned(pr, plan.Plan{Resources: declared, Operations: []plan.Operation{configureDB}})} {
		s, _ = report.Apply(s, ev)
	}
	if diff := cmp.Diff(base.Report, s.Report); diff != "" {
		t.Errorf("a preview changed the report (-before +after):\n%s", diff)
	}
}

// A work tree applied (apply --worktree: a snapshot without a commit, not a dry run) is what PVE becomes:
// its plan and run show in the report, unlike a preview of the same tree.
func TestAnAppliedWorkTreeChangesTheStatus(t *testing.T) {
	h := newHistory()
	e := h.repo("c1", event.TriggerWebhook)
	r := runInfo("alpha", "c1", "run-1", e)
	base := fold("alpha", e, h.planned(r, plan.Plan{Resources: declared}), h.finished(r, plan.OutcomeSucceeded))

	wt := h.repo("", event.TriggerManual)
	wt.Repo.RequestID = "req-2"
	wr := runInfo("alpha", "", "run-2", wt)
	wr.RequestID = "req-2"
	s := base
	for _, ev := range []report.Event{wt, h.planned(wr, plan.Plan{Resources: declared, Operations: []plan.Operation{configureDB}})} {
		s, _ = report.Apply(s, ev)
	}
	if s.Report.Counters.Plans != base.Report.Counters.Plans+1 || s.Report.Phase == base.Report.Phase {
		t.Fatalf("an applied work tree left the report as it was: phase %s, plans %d", s.Report.Phase, s.Report.Counters.Plans)
	}
}

func TestRevisionCountsChangesOfTheReportOnly(t *testing.T) {
	h := newHistory()
	e := h.repo("c1", event.TriggerWebhook)
	r := runInfo("alpha", "c1", "run-1", e)
	s := fold("alpha", e, h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{createWeb}}),
		h.result(r, createWeb, plan.StatusStarted, ""))
	rev := s.Revision
	s, folded := report.Apply(s, h.result(r, createWeb, plan.StatusProgress, "50%"))
	if !folded || s.Revision != rev {
		t.Errorf("a heartbeat that changes nothing: folded %v, revision %d → %d", folded, rev, s.Revision)
	}
	s, _ = report.Apply(s, h.result(r, createWeb, plan.StatusSucceeded, ""))
	if s.Revision != rev+1 {
		t.Errorf("a success: revision %d, want %d", s.Revision, rev+1)
	}
}

func TestTimingRecordsWhenResourcesChangedAndConverged(t *testing.T) {
	h := newHistory()
	e := h.repo("c1", event.TriggerWebhook)
	r := runInfo("alpha", "c1", "run-1", e)
	planned := h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{createWeb}})
	done := h.finished(r, plan.OutcomeSucceeded, outcome(createWeb, plan.OpSucceeded, ""))
	s := fold("alpha", e, planned, done)
	web, ok := s.Timing.Resource("VM", "web-01")
	if !ok {
		t.Fatal("no timing for VM/web-01")
	}
	if !web.UpdatedAt.Equal(done.At) || !web.LastConvergedAt.Equal(done.At) {
		t.Errorf("VM/web-01 timing = %+v, want updated and converged at %v", web, done.At)
	}
	db, _ := s.Timing.Resource("VM", "db-01")
	if !db.LastConvergedAt.Equal(planned.At) {
		t.Errorf("VM/db-01 converged at %v, want %v (when it was first planned with nothing to do)", db.LastConvergedAt, planned.At)
	}
	if !s.Timing.LastPlanAt.Equal(planned.At) || !s.Timing.LastSuccessAt.Equal(done.At) || !s.Timing.LastTriggerAt.Equal(e.At) {
		t.Errorf("timing = %+v", s.Timing)
	}
}

// twoClusterHistory is a history across streams: per stream in order.
func twoClusterHistory() map[report.Stream][]report.Event {
	h := newHistory()
	e1 := h.repo("c1", event.TriggerWebhook)
	a1 := runInfo("alpha", "c1", "run-a1", e1)
	b1 := runInfo("beta", "c1", "run-b1", e1)
	e2 := h.repo("c2", event.TriggerPoll)
	a2 := runInfo("alpha", "c2", "run-a2", e2)
	b2 := runInfo("beta", "c2", "", e2)
	evs := []report.Event{e1,
		h.planned(a1, plan.Plan{Resources: declared, Operations: []plan.Operation{createWeb, startWeb}, Findings: []plan.Finding{foreignGuest}}),
		h.planned(b1, plan.Plan{Resources: []string{"VM/db-01"}, Operations: []plan.Operation{configureDB}}),
		h.result(a1, createWeb, plan.StatusStarted, ""),
		h.refused("beta", "pve2", "made-up-run", "op-666", "unsigned"),
		h.result(b1, configureDB, plan.StatusFailed, "VM 102 is locked (backup)"),
		h.result(a1, createWeb, plan.StatusSucceeded, ""),
		h.finished(b1, plan.OutcomeFailed, outcome(configureDB, plan.OpFailed, "VM 102 is locked (backup)")),
		h.result(a1, startWeb, plan.StatusSucceeded, ""),
		h.finished(a1, plan.OutcomeSucceeded, outcome(createWeb, plan.OpSucceeded, ""), outcome(startWeb, plan.OpSucceeded, "")),
		h.gaps("alpha", argsGap),
		e2,
		h.planned(a2, plan.Plan{Resources: declared, Operations: []plan.Operation{configureDB}, Findings: []plan.Finding{diskAnomaly}}),
		h.rejected(b2, plan.RejectObserve, diag.Diagnostic{Severity: diag.Error, Message: "node pve2: 596 connection timed out"}),
		h.result(a2, configureDB, plan.StatusStarted, ""),
		h.gaps("beta"),
		h.result(a2, configureDB, plan.StatusSucceeded, ""),
		h.finished(a2, plan.OutcomeSucceeded, outcome(configureDB, plan.OpSucceeded, "")),
	}
	out := map[report.Stream][]report.Event{}
	for _, e := range evs {
		out[e.Stream()] = append(out[e.Stream()], e)
	}
	return out
}

// interleave merges the streams in a random order that keeps each stream's order and causality: a plan
// after the repository event it answers, a result after its plan.
func interleave(streams map[report.Stream][]report.Event, rng *rand.Rand) []report.Event {
	next := map[report.Stream]int{}
	seenEvents, seenRuns := map[string]bool{}, map[string]bool{}
	var out []report.Event
	for {
		var ready []report.Stream
		for _, s := range report.Streams {
			i := next[s]
			if i >= len(streams[s]) {
				continue
			}
			e := streams[s][i]
			switch {
			case e.Planned != nil && !seenEvents[e.Planned.EventID]:
			case e.Rejected != nil && !seenEvents[e.Rejected.EventID]:
			case e.Result != nil && !seenRuns[e.Result.RunID]:
			default:
				ready = append(ready, s)
			}
		}
		if len(ready) == 0 {
			return out
		}
		s := ready[rng.IntN(len(ready))]
		e := streams[s][next[s]]
		next[s]++
		if e.Repo != nil {
			seenEvents[e.Repo.EventID] = true
		}
		if e.Planned != nil {
			seenRuns[e.Planned.RunID] = true
		}
		out = append(out, e)
	}
}

func TestFleetReportsDoNotDependOnHowTheStreamsInterleave(t *testing.T) {
	streams := twoClusterHistory()
	total := 0
	for _, evs := range streams {
		total += len(evs)
	}
	var first []report.Report
	for seed := range uint64(50) {
		order := interleave(streams, rand.New(rand.NewPCG(seed, 7)))
		if len(order) != total {
			t.Fatalf("interleaving %d has %d events, want %d", seed, len(order), total)
		}
		f := report.NewFleet()
		for _, e := range order {
			f.Apply(e)
		}
		var reports []report.Report
		for _, s := range f.Statuses() {
			reports = append(reports, s.Report)
		}
		if first == nil {
			first = reports
			continue
		}
		if diff := cmp.Diff(first, reports); diff != "" {
			t.Fatalf("interleaving %d gives another report (-first +this):\n%s", seed, diff)
		}
	}
	if len(first) != 2 || first[0].Phase != report.PhaseConverged || first[1].Phase != report.PhaseRejected {
		t.Errorf("final phases: %+v", first)
	}
	if first[1].LastCommitSeen != "c2" || first[1].Counters.ActionsErr != 1 {
		t.Errorf("beta = %+v", first[1])
	}
	if len(first[1].Refused) != 1 || first[1].Refused[0].RunID != "made-up-run" || len(first[0].Refused) != 0 {
		t.Errorf("refused operations: alpha %+v, beta %+v", first[0].Refused, first[1].Refused)
	}
}

// An operation an executor refused shows in its cluster's report, whatever run it claims, without changing
// the phase or any resource; the report keeps the latest MaxRefused, counts them all, and shows what the
// operation claimed as short printable text only.
func TestRefusedOperationsAreKeptLatestFirstCappedAndPrintable(t *testing.T) {
	h := newHistory()
	e := h.repo("c1", event.TriggerWebhook)
	r := runInfo("alpha", "c1", "run-1", e)
	s := fold("alpha", e, h.planned(r, plan.Plan{Resources: declared}))
	before := s
	forged := h.refused("alpha", "pve1", "run-\x1b[31mred\x1b[0m\nsecond line", "op-1", "unsigned")
	forged.Refused.Ref = strings.Repeat("x", 1000)
	s, _ = report.Apply(s, forged)
	if s.Phase != before.Phase || !reflect.DeepEqual(s.Resources, before.Resources) || s.Revision != before.Revision+1 {
		t.Errorf("a refusal changed the phase or resources, or not the revision: %s -> %s", before.Phase, s.Phase)
	}
	got := s.Refused[0]
	if got.RunID != "run-?[31mred?[0m second line" || len([]rune(got.Ref)) != 129 || got.Node != "pve1" || got.Reason != "unsigned" {
		t.Errorf("refused operation %+v: want its run id on one printable line and its ref clipped", got)
	}
	for i := range report.MaxRefused + 5 {
		s, _ = report.Apply(s, h.refused("alpha", "pve2", "run-x", fmt.Sprintf("op-%04d", i), "bad_signature"))
	}
	if len(s.Refused) != report.MaxRefused || s.Counters.Refused != report.MaxRefused+6 {
		t.Fatalf("%d kept, %d counted; want %d kept, %d counted", len(s.Refused), s.Counters.Refused, report.MaxRefused, report.MaxRefused+6)
	}
	if first, last := s.Refused[0].OpID, s.Refused[len(s.Refused)-1].OpID; first != "op-0005" || last != fmt.Sprintf("op-%04d", report.MaxRefused+4) {
		t.Errorf("kept %s..%s, want the latest, oldest first", first, last)
	}
}

func TestFleetResumesWithoutFoldingAnEventTwice(t *testing.T) {
	streams := twoClusterHistory()
	var all []report.Event
	for _, s := range report.Streams {
		all = append(all, streams[s]...)
	}
	whole := report.NewFleet()
	for _, e := range all {
		whole.Apply(e)
	}
	// Stop halfway, keep the statuses (as the KV bucket does), start again from ResumeFrom.
	half := report.NewFleet()
	for _, e := range all[:len(all)/2] {
		half.Apply(e)
	}
	resumed := report.NewFleet(half.Statuses()...)
	for _, s := range report.Streams {
		from := resumed.ResumeFrom(s)
		for _, e := range streams[s] {
			if s == report.StreamRepo || e.Seq >= from {
				resumed.Apply(e)
			}
		}
	}
	for i, s := range whole.Statuses() {
		got := resumed.Statuses()[i]
		if diff := cmp.Diff(s.Report, got.Report); diff != "" {
			t.Errorf("%s after a restart (-whole +resumed):\n%s", s.Cluster, diff)
		}
	}
	if got := report.NewFleet().ResumeFrom(report.StreamPlans); got != 1 {
		t.Errorf("ResumeFrom on an empty fleet = %d, want 1", got)
	}
}

func TestFleetStartsANewClusterFromTheLatestRepositoryEvent(t *testing.T) {
	h := newHistory()
	e1 := h.repo("c1", event.TriggerWebhook)
	e2 := h.repo("c2", event.TriggerManual, "gamma")
	e3 := h.repo("c3", event.TriggerWebhook, "delta")
	f := report.NewFleet()
	for _, e := range []report.Event{e1, e2, e3} {
		f.Apply(e)
	}
	f.Apply(h.gaps("gamma"))
	f.Apply(h.gaps("epsilon"))
	gamma, _ := f.Status("gamma")
	eps, _ := f.Status("epsilon")
	if gamma.LastCommitSeen != "c2" || gamma.Phase != report.PhasePlanning {
		t.Errorf("gamma: seen %q phase %s, want c2 planning", gamma.LastCommitSeen, gamma.Phase)
	}
	if eps.LastCommitSeen != "c1" {
		t.Errorf("epsilon: seen %q, want c1", eps.LastCommitSeen)
	}
}

func TestFleetReportsCompletedReconcilesOnce(t *testing.T) {
	h := newHistory()
	e := h.repo("c1", event.TriggerWebhook)
	r := runInfo("alpha", "c1", "run-1", e)
	empty := runInfo("alpha", "c1", "run-2", e)
	dry := runInfo("alpha", "c1", "", e)
	dry.DryRun = true
	planned := h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{createWeb}})
	fin := h.finished(r, plan.OutcomeFailed, outcome(createWeb, plan.OpFailed, "x"))
	events := []report.Event{e, planned, fin, fin,
		h.planned(empty, plan.Plan{Resources: declared}),
		h.finished(empty, plan.OutcomeSucceeded),
		h.planned(dry, plan.Plan{Resources: declared, Operations: []plan.Operation{configureDB}}),
		h.rejected(dry, plan.RejectSecrets),
	}
	f := report.NewFleet()
	var results []string
	for _, ev := range events {
		for _, c := range f.Apply(ev) {
			if c.Completed != nil {
				results = append(results, fmt.Sprintf("%s:%d", c.Completed.Result, len(c.Completed.Operations)))
			}
		}
	}
	want := []string{"failed:1", "ok:0", "dry_run:0", "secrets:0"}
	if diff := cmp.Diff(want, results); diff != "" {
		t.Errorf("completions (-want +got):\n%s", diff)
	}
}

// The notifier's delivery health of a cluster leaves in the report only the providers whose last delivery
// failed, sorted and clipped, replaces what the previous health said, and changes neither phase nor
// resources.
func TestNotificationHealthKeepsOnlyFailingProvidersAndChangesNoPhase(t *testing.T) {
	s := report.New("alpha")
	before := s.Phase
	health := func(seq uint64, ds ...report.NotificationDelivery) report.Event {
		return report.Event{Seq: seq, Notify: &report.NotificationHealth{Cluster: "alpha", Providers: ds}}
	}
	ok := report.NotificationDelivery{Provider: "audit", Type: "webhook", Event: "run-failed"}
	chat := report.NotificationDelivery{Provider: "chat", Type: "slack", Failing: true, Event: "run-failed", Message: "502\nBad Gateway"}
	pager := report.NotificationDelivery{Provider: "pager", Type: "alertmanager", Failing: true, Event: "plan-rejected", Message: "refused"}
	s, folded := report.Apply(s, health(1, pager, ok, chat))
	if !folded || s.Phase != before || len(s.Resources) != 0 {
		t.Fatalf("folded %v, phase %s, resources %v", folded, s.Phase, s.Resources)
	}
	want := []report.NotificationDelivery{chat, pager}
	want[0].Message = "502 Bad Gateway"
	if diff := cmp.Diff(want, s.FailingNotifications); diff != "" {
		t.Errorf("failing notifications (-want +got):\n%s", diff)
	}
	chat.Failing = false
	s, _ = report.Apply(s, health(2, ok, chat, pager))
	if diff := cmp.Diff([]report.NotificationDelivery{pager}, s.FailingNotifications); diff != "" {
		t.Errorf("after chat recovered (-want +got):\n%s", diff)
	}
	if _, again := report.Apply(s, health(2, chat)); again {
		t.Error("a health already folded was folded again")
	}
}

// After a rejection for a cause that stays, the drift ticks of the same commit, which the planners skip,
// leave the rejection as the news; an operator's request for it, or a rejection that may pass, is awaited
// as usual.
func TestAPermanentRejectionStaysTheNewsThroughTheTicksThePlannersSkip(t *testing.T) {
	h := newHistory()
	e := h.repo("c1", event.TriggerWebhook)
	r := runInfo("alpha", "c1", "run-1", e)
	rejected := h.rejected(r, plan.RejectObserve, diag.Diagnostic{Severity: diag.Error,
		Message: "pve inventory read failed: node pve1: GET /version: 401 authentication failure"})
	s := fold("alpha", e, rejected)
	if s.Report.Phase != report.PhaseRejected || !strings.HasSuffix(s.Report.Reason, report.WaitsForChange) {
		t.Fatalf("after the rejection: %s, %q", s.Report.Phase, s.Report.Reason)
	}
	for range 3 {
		s, _ = report.Apply(s, h.repo("c1", event.TriggerDrift))
	}
	if s.Report.Phase != report.PhaseRejected || !strings.Contains(s.Report.Reason, "401 authentication failure") {
		t.Fatalf("after drift ticks of the rejected commit: %s, %q", s.Report.Phase, s.Report.Reason)
	}
	req := h.repo("c1", event.TriggerManual)
	req.Repo.RequestID, req.Repo.EventID = "req-1", event.ManualEventID(req.Repo.Repo, "c1", "req-1")
	if asked, _ := report.Apply(s, req); asked.Report.Phase != report.PhasePlanning {
		t.Fatalf("after an operator's request: %s, want %s", asked.Report.Phase, report.PhasePlanning)
	}
	if next, _ := report.Apply(s, h.repo("c2", event.TriggerWebhook)); next.Report.Phase != report.PhasePlanning {
		t.Fatalf("after a new commit: %s, want %s", next.Report.Phase, report.PhasePlanning)
	}

	transient := h.rejected(r, plan.RejectObserve)
	transient.Rejected.Rejection.Transient = true
	s, _ = report.Apply(s, transient)
	if s, _ = report.Apply(s, h.repo("c1", event.TriggerDrift)); s.Report.Phase != report.PhasePlanning {
		t.Fatalf("a drift tick after a rejection that may pass: %s, want %s", s.Report.Phase, report.PhasePlanning)
	}
}

// An operator's rollback leaves the cluster drifted, not converged: the rolled-back guest is suspended, the
// reason names it and how the suspension ends, and the last applied commit stays the one applied before. The
// next plan, which reports the guest suspended and does nothing, keeps the cluster drifted for that guest.
func TestAnOperatorsRollbackLeavesTheClusterDriftedWithTheGuestSuspended(t *testing.T) {
	h := newHistory()
	e := h.repo("c1", event.TriggerWebhook)
	r := runInfo("alpha", "c1", "run-1", e)
	base := fold("alpha", e, h.planned(r, plan.Plan{Resources: declared}), h.finished(r, plan.OutcomeSucceeded))

	rollback := plan.Operation{ID: "vm-102-rollback", Node: "pve2", VMID: 102, Ref: "VM/db-01", Action: plan.ActionRollback,
		Reason: "VM/db-01: roll back to the snapshot proxops-0123456789ab taken 2026-01-02T03:04:05Z, as alice asked"}
	rb := h.repo("c2", event.TriggerManual)
	rr := runInfo("alpha", "c2", "run-2", rb)
	rr.RequestedBy = "alice"
	s := base
	for _, ev := range []report.Event{rb, h.planned(rr, plan.Plan{Resources: declared, Operations: []plan.Operation{rollback}}),
		h.result(rr, rollback, plan.StatusSucceeded, "TASK OK"),
		h.finished(rr, plan.OutcomeSucceeded, plan.OpOutcome{ID: rollback.ID, Ref: rollback.Ref, Action: rollback.Action, State: plan.OpSucceeded})} {
		s, _ = report.Apply(s, ev)
	}
	if s.Report.Phase != report.PhaseDrifted || !strings.Contains(s.Report.Reason, "rolled back by an operator and suspended from correction: VM/db-01") {
		t.Fatalf("after the rollback: %s: %s", s.Report.Phase, s.Report.Reason)
	}
	if s.Report.LastCommitApplied != "c1" || s.Report.LastAppliedBy != "" {
		t.Errorf("the rollback counts as applying %s by %q", s.Report.LastCommitApplied, s.Report.LastAppliedBy)
	}
	for _, res := range s.Report.Resources {
		if res.Ref() == "VM/db-01" && (res.State != report.StateSuspended || !strings.Contains(res.Reason, "as alice asked") || res.LastAction != plan.ActionRollback) {
			t.Errorf("VM/db-01 after the rollback: %+v", res)
		}
	}

	d := h.repo("c2", event.TriggerDrift)
	dr := runInfo("alpha", "c2", "run-3", d)
	suspended := plan.Finding{Kind: plan.FindingSuspended, Ref: "VM/db-01", Node: "pve2", VMID: 102,
		Message: "suspended from correction: rolled back to proxops-0123456789ab by alice; drift from git, not corrected: memory: 2048 → 4096"}
	for _, ev := range []report.Event{d, h.planned(dr, plan.Plan{Resources: declared, Findings: []plan.Finding{suspended}})} {
		s, _ = report.Apply(s, ev)
	}
	if s.Report.Phase != report.PhaseDrifted || !strings.Contains(s.Report.Reason, "VM/db-01") || s.Report.LastCommitApplied != "c2" {
		t.Fatalf("after the drift plan: %s: %s (applied %s)", s.Report.Phase, s.Report.Reason, s.Report.LastCommitApplied)
	}
}
