package wire_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proxops/proxops/internal/diag"
	statusv1 "github.com/proxops/proxops/internal/gen/proxops/status/v1"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/report"
	"github.com/proxops/proxops/internal/wire"
)

func sampleClusterStatus() report.ClusterStatus {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return report.ClusterStatus{
		Report: report.Report{
			Cluster: "lab", Phase: report.PhaseFailed, Reason: "1 operation failed", LastCommitSeen: "c2", LastCommitApplied: "c1",
			PlanID: "plan-abc",
			Resources: []report.Resource{
				{Kind: "LXC", Name: "old", Node: "pve2", VMID: 190, State: report.StateOrphan, Reason: "absent in git", PruneReason: "absent in git"},
				{Kind: "VM", Name: "web-01", Node: "pve1", VMID: 101, State: report.StateFailed, LastAction: plan.ActionCreate,
					LastError: "storage 'fast' does not exist", Reason: "not on PVE; will create"},
			},
			Findings:    []plan.Finding{{Kind: plan.FindingAnomaly, Ref: "VM/db", Node: "pve2", VMID: 102, Field: "scsi1", Message: "live-only disk slot"}},
			HeldPrunes:  []string{"LXC/old"},
			Gaps:        []inventory.Gap{{Setting: inventory.Setting{Kind: "VM", Name: "db", Node: "pve2", VMID: 102, Key: "args", Value: "-cpu host"}, Note: "not modelled", Managed: true}},
			Diagnostics: diag.List{{Severity: diag.Warning, File: "vm/lab/a.yaml", Line: 3, Column: 1, Message: "unknown field"}},
			Refused: []report.RefusedOperation{
				{Cluster: "lab", Node: "pve1", RunID: "made-up", OpID: "op-9", Action: plan.ActionConfigure, Ref: "VM/db",
					VMID: 102, Reason: "unsigned", Message: "refused: the operation carries no signature"},
				{Cluster: "lab", Node: "pve2", RunID: "run-1", OpID: "op-1", Reason: "bad_signature", Message: "refused"},
			},
			Counters: report.Counters{Objects: 2, ActionsOK: 3, ActionsErr: 1, ActionsSkipped: 2, Pruned: 1, PruneDeferred: 1, Skipped: 4, Anomalies: 1, Gaps: 1, Drifted: 1, Plans: 9, Rejections: 2, Refused: 5},
		},
		Revision: 17,
		Tracking: report.Tracking{RepoSeq: 4, PlansSeq: 30, ResultsSeq: 99, GapsSeq: 3, DLQSeq: 12, RunID: "run-7", RunOpen: true,
			RunCompleted: false, NotApplied: false, SeenEventID: "repo@c2", AnsweredEventID: "repo@c1",
			SettledPhase: report.PhaseFailed, SettledReason: "1 operation failed",
			Operations: []report.OpTrack{{ID: "op-1", Ref: "VM/web-01", Action: plan.ActionCreate, Node: "pve1", VMID: 101,
				State: plan.OpFailed, Message: "storage 'fast' does not exist", Reason: "not on PVE; will create"}}},
		Timing: report.Timing{UpdatedAt: at, LastPlanAt: at.Add(-time.Minute), LastSuccessAt: at.Add(-time.Hour), LastEventAt: at,
			LastTriggerAt: at.Add(-2 * time.Minute),
			Resources:     []report.ResourceTiming{{Kind: "VM", Name: "web-01", UpdatedAt: at, LastConvergedAt: at.Add(-time.Hour)}}},
	}
}

func TestClusterStatusRoundTrips(t *testing.T) {
	in := sampleClusterStatus()
	m, err := wire.ClusterStatusToProto(in)
	if err != nil {
		t.Fatal(err)
	}
	var back statusv1.ClusterStatus
	roundTrip(t, m, &back)
	out, err := wire.ClusterStatusFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("status round trip (-in +out):\n%s", diff)
	}
	fresh := report.New("empty")
	m, err = wire.ClusterStatusToProto(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := wire.ClusterStatusFromProto(m); err != nil || out.Phase != report.PhaseUnknown {
		t.Fatalf("a new cluster's status: %v, phase %q", err, out.Phase)
	}
}

func TestClusterStatusRefusesUnknownStatesAndPhases(t *testing.T) {
	bad := sampleClusterStatus()
	bad.Resources[0].State = "sleeping"
	if _, err := wire.ClusterStatusToProto(bad); err == nil || !strings.Contains(err.Error(), `unknown value "sleeping"`) {
		t.Errorf("unknown resource state: err = %v", err)
	}
	m, err := wire.ClusterStatusToProto(sampleClusterStatus())
	if err != nil {
		t.Fatal(err)
	}
	p := m.(*statusv1.ClusterStatus)
	p.Phase = 42
	if _, err := wire.ClusterStatusFromProto(p); err == nil || !strings.Contains(err.Error(), "phase: unknown value 42") {
		t.Errorf("unknown phase: err = %v", err)
	}
	p.Phase = statusv1.Phase_PHASE_FAILED
	p.Resources[1].LastAction = "explode"
	if _, err := wire.ClusterStatusFromProto(p); err == nil || !strings.Contains(err.Error(), "last action") {
		t.Errorf("unknown last action: err = %v", err)
	}
	if _, err := wire.ClusterStatusFromProto(&statusv1.Counters{}); err == nil {
		t.Error("a Counters message was taken for a cluster status")
	}

}
