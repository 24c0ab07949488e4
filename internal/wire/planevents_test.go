package wire_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proxops/proxops/internal/diag"
	inventoryv1 "github.com/proxops/proxops/internal/gen/proxops/inventory/v1"
	planv1 "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

func sampleRunInfo() plan.RunInfo {
	return plan.RunInfo{Cluster: "lab", PlanID: "plan-abc", RunID: "run-1", Repo: "https://git.example.invalid/ops.git",
		Commit: "c0ffee", Tree: "7ree", EventID: "repo@c0ffee", RequestID: "req-1",
		RequestIDs: []string{"req-1", "req-2"}}
}

func TestPlannedRoundTrips(t *testing.T) {
	info := sampleRunInfo()
	info.DryRun, info.Suspended = true, true
	in := plan.Planned{RunInfo: info, Plan: plan.Plan{
		ID: "plan-abc", Cluster: "lab", Operations: []plan.Operation{sampleOperation()},
		Findings: []plan.Finding{{Kind: plan.FindingMisplaced, Ref: "VM/web-01", Node: "pve2", VMID: 101, Message: "found on pve2"},
			{Kind: plan.FindingAnomaly, Ref: "VM/db", Field: "scsi1", Message: "live-only disk slot"}},
		Held: true, HeldReason: "prunes 3 of 4 owned VMs", HeldPrunes: []string{"VM/a", "VM/b", "VM/c"},
		Resources: []string{"VM/db", "VM/web-01"},
		Record: []plan.Record{{Owned: plan.Owned{VMID: 100, Ref: "VM/db", Node: "pve1", Fingerprint: "uuid=0a"}},
			{Owned: plan.Owned{VMID: 101, Ref: "VM/web-01", Node: "pve2"}, After: "vm-101-create"}},
	}}
	m, err := wire.PlannedToProto(in)
	if err != nil {
		t.Fatal(err)
	}
	var back planv1.Plan
	roundTrip(t, m, &back)
	out, err := wire.PlannedFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("plan round trip (-in +out):\n%s", diff)
	}
}

func TestRejectedRoundTrips(t *testing.T) {
	in := plan.Rejected{RunInfo: sampleRunInfo(), Rejection: plan.Rejection{Cluster: "lab", Reason: plan.RejectParse,
		Diagnostics: diag.List{{Severity: diag.Error, File: "vm/lab/a.yaml", Line: 4, Column: 3, Ref: "VM/a", Field: "spec.memory", Message: "not a whole number of MiB"}},
		Transient:   true, RetryAt: time.Date(2026, 12, 2, 10, 0, 1, 0, time.UTC)}}
	in.PlanID = "" // a rejection has no plan
	m, err := wire.RejectedToProto(in)
	if err != nil {
		t.Fatal(err)
	}
	var back planv1.PlanRejected
	roundTrip(t, m, &back)
	out, err := wire.RejectedFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("rejection round trip (-in +out):\n%s", diff)
	}
}

func TestHeldAndConfirmationRoundTrip(t *testing.T) {
	held := plan.Held{RunInfo: plan.RunInfo{Cluster: "lab", PlanID: "p", RunID: "r", Commit: "c"}, Reason: "mass prune",
		Prunes: []string{"VM/a", "VM/b", "VM/c"}}
	var hb planv1.PlanHeld
	roundTrip(t, wire.HeldToProto(held), &hb)
	gotHeld, err := wire.HeldFromProto(&hb)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(held, gotHeld); diff != "" {
		t.Fatalf("held round trip (-in +out):\n%s", diff)
	}

	conf := plan.Confirmation{Cluster: "lab", PlanID: "p", ConfirmedBy: "cli:alice"}
	var cb planv1.PlanConfirmation
	roundTrip(t, wire.ConfirmationToProto(conf), &cb)
	gotConf, err := wire.ConfirmationFromProto(&cb)
	if err != nil || gotConf != conf {
		t.Fatalf("confirmation round trip = %+v, %v", gotConf, err)
	}
	if _, err := wire.ConfirmationFromProto(&planv1.PlanConfirmation{Cluster: "lab"}); err == nil {
		t.Fatal("a confirmation without a plan id was accepted")
	}
}

func TestFinishedRoundTripsAndCountsSuperseded(t *testing.T) {
	in := plan.FinishedRun{RunInfo: plan.RunInfo{Cluster: "lab", PlanID: "p", RunID: "r", Commit: "c", EventID: "e", RequestID: "q",
		RequestIDs: []string{"q", "q2"}},
		Finished: plan.Finished{Outcome: plan.OutcomeSuperseded, Succeeded: 1, Failed: 0, Skipped: 1, Superseded: 1,
			Operations: []plan.OpOutcome{
				{ID: "a", Ref: "VM/a", Action: plan.ActionCreate, State: plan.OpSucceeded},
				{ID: "b", Ref: "VM/a", Action: plan.ActionStart, State: plan.OpSkipped, Message: "skipped: VM/a create did not succeed"},
				{ID: "c", Ref: "VM/b", Action: plan.ActionCreate, State: plan.OpSuperseded, Message: "superseded by a newer commit"},
			}},
		At: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	m, err := wire.FinishedToProto(in)
	if err != nil {
		t.Fatal(err)
	}
	var back planv1.PlanFinished
	roundTrip(t, m, &back)
	out, err := wire.FinishedFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	want := in
	want.Operations = append([]plan.OpOutcome(nil), in.Operations...)
	want.Operations[2].State = plan.OpSkipped // superseded travels as skipped, counted in Superseded
	if diff := cmp.Diff(want, out); diff != "" {
		t.Fatalf("finished round trip (-want +out):\n%s", diff)
	}
}

func TestPlanEventsRefuseUnknownEnums(t *testing.T) {
	if _, err := wire.PlannedFromProto(&planv1.Plan{Findings: []*planv1.Finding{{Kind: 99}}}); err == nil {
		t.Error("an unknown finding kind was accepted")
	}
	if _, err := wire.FinishedFromProto(&planv1.PlanFinished{}); err == nil {
		t.Error("an unspecified outcome was accepted")
	}
	if _, err := wire.PlannedToProto(plan.Planned{Plan: plan.Plan{Findings: []plan.Finding{{Kind: "bogus"}}}}); err == nil {
		t.Error("an unknown domain finding kind was converted")
	}
}

func TestGapReportRoundTrips(t *testing.T) {
	in := inventory.GapReport{Cluster: "lab", Gaps: []inventory.Gap{
		{Setting: inventory.Setting{Kind: "VM", Name: "web", Node: "pve1", VMID: 100, Key: "args", Value: "-cpu host"}, Note: "not modelled", Managed: true},
		{Setting: inventory.Setting{Kind: "LXC", Name: "ct-101", Node: "pve2", VMID: 101, Key: "lxc.apparmor.profile", Value: "unconfined"}},
	}}
	var back inventoryv1.GapReport
	roundTrip(t, wire.GapReportToProto(in), &back)
	out, err := wire.GapReportFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Fatalf("gap report round trip (-in +out):\n%s", diff)
	}
}
