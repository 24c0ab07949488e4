package wire

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	planv1 "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
	"github.com/proxops/proxops/internal/plan"
)

var findingKindEnum = enumMap[plan.FindingKind, planv1.FindingKind]{field: "finding kind", pairs: []enumPair[plan.FindingKind, planv1.FindingKind]{
	{plan.FindingAnomaly, planv1.FindingKind_FINDING_KIND_ANOMALY},
	{plan.FindingMisplaced, planv1.FindingKind_FINDING_KIND_MISPLACED},
	{plan.FindingSkipped, planv1.FindingKind_FINDING_KIND_SKIPPED},
	{plan.FindingDeferredPrune, planv1.FindingKind_FINDING_KIND_DEFERRED_PRUNE},
	{plan.FindingPending, planv1.FindingKind_FINDING_KIND_PENDING},
	{plan.FindingSuspended, planv1.FindingKind_FINDING_KIND_SUSPENDED},
	{plan.FindingWarning, planv1.FindingKind_FINDING_KIND_WARNING},
}}

var outcomeEnum = enumMap[plan.Outcome, planv1.Outcome]{field: "outcome", pairs: []enumPair[plan.Outcome, planv1.Outcome]{
	{plan.OutcomeSucceeded, planv1.Outcome_OUTCOME_SUCCEEDED},
	{plan.OutcomeFailed, planv1.Outcome_OUTCOME_FAILED},
	{plan.OutcomeSuperseded, planv1.Outcome_OUTCOME_SUPERSEDED},
	{plan.OutcomeNotApplied, planv1.Outcome_OUTCOME_NOT_APPLIED},
}}

// opStateStatus maps a run's final operation states onto the contract's result statuses; superseded
// operations travel as skipped with their message.
var opStateEnum = enumMap[plan.OpState, planv1.ResultStatus]{field: "operation state", pairs: []enumPair[plan.OpState, planv1.ResultStatus]{
	{plan.OpSucceeded, planv1.ResultStatus_RESULT_STATUS_SUCCEEDED},
	{plan.OpFailed, planv1.ResultStatus_RESULT_STATUS_FAILED},
	{plan.OpSkipped, planv1.ResultStatus_RESULT_STATUS_SKIPPED},
	{plan.OpDispatched, planv1.ResultStatus_RESULT_STATUS_STARTED},
}}

func findingsToProto(fs []plan.Finding) ([]*planv1.Finding, error) {
	out := make([]*planv1.Finding, 0, len(fs))
	for i, f := range fs {
		k, err := findingKindEnum.toProto(f.Kind)
		if err != nil {
			return nil, fmt.Errorf("finding %d: %w", i, err)
		}
		out = append(out, &planv1.Finding{Kind: k, Ref: f.Ref, Node: f.Node, Vmid: int64(f.VMID), Field: f.Field, Message: f.Message})
	}
	return out, nil
}

func findingsFromProto(ps []*planv1.Finding) ([]plan.Finding, error) {
	var out []plan.Finding
	for i, p := range ps {
		k, err := findingKindEnum.fromProto(p.GetKind())
		if err != nil {
			return nil, fmt.Errorf("finding %d: %w", i, err)
		}
		out = append(out, plan.Finding{Kind: k, Ref: p.GetRef(), Node: p.GetNode(), VMID: int(p.GetVmid()), Field: p.GetField(), Message: p.GetMessage()})
	}
	return out, nil
}

// PlannedToProto converts a published plan into a proxops.plan.v1.Plan.
func PlannedToProto(e plan.Planned) (proto.Message, error) {
	ops := make([]*planv1.Operation, 0, len(e.Plan.Operations))
	for _, o := range e.Plan.Operations {
		p, err := operationToProto(o)
		if err != nil {
			return nil, fmt.Errorf("plan %s: operation %s: %w", e.Plan.ID, o.ID, err)
		}
		ops = append(ops, p)
	}
	findings, err := findingsToProto(e.Plan.Findings)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", e.Plan.ID, err)
	}
	var records []*planv1.OwnedRecord
	for _, r := range e.Plan.Record {
		records = append(records, &planv1.OwnedRecord{Vmid: int64(r.Owned.VMID), Ref: r.Owned.Ref, Node: r.Owned.Node,
			Fingerprint: r.Owned.Fingerprint, After: r.After, AppliedNode: r.Owned.AppliedNode})
	}
	return &planv1.Plan{
		PlanId: e.Plan.ID, RunId: e.RunID, Cluster: e.Plan.Cluster, Repo: e.Repo, Commit: e.Commit, Tree: e.Tree,
		EventId: e.EventID, RequestId: e.RequestID, Operations: ops, Findings: findings, DryRun: e.DryRun,
		Suspended: e.Suspended, Held: e.Plan.Held, HeldReason: e.Plan.HeldReason, Resources: e.Plan.Resources,
		Record: records, HeldPrunes: e.Plan.HeldPrunes, RequestIds: e.RequestIDs, RequestedBy: e.RequestedBy,
		Gaps: gapsToProto(e.Plan.Gaps), ObjectRecords: objectRecordsToProto(e.Plan.ObjectRecords),
	}, nil
}

// PlannedFromProto converts a proxops.plan.v1.Plan.
func PlannedFromProto(m proto.Message) (plan.Planned, error) {
	p, err := as[*planv1.Plan](m)
	if err != nil {
		return plan.Planned{}, fmt.Errorf("plan: %w", err)
	}
	var ops []plan.Operation
	for _, po := range p.GetOperations() {
		o, err := operationFromProto(po)
		if err != nil {
			return plan.Planned{}, fmt.Errorf("plan %s: operation %s: %w", p.GetPlanId(), po.GetOpId(), err)
		}
		ops = append(ops, o)
	}
	findings, err := findingsFromProto(p.GetFindings())
	if err != nil {
		return plan.Planned{}, fmt.Errorf("plan %s: %w", p.GetPlanId(), err)
	}
	return plan.Planned{
		RunInfo: plan.RunInfo{Cluster: p.GetCluster(), PlanID: p.GetPlanId(), RunID: p.GetRunId(), Repo: p.GetRepo(),
			Commit: p.GetCommit(), Tree: p.GetTree(), EventID: p.GetEventId(), RequestID: p.GetRequestId(),
			RequestIDs: p.GetRequestIds(), DryRun: p.GetDryRun(), Suspended: p.GetSuspended(), RequestedBy: p.GetRequestedBy()},
		Plan: plan.Plan{ID: p.GetPlanId(), Cluster: p.GetCluster(), Operations: ops, Findings: findings,
			Held: p.GetHeld(), HeldReason: p.GetHeldReason(), HeldPrunes: p.GetHeldPrunes(), Resources: p.GetResources(),
			Record: recordsFromProto(p.GetRecord()), Gaps: gapsFromProto(p.GetGaps()),
			ObjectRecords: objectRecordsFromProto(p.GetObjectRecords())},
	}, nil
}

func recordsFromProto(ps []*planv1.OwnedRecord) []plan.Record {
	var out []plan.Record
	for _, r := range ps {
		out = append(out, plan.Record{Owned: plan.Owned{VMID: int(r.GetVmid()), Ref: r.GetRef(), Node: r.GetNode(),
			Fingerprint: r.GetFingerprint(), AppliedNode: r.GetAppliedNode()}, After: r.GetAfter()})
	}
	return out
}

// DecodePlanned decodes a received proxops.plan.v1.Plan.
func DecodePlanned(ctx context.Context, decode DecodeFunc) (plan.Planned, error) {
	return decodeAs(ctx, decode, &planv1.Plan{}, func(p *planv1.Plan) (plan.Planned, error) { return PlannedFromProto(p) })
}

// RejectedToProto converts a rejection into a proxops.plan.v1.PlanRejected.
func RejectedToProto(e plan.Rejected) (proto.Message, error) {
	ds, err := diagnosticsToProto(e.Rejection.Diagnostics)
	if err != nil {
		return nil, fmt.Errorf("rejection of %s: %w", e.Rejection.Cluster, err)
	}
	p := &planv1.PlanRejected{
		Cluster: e.Rejection.Cluster, Repo: e.Repo, Commit: e.Commit, Tree: e.Tree, EventId: e.EventID,
		RequestId: e.RequestID, RunId: e.RunID, Reason: e.Rejection.Reason, Diagnostics: ds, RequestIds: e.RequestIDs,
		Transient: e.Rejection.Transient,
	}
	if !e.Rejection.RetryAt.IsZero() {
		p.RetryAt = timeToProto(e.Rejection.RetryAt)
	}
	return p, nil
}

// RejectedFromProto converts a proxops.plan.v1.PlanRejected.
func RejectedFromProto(m proto.Message) (plan.Rejected, error) {
	p, err := as[*planv1.PlanRejected](m)
	if err != nil {
		return plan.Rejected{}, fmt.Errorf("rejection: %w", err)
	}
	ds, err := diagnosticsFromProto(p.GetDiagnostics())
	if err != nil {
		return plan.Rejected{}, fmt.Errorf("rejection of %s: %w", p.GetCluster(), err)
	}
	out := plan.Rejected{
		RunInfo: plan.RunInfo{Cluster: p.GetCluster(), RunID: p.GetRunId(), Repo: p.GetRepo(), Commit: p.GetCommit(),
			Tree: p.GetTree(), EventID: p.GetEventId(), RequestID: p.GetRequestId(), RequestIDs: p.GetRequestIds()},
		Rejection: plan.Rejection{Cluster: p.GetCluster(), Reason: p.GetReason(), Diagnostics: ds, Transient: p.GetTransient()},
	}
	if p.GetRetryAt() != nil {
		if out.Rejection.RetryAt, err = timeFromProto(p.GetRetryAt()); err != nil {
			return plan.Rejected{}, fmt.Errorf("rejection of %s: retry at: %w", p.GetCluster(), err)
		}
	}
	return out, nil
}

// DecodeRejected decodes a received proxops.plan.v1.PlanRejected.
func DecodeRejected(ctx context.Context, decode DecodeFunc) (plan.Rejected, error) {
	return decodeAs(ctx, decode, &planv1.PlanRejected{}, func(p *planv1.PlanRejected) (plan.Rejected, error) { return RejectedFromProto(p) })
}

// HeldToProto converts a held run into a proxops.plan.v1.PlanHeld.
func HeldToProto(e plan.Held) proto.Message {
	return &planv1.PlanHeld{Cluster: e.Cluster, PlanId: e.PlanID, RunId: e.RunID, Reason: e.Reason, Prunes: e.Prunes, Commit: e.Commit}
}

// HeldFromProto converts a proxops.plan.v1.PlanHeld.
func HeldFromProto(m proto.Message) (plan.Held, error) {
	p, err := as[*planv1.PlanHeld](m)
	if err != nil {
		return plan.Held{}, fmt.Errorf("held plan: %w", err)
	}
	return plan.Held{
		RunInfo: plan.RunInfo{Cluster: p.GetCluster(), PlanID: p.GetPlanId(), RunID: p.GetRunId(), Commit: p.GetCommit()},
		Reason:  p.GetReason(), Prunes: p.GetPrunes(),
	}, nil
}

// DecodeHeld decodes a received proxops.plan.v1.PlanHeld.
func DecodeHeld(ctx context.Context, decode DecodeFunc) (plan.Held, error) {
	return decodeAs(ctx, decode, &planv1.PlanHeld{}, func(p *planv1.PlanHeld) (plan.Held, error) { return HeldFromProto(p) })
}

// ConfirmationToProto converts a confirmation into a proxops.plan.v1.PlanConfirmation.
func ConfirmationToProto(c plan.Confirmation) proto.Message {
	return &planv1.PlanConfirmation{Cluster: c.Cluster, PlanId: c.PlanID, ConfirmedBy: c.ConfirmedBy}
}

// ConfirmationFromProto converts a proxops.plan.v1.PlanConfirmation; a confirmation without a plan id is
// refused, since it could release nothing in particular.
func ConfirmationFromProto(m proto.Message) (plan.Confirmation, error) {
	p, err := as[*planv1.PlanConfirmation](m)
	if err != nil {
		return plan.Confirmation{}, fmt.Errorf("confirmation: %w", err)
	}
	if p.GetPlanId() == "" || p.GetCluster() == "" {
		return plan.Confirmation{}, fmt.Errorf("confirmation: cluster and plan id are required")
	}
	return plan.Confirmation{Cluster: p.GetCluster(), PlanID: p.GetPlanId(), ConfirmedBy: p.GetConfirmedBy()}, nil
}

// DecodeConfirmation decodes a received proxops.plan.v1.PlanConfirmation.
func DecodeConfirmation(ctx context.Context, decode DecodeFunc) (plan.Confirmation, error) {
	return decodeAs(ctx, decode, &planv1.PlanConfirmation{}, func(p *planv1.PlanConfirmation) (plan.Confirmation, error) {
		return ConfirmationFromProto(p)
	})
}

// FinishedToProto converts a finished run into a proxops.plan.v1.PlanFinished. Superseded operations travel
// as skipped, with their message, and are counted in superseded.
func FinishedToProto(e plan.FinishedRun) (proto.Message, error) {
	outcome, err := outcomeEnum.toProto(e.Outcome)
	if err != nil {
		return nil, fmt.Errorf("finished run %s: %w", e.RunID, err)
	}
	counts := make([]int32, 4)
	for i, n := range []int{e.Succeeded, e.Failed, e.Skipped, e.Superseded} {
		if counts[i], err = int32Of("count", n); err != nil {
			return nil, fmt.Errorf("finished run %s: %w", e.RunID, err)
		}
	}
	ops := make([]*planv1.OperationOutcome, 0, len(e.Operations))
	for _, o := range e.Operations {
		action, err := actionEnum.toProto(o.Action)
		if err != nil {
			return nil, fmt.Errorf("finished run %s: operation %s: %w", e.RunID, o.ID, err)
		}
		state := o.State
		if state == plan.OpSuperseded || state == plan.OpWaiting {
			state = plan.OpSkipped
		}
		st, err := opStateEnum.toProto(state)
		if err != nil {
			return nil, fmt.Errorf("finished run %s: operation %s: %w", e.RunID, o.ID, err)
		}
		ops = append(ops, &planv1.OperationOutcome{OpId: o.ID, Ref: o.Ref, Action: action, Status: st, Message: o.Message})
	}
	return &planv1.PlanFinished{
		Cluster: e.Cluster, PlanId: e.PlanID, RunId: e.RunID, Outcome: outcome, Commit: e.Commit,
		Succeeded: counts[0], Failed: counts[1], Skipped: counts[2], Superseded: counts[3], Operations: ops,
		FinishedAt: timeToProto(e.At), EventId: e.EventID, RequestId: e.RequestID, RequestIds: e.RequestIDs,
		Tree: e.Tree, RequestedBy: e.RequestedBy,
	}, nil
}

// FinishedFromProto converts a proxops.plan.v1.PlanFinished.
func FinishedFromProto(m proto.Message) (plan.FinishedRun, error) {
	p, err := as[*planv1.PlanFinished](m)
	if err != nil {
		return plan.FinishedRun{}, fmt.Errorf("finished run: %w", err)
	}
	outcome, err := outcomeEnum.fromProto(p.GetOutcome())
	if err != nil {
		return plan.FinishedRun{}, fmt.Errorf("finished run %s: %w", p.GetRunId(), err)
	}
	at, err := timeFromProto(p.GetFinishedAt())
	if err != nil {
		return plan.FinishedRun{}, fmt.Errorf("finished run %s: finished at: %w", p.GetRunId(), err)
	}
	var ops []plan.OpOutcome
	for _, po := range p.GetOperations() {
		action, err := actionEnum.fromProto(po.GetAction())
		if err != nil {
			return plan.FinishedRun{}, fmt.Errorf("finished run %s: operation %s: %w", p.GetRunId(), po.GetOpId(), err)
		}
		st, err := opStateEnum.fromProto(po.GetStatus())
		if err != nil {
			return plan.FinishedRun{}, fmt.Errorf("finished run %s: operation %s: %w", p.GetRunId(), po.GetOpId(), err)
		}
		ops = append(ops, plan.OpOutcome{ID: po.GetOpId(), Ref: po.GetRef(), Action: action, State: st, Message: po.GetMessage()})
	}
	return plan.FinishedRun{
		RunInfo: plan.RunInfo{Cluster: p.GetCluster(), PlanID: p.GetPlanId(), RunID: p.GetRunId(), Commit: p.GetCommit(),
			Tree: p.GetTree(), EventID: p.GetEventId(), RequestID: p.GetRequestId(), RequestIDs: p.GetRequestIds(),
			RequestedBy: p.GetRequestedBy()},
		Finished: plan.Finished{Outcome: outcome, Succeeded: int(p.GetSucceeded()), Failed: int(p.GetFailed()),
			Skipped: int(p.GetSkipped()), Superseded: int(p.GetSuperseded()), Operations: ops},
		At: at,
	}, nil
}

// DecodeFinished decodes a received proxops.plan.v1.PlanFinished.
func DecodeFinished(ctx context.Context, decode DecodeFunc) (plan.FinishedRun, error) {
	return decodeAs(ctx, decode, &planv1.PlanFinished{}, func(p *planv1.PlanFinished) (plan.FinishedRun, error) { return FinishedFromProto(p) })
}
