package render_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/report"
)

var at = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func alphaFailed() report.ClusterStatus {
	return report.ClusterStatus{
		Report: report.Report{
			Cluster: "alpha", Phase: report.PhaseFailed, Reason: "1 operation failed; the next plan retries",
			LastCommitSeen: "c2", LastCommitApplied: "c1", PlanID: "plan-7",
			Resources: []report.Resource{
				{Kind: "ISO", Name: "debian-12", Node: "pve1", State: report.StateConverged, LastAction: plan.ActionDownload},
				{Kind: "VM", Name: "db-01", Node: "pve2", VMID: 102, State: report.StateAnomalous, Reason: "disk scsi0 would shrink from 40G to 32G; not written"},
				{Kind: "VM", Name: "legacy", Node: "pve1", VMID: 300, State: report.StateSkipped, Reason: "live object without proxops tag; never touched"},
				{Kind: "VM", Name: "web-01", Node: "pve1", VMID: 101, State: report.StateFailed, LastAction: plan.ActionCreate,
					LastError: "storage 'fast' does not exist\n(task log: 3 lines)", Reason: "VM/web-01: not on PVE; will create"},
			},
			Findings: []plan.Finding{
				{Kind: plan.FindingAnomaly, Ref: "VM/db-01", Node: "pve2", VMID: 102, Field: "spec.disks[0].size", Message: "disk scsi0 would shrink from 40G to 32G; not written"},
				{Kind: plan.FindingSkipped, Ref: "VM/legacy", Node: "pve1", VMID: 300, Message: "live object without proxops tag; never touched"},
			},
			Gaps:     []inventory.Gap{{Setting: inventory.Setting{Kind: "VM", Name: "db-01", Node: "pve2", VMID: 102, Key: "args", Value: "-cpu host"}, Note: "not modelled", Managed: true}},
			Counters: report.Counters{Objects: 4, ActionsOK: 1, ActionsErr: 1, ActionsSkipped: 1, Skipped: 1, Anomalies: 1, Gaps: 1, Plans: 2},
		},
		Revision: 9,
		Timing: report.Timing{UpdatedAt: at, LastPlanAt: at.Add(-time.Minute), LastSuccessAt: at.Add(-time.Hour), LastEventAt: at,
			LastTriggerAt: at.Add(-2 * time.Minute),
			Resources: []report.ResourceTiming{
				{Kind: "ISO", Name: "debian-12", UpdatedAt: at.Add(-time.Hour), LastConvergedAt: at.Add(-time.Hour)},
				{Kind: "VM", Name: "web-01", UpdatedAt: at},
			}},
	}
}

func betaRejected() report.ClusterStatus {
	return report.ClusterStatus{
		Report: report.Report{
			Cluster: "beta", Phase: report.PhaseRejected, Reason: "parse_error: 1 error; nothing was applied", LastCommitSeen: "c2",
			Diagnostics: diag.List{{Severity: diag.Error, File: "vm/beta/app.yaml", Line: 7, Column: 3, Ref: "VM/app", Field: "spec.memory", Message: `invalid size "lots"`}},
			Counters:    report.Counters{Rejections: 1},
		},
		Revision: 2,
		Timing:   report.Timing{UpdatedAt: at, LastPlanAt: at, LastTriggerAt: at.Add(-2 * time.Minute)},
	}
}

// alphaRefused is alpha after its executors refused two forged operations (and three earlier ones the
// report no longer keeps).
func alphaRefused() report.ClusterStatus {
	s := alphaFailed()
	s.Refused = []report.RefusedOperation{
		{Cluster: "alpha", Node: "pve1", RunID: "made-up-run", OpID: "op-666", Action: plan.ActionConfigure, Ref: "VM/legacy",
			VMID: 300, Reason: "unsigned", Message: "refused: the operation carries no signature"},
		{Cluster: "alpha", Node: "pve2", RunID: "run-9", OpID: "op-1", Reason: "unknown_key",
			Message: "refused: signed by key UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NFCNF4, which\nthis executor does not trust"},
	}
	s.Counters.Refused = 5
	return s
}

// alphaNotificationFailing is a converged-looking alpha whose Slack provider cannot be reached.
func alphaNotificationFailing() report.ClusterStatus {
	s := alphaFailed()
	s.FailingNotifications = []report.NotificationDelivery{{Provider: "chat", Type: "slack", Failing: true, Event: "run-failed",
		DeliveryID: "run-1.finished.run-failed", Message: "attempt 3 failed: POST https://hooks.slack.com/…: 502 Bad Gateway"}}
	return s
}

// A cluster's document lists the providers whose last delivery about it failed.
func TestClusterJSONListsFailingNotifications(t *testing.T) {
	var buf bytes.Buffer
	if err := render.ClusterJSON(&buf, alphaNotificationFailing()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"failing_notifications": [
      {
        "provider": "chat",
        "type": "slack",
        "event": "run-failed",
        "delivery_id": "run-1.finished.run-failed",
        "message": "attempt 3 failed: POST https://hooks.slack.com/…: 502 Bad Gateway"
      }
    ]`)) {
		t.Errorf("no failing notification in:\n%s", buf.Bytes())
	}
}

// staleSource is a repository whose last fetch failed; otherSource one that reads fine.
func staleSource() event.SourceHealth {
	return event.SourceHealth{Repo: "https://git.example.com/ops/infra.git", Branch: "main", Stale: true, Commit: "c1",
		LastError: "fetch: repository not found\n(remote said 404)", LastSuccess: at.Add(-time.Hour), Failures: 4, At: at}
}

func otherSource() event.SourceHealth {
	return event.SourceHealth{Repo: "/srv/apps", Branch: "prod", Commit: "d9", LastSuccess: at, At: at}
}

func TestStaleDesiredStateIsFlaggedUntilTheRepositoryIsReadAgain(t *testing.T) {
	clusters := []report.ClusterStatus{alphaFailed()}
	for _, tt := range []struct {
		name    string
		sources []event.SourceHealth
		stale   bool
	}{
		{"unknown", nil, false},
		{"stale", []event.SourceHealth{otherSource(), staleSource()}, true},
		{"read again", []event.SourceHealth{otherSource(), {Repo: staleSource().Repo, Branch: "main", Commit: "c3", At: at}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			view := render.StatusView{Clusters: clusters, Sources: tt.sources}
			doc := render.NewStatusDocument(view)
			if doc.LastCycle == nil || doc.LastCycle.DesiredStale != tt.stale || view.DesiredStale() != tt.stale {
				t.Errorf("last_cycle %+v, DesiredStale() = %v; want desired_stale %v", doc.LastCycle, view.DesiredStale(), tt.stale)
			}
			if len(doc.Sources) != len(tt.sources) {
				t.Fatalf("sources %+v, want %d", doc.Sources, len(tt.sources))
			}
			if len(doc.Sources) == 2 && doc.Sources[0].Repo != "/srv/apps" {
				t.Errorf("sources not sorted by repository: %+v", doc.Sources)
			}
			var buf bytes.Buffer
			if err := render.StatusText(&buf, view); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(buf.String(), "DESIRED STATE IS STALE"); got != tt.stale {
				t.Errorf("text shows stale = %v, want %v:\n%s", got, tt.stale, buf.String())
			}
			raw, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(string(raw), `"sources"`); got != (len(tt.sources) > 0) {
				t.Errorf("sources key present = %v with %d sources", got, len(tt.sources))
			}
		})
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "status", name)
	if os.Getenv("PROXOPS_UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with PROXOPS_UPDATE_GOLDEN=1 to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

func TestStatusTextKeepsThePredecessorsLayoutAndAddsPhasesFindingsAndGaps(t *testing.T) {
	tests := []struct {
		name string
		view render.StatusView
	}{
		{"failed-and-rejected.txt", render.StatusView{Clusters: []report.ClusterStatus{betaRejected(), alphaFailed()}}},
		{"failed.txt", render.StatusView{Clusters: []report.ClusterStatus{alphaFailed()}}},
		{"nothing-yet.txt", render.StatusView{}},
		{"stale.txt", render.StatusView{Clusters: []report.ClusterStatus{alphaFailed()}, Sources: []event.SourceHealth{staleSource(), otherSource()}}},
		{"stale-nothing-yet.txt", render.StatusView{Sources: []event.SourceHealth{staleSource()}}},
		{"refused.txt", render.StatusView{Clusters: []report.ClusterStatus{alphaRefused(), betaRejected()}}},
		{"notification-failing.txt", render.StatusView{Clusters: []report.ClusterStatus{alphaNotificationFailing()}}},
		{"gaps-only.txt", render.StatusView{Clusters: []report.ClusterStatus{{Report: report.Report{Cluster: "gamma", Phase: report.PhaseUnknown,
			Gaps: alphaFailed().Gaps, Counters: report.Counters{Gaps: 1}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := render.StatusText(&buf, tt.view); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name, buf.Bytes())
		})
	}
}

func TestStatusTextSummaryNamesTheClustersThatNeedAPerson(t *testing.T) {
	conv := func(name string) report.ClusterStatus {
		return report.ClusterStatus{Report: report.Report{Cluster: name, Phase: report.PhaseConverged, LastCommitSeen: "c1", Counters: report.Counters{Plans: 1}}}
	}
	held := conv("h")
	held.Phase = report.PhaseHeld
	applying := conv("a")
	applying.Phase = report.PhaseApplying
	tests := []struct {
		clusters []report.ClusterStatus
		want     string
	}{
		{[]report.ClusterStatus{conv("x"), conv("y")}, "last cycle: converged (commit c1)\n"},
		{[]report.ClusterStatus{conv("x"), applying}, "last cycle: applying (a) (commit c1)\n"},
		{[]report.ClusterStatus{applying, held, conv("x")}, "last cycle: held (h) (commit c1)\n"},
		{[]report.ClusterStatus{alphaFailed()}, "last cycle: incomplete (1 failed action) (commit c2)\n"},
		{[]report.ClusterStatus{alphaFailed(), betaRejected()}, "last cycle: ABORTED (beta: parse_error: 1 error; nothing was applied) (commit c2)\n"},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		if err := render.StatusText(&buf, render.StatusView{Clusters: tt.clusters}); err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(buf.String(), "\n")
		if first+"\n" != tt.want {
			t.Errorf("first line = %q, want %q", first, tt.want)
		}
	}
}

// A cluster's document lists the operations its executors refused, with the node, what each claimed and
// the refusal's reason, and counts them all.
func TestClusterJSONListsRefusedOperations(t *testing.T) {
	var buf bytes.Buffer
	if err := render.ClusterJSON(&buf, alphaRefused()); err != nil {
		t.Fatal(err)
	}
	golden(t, "refused.json", buf.Bytes())
}

func TestStatusJSONIsASupersetOfThePredecessorsShape(t *testing.T) {
	var buf bytes.Buffer
	view := render.StatusView{ProcessStart: at.Add(-24 * time.Hour), Clusters: []report.ClusterStatus{betaRejected(), alphaFailed()}}
	if err := render.StatusJSON(&buf, view); err != nil {
		t.Fatal(err)
	}
	golden(t, "status.json", buf.Bytes())

	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"process_start", "last_cycle", "objects", "clusters"} {
		if _, ok := doc[key]; !ok {
			t.Errorf("no %q", key)
		}
	}
	lc := doc["last_cycle"].(map[string]any)
	for _, key := range []string{"commit", "started_at", "finished_at", "objects", "actions_ok", "actions_error", "pruned",
		"prune_deferred", "skipped", "anomalies", "desired_stale", "read_only", "aborted", "abort_reason"} {
		if _, ok := lc[key]; !ok {
			t.Errorf("last_cycle has no %q", key)
		}
	}
	obj := doc["objects"].([]any)[3].(map[string]any)
	for _, key := range []string{"kind", "name", "cluster", "node", "id", "state", "last_action", "last_error", "last_converged_at", "updated_at"} {
		if _, ok := obj[key]; !ok {
			t.Errorf("object has no %q: %v", key, obj)
		}
	}
}

func TestTheDeterministicPartHoldsNoTime(t *testing.T) {
	a := alphaFailed()
	b := alphaFailed()
	b.Revision = 99
	b.Timing = report.Timing{UpdatedAt: at.Add(time.Hour)}
	ja, _ := json.Marshal(render.NewReportDocument(a.Report))
	jb, _ := json.Marshal(render.NewReportDocument(b.Report))
	if !bytes.Equal(ja, jb) {
		t.Errorf("reports with other timing differ:\n%s\n%s", ja, jb)
	}
}
