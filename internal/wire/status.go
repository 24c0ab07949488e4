package wire

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	planv1 "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
	statusv1 "github.com/proxops/proxops/internal/gen/proxops/status/v1"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/report"
)

// phaseEnum maps PhaseUnknown ("nothing planned yet") to PHASE_UNSPECIFIED.
var phaseEnum = enumMap[report.Phase, statusv1.Phase]{field: "phase", pairs: []enumPair[report.Phase, statusv1.Phase]{
	{report.PhaseUnknown, statusv1.Phase_PHASE_UNSPECIFIED},
	{report.PhaseConverged, statusv1.Phase_PHASE_CONVERGED},
	{report.PhasePlanning, statusv1.Phase_PHASE_PLANNING},
	{report.PhaseApplying, statusv1.Phase_PHASE_APPLYING},
	{report.PhaseDrifted, statusv1.Phase_PHASE_DRIFTED},
	{report.PhaseRejected, statusv1.Phase_PHASE_REJECTED},
	{report.PhaseFailed, statusv1.Phase_PHASE_FAILED},
	{report.PhaseHeld, statusv1.Phase_PHASE_HELD},
	{report.PhaseSuspended, statusv1.Phase_PHASE_SUSPENDED},
}}

var trackedStateEnum = enumMap[plan.OpState, statusv1.OperationState]{field: "operation state", pairs: []enumPair[plan.OpState, statusv1.OperationState]{
	{plan.OpWaiting, statusv1.OperationState_OPERATION_STATE_WAITING},
	{plan.OpDispatched, statusv1.OperationState_OPERATION_STATE_DISPATCHED},
	{plan.OpSucceeded, statusv1.OperationState_OPERATION_STATE_SUCCEEDED},
	{plan.OpFailed, statusv1.OperationState_OPERATION_STATE_FAILED},
	{plan.OpSkipped, statusv1.OperationState_OPERATION_STATE_SKIPPED},
	{plan.OpSuperseded, statusv1.OperationState_OPERATION_STATE_SUPERSEDED},
}}

func resourceStateOf(s string) (report.ResourceState, error) {
	st := report.ResourceState(s)
	if !slices.Contains(report.ResourceStates, st) {
		return "", fmt.Errorf("state: unknown value %q", s)
	}
	return st, nil
}

func lastActionOf(s string) (plan.Action, error) {
	a := plan.Action(s)
	if s != "" && !slices.Contains(plan.Actions, a) {
		return "", fmt.Errorf("last action: unknown value %q", s)
	}
	return a, nil
}

// ClusterStatusToProto converts a cluster's status into a proxops.status.v1.ClusterStatus, with its
// tracking and timing.
func ClusterStatusToProto(s report.ClusterStatus) (proto.Message, error) {
	p, err := clusterStatusToProto(s)
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", s.Cluster, err)
	}
	return p, nil
}

func clusterStatusToProto(s report.ClusterStatus) (*statusv1.ClusterStatus, error) {
	phase, err := phaseEnum.toProto(s.Phase)
	if err != nil {
		return nil, err
	}
	findings, err := findingsToProto(s.Findings)
	if err != nil {
		return nil, err
	}
	ds, err := diagnosticsToProto(s.Diagnostics)
	if err != nil {
		return nil, err
	}
	tracking, err := trackingToProto(s.Tracking)
	if err != nil {
		return nil, err
	}
	p := &statusv1.ClusterStatus{
		Cluster: s.Cluster, Phase: phase, LastCommitSeen: s.LastCommitSeen, LastCommitApplied: s.LastCommitApplied,
		LastTreeApplied: s.LastTreeApplied, LastAppliedBy: s.LastAppliedBy,
		PlanId: s.PlanID, Findings: findings, Gaps: gapsToProto(s.Gaps), Diagnostics: ds, Reason: s.Reason,
		Revision: s.Revision, HeldPrunes: s.HeldPrunes, Tracking: tracking, Timing: timingToProto(s.Timing),
		Counters: countersToProto(s.Counters), SecurityWarnings: securityToProto(s.Security),
	}
	p.FailingNotifications = notificationDeliveriesToProto(s.FailingNotifications)
	for _, r := range s.Refused {
		var action planv1.Action
		if r.Action != "" {
			if action, err = actionEnum.toProto(r.Action); err != nil {
				return nil, fmt.Errorf("refused operation %s: %w", r.OpID, err)
			}
		}
		p.RefusedOperations = append(p.RefusedOperations, &statusv1.RefusedOperation{Node: r.Node, RunId: r.RunID,
			OpId: r.OpID, Action: action, Ref: r.Ref, Vmid: int64(r.VMID), Reason: r.Reason, Message: r.Message})
	}
	for _, r := range s.Resources {
		if _, err := resourceStateOf(string(r.State)); err != nil {
			return nil, fmt.Errorf("resource %s: %w", r.Ref(), err)
		}
		p.Resources = append(p.Resources, &statusv1.ResourceStatus{Kind: r.Kind, Name: r.Name, Node: r.Node,
			Vmid: int64(r.VMID), State: string(r.State), LastAction: string(r.LastAction), LastError: r.LastError,
			Reason: r.Reason, PruneReason: r.PruneReason})
	}
	return p, nil
}

func countersToProto(c report.Counters) *statusv1.Counters {
	return &statusv1.Counters{
		Objects: int64(c.Objects), ActionsOk: int64(c.ActionsOK), ActionsErr: int64(c.ActionsErr),
		ActionsSkipped: int64(c.ActionsSkipped), Pruned: int64(c.Pruned), PruneDeferred: int64(c.PruneDeferred),
		Skipped: int64(c.Skipped), Anomalies: int64(c.Anomalies), Gaps: int64(c.Gaps), Drifted: int64(c.Drifted),
		Plans: int64(c.Plans), Rejections: int64(c.Rejections), SecurityWarnings: int64(c.SecurityWarnings),
		Refused: int64(c.Refused),
	}
}

func countersFromProto(p *statusv1.Counters) report.Counters {
	return report.Counters{
		Objects: int(p.GetObjects()), ActionsOK: int(p.GetActionsOk()), ActionsErr: int(p.GetActionsErr()),
		ActionsSkipped: int(p.GetActionsSkipped()), Pruned: int(p.GetPruned()), PruneDeferred: int(p.GetPruneDeferred()),
		Skipped: int(p.GetSkipped()), Anomalies: int(p.GetAnomalies()), Gaps: int(p.GetGaps()), Drifted: int(p.GetDrifted()),
		Plans: int(p.GetPlans()), Rejections: int(p.GetRejections()), SecurityWarnings: int(p.GetSecurityWarnings()),
		Refused: int(p.GetRefused()),
	}
}

func trackingToProto(t report.Tracking) (*statusv1.Tracking, error) {
	settled, err := phaseEnum.toProto(t.SettledPhase)
	if err != nil {
		return nil, fmt.Errorf("tracking: settled %w", err)
	}
	p := &statusv1.Tracking{
		RepoSequence: t.RepoSeq, PlansSequence: t.PlansSeq, ResultsSequence: t.ResultsSeq, GapsSequence: t.GapsSeq,
		DlqSequence: t.DLQSeq, NotifySequence: t.NotifySeq,
		RunId: t.RunID, RunOpen: t.RunOpen, RunCompleted: t.RunCompleted, NotApplied: t.NotApplied,
		SeenEventId: t.SeenEventID, AnsweredEventId: t.AnsweredEventID, SettledPhase: settled, SettledReason: t.SettledReason,
		BlockedTree: t.BlockedTree,
	}
	for _, o := range t.Operations {
		action, err := actionEnum.toProto(o.Action)
		if err != nil {
			return nil, fmt.Errorf("tracking: operation %s: %w", o.ID, err)
		}
		st, err := trackedStateEnum.toProto(o.State)
		if err != nil {
			return nil, fmt.Errorf("tracking: operation %s: %w", o.ID, err)
		}
		p.Operations = append(p.Operations, &statusv1.TrackedOperation{OpId: o.ID, Ref: o.Ref, Action: action, Node: o.Node,
			Vmid: int64(o.VMID), State: st, Message: o.Message, Reason: o.Reason})
	}
	return p, nil
}

func trackingFromProto(p *statusv1.Tracking) (report.Tracking, error) {
	settled, err := phaseEnum.fromProto(p.GetSettledPhase())
	if err != nil {
		return report.Tracking{}, fmt.Errorf("tracking: settled %w", err)
	}
	t := report.Tracking{
		RepoSeq: p.GetRepoSequence(), PlansSeq: p.GetPlansSequence(), ResultsSeq: p.GetResultsSequence(), GapsSeq: p.GetGapsSequence(),
		DLQSeq: p.GetDlqSequence(), NotifySeq: p.GetNotifySequence(),
		RunID: p.GetRunId(), RunOpen: p.GetRunOpen(), RunCompleted: p.GetRunCompleted(), NotApplied: p.GetNotApplied(),
		SeenEventID: p.GetSeenEventId(), AnsweredEventID: p.GetAnsweredEventId(), SettledPhase: settled,
		SettledReason: p.GetSettledReason(), BlockedTree: p.GetBlockedTree(),
	}
	for _, o := range p.GetOperations() {
		action, err := actionEnum.fromProto(o.GetAction())
		if err != nil {
			return report.Tracking{}, fmt.Errorf("tracking: operation %s: %w", o.GetOpId(), err)
		}
		st, err := trackedStateEnum.fromProto(o.GetState())
		if err != nil {
			return report.Tracking{}, fmt.Errorf("tracking: operation %s: %w", o.GetOpId(), err)
		}
		t.Operations = append(t.Operations, report.OpTrack{ID: o.GetOpId(), Ref: o.GetRef(), Action: action, Node: o.GetNode(),
			VMID: int(o.GetVmid()), State: st, Message: o.GetMessage(), Reason: o.GetReason()})
	}
	return t, nil
}

func timingToProto(t report.Timing) *statusv1.Timing {
	p := &statusv1.Timing{
		UpdatedAt: timeToProto(t.UpdatedAt), LastPlanAt: timeToProto(t.LastPlanAt), LastSuccessAt: timeToProto(t.LastSuccessAt),
		LastEventAt: timeToProto(t.LastEventAt), LastTriggerAt: timeToProto(t.LastTriggerAt),
	}
	for _, r := range t.Resources {
		p.Resources = append(p.Resources, &statusv1.ResourceTiming{Kind: r.Kind, Name: r.Name,
			UpdatedAt: timeToProto(r.UpdatedAt), LastConvergedAt: timeToProto(r.LastConvergedAt)})
	}
	return p
}

func timingFromProto(p *statusv1.Timing) (report.Timing, error) {
	var t report.Timing
	var err error
	fields := []struct {
		name string
		ts   *timestamppb.Timestamp
		dst  *time.Time
	}{
		{"updated at", p.GetUpdatedAt(), &t.UpdatedAt},
		{"last plan at", p.GetLastPlanAt(), &t.LastPlanAt},
		{"last success at", p.GetLastSuccessAt(), &t.LastSuccessAt},
		{"last event at", p.GetLastEventAt(), &t.LastEventAt},
		{"last trigger at", p.GetLastTriggerAt(), &t.LastTriggerAt},
	}
	for _, f := range fields {
		if *f.dst, err = timeFromProto(f.ts); err != nil {
			return report.Timing{}, fmt.Errorf("timing: %s: %w", f.name, err)
		}
	}
	for _, r := range p.GetResources() {
		rt := report.ResourceTiming{Kind: r.GetKind(), Name: r.GetName()}
		if rt.UpdatedAt, err = timeFromProto(r.GetUpdatedAt()); err != nil {
			return report.Timing{}, fmt.Errorf("timing of %s/%s: updated at: %w", rt.Kind, rt.Name, err)
		}
		if rt.LastConvergedAt, err = timeFromProto(r.GetLastConvergedAt()); err != nil {
			return report.Timing{}, fmt.Errorf("timing of %s/%s: last converged at: %w", rt.Kind, rt.Name, err)
		}
		t.Resources = append(t.Resources, rt)
	}
	return t, nil
}

// ClusterStatusFromProto converts a proxops.status.v1.ClusterStatus.
func ClusterStatusFromProto(m proto.Message) (report.ClusterStatus, error) {
	p, err := as[*statusv1.ClusterStatus](m)
	if err != nil {
		return report.ClusterStatus{}, fmt.Errorf("cluster status: %w", err)
	}
	s, err := clusterStatusFromProto(p)
	if err != nil {
		return report.ClusterStatus{}, fmt.Errorf("status of %s: %w", p.GetCluster(), err)
	}
	return s, nil
}

func clusterStatusFromProto(p *statusv1.ClusterStatus) (report.ClusterStatus, error) {
	phase, err := phaseEnum.fromProto(p.GetPhase())
	if err != nil {
		return report.ClusterStatus{}, err
	}
	findings, err := findingsFromProto(p.GetFindings())
	if err != nil {
		return report.ClusterStatus{}, err
	}
	ds, err := diagnosticsFromProto(p.GetDiagnostics())
	if err != nil {
		return report.ClusterStatus{}, err
	}
	tracking, err := trackingFromProto(p.GetTracking())
	if err != nil {
		return report.ClusterStatus{}, err
	}
	timing, err := timingFromProto(p.GetTiming())
	if err != nil {
		return report.ClusterStatus{}, err
	}
	s := report.ClusterStatus{
		Report: report.Report{
			Cluster: p.GetCluster(), Phase: phase, Reason: p.GetReason(), LastCommitSeen: p.GetLastCommitSeen(),
			LastCommitApplied: p.GetLastCommitApplied(), LastTreeApplied: p.GetLastTreeApplied(),
			LastAppliedBy: p.GetLastAppliedBy(), PlanID: p.GetPlanId(), Findings: findings,
			HeldPrunes: p.GetHeldPrunes(), Gaps: gapsFromProto(p.GetGaps()), Diagnostics: ds,
			Security: securityFromProto(p.GetSecurityWarnings()),
			Counters: countersFromProto(p.GetCounters()),
		},
		Revision: p.GetRevision(), Tracking: tracking, Timing: timing,
	}
	s.FailingNotifications = notificationDeliveriesFromProto(p.GetFailingNotifications())
	for _, r := range p.GetRefusedOperations() {
		var action plan.Action
		if r.GetAction() != planv1.Action_ACTION_UNSPECIFIED {
			if action, err = actionEnum.fromProto(r.GetAction()); err != nil {
				return report.ClusterStatus{}, fmt.Errorf("refused operation %s: %w", r.GetOpId(), err)
			}
		}
		s.Refused = append(s.Refused, report.RefusedOperation{Cluster: s.Cluster, Node: r.GetNode(), RunID: r.GetRunId(),
			OpID: r.GetOpId(), Action: action, Ref: r.GetRef(), VMID: int(r.GetVmid()), Reason: r.GetReason(),
			Message: r.GetMessage()})
	}
	for _, r := range p.GetResources() {
		st, err := resourceStateOf(r.GetState())
		if err != nil {
			return report.ClusterStatus{}, fmt.Errorf("resource %s/%s: %w", r.GetKind(), r.GetName(), err)
		}
		action, err := lastActionOf(r.GetLastAction())
		if err != nil {
			return report.ClusterStatus{}, fmt.Errorf("resource %s/%s: %w", r.GetKind(), r.GetName(), err)
		}
		s.Resources = append(s.Resources, report.Resource{Kind: r.GetKind(), Name: r.GetName(), Node: r.GetNode(),
			VMID: int(r.GetVmid()), State: st, LastAction: action, LastError: r.GetLastError(), Reason: r.GetReason(),
			PruneReason: r.GetPruneReason()})
	}
	return s, nil
}

// DecodeClusterStatus decodes a received proxops.status.v1.ClusterStatus.
func DecodeClusterStatus(ctx context.Context, decode DecodeFunc) (report.ClusterStatus, error) {
	return decodeAs(ctx, decode, &statusv1.ClusterStatus{}, func(p *statusv1.ClusterStatus) (report.ClusterStatus, error) {
		return ClusterStatusFromProto(p)
	})
}

// NewClusterStatusMessage returns an empty proxops.status.v1.ClusterStatus to read a KV value into.
func NewClusterStatusMessage() proto.Message { return &statusv1.ClusterStatus{} }

// NotificationHealthToProto converts the notifier's delivery outcomes of a cluster.
func NotificationHealthToProto(h report.NotificationHealth) proto.Message {
	return &statusv1.NotificationHealth{Cluster: h.Cluster, Providers: notificationDeliveriesToProto(h.Providers)}
}

// DecodeNotificationHealth decodes a received proxops.status.v1.NotificationHealth.
func DecodeNotificationHealth(ctx context.Context, decode DecodeFunc) (report.NotificationHealth, error) {
	return decodeAs(ctx, decode, &statusv1.NotificationHealth{}, func(p *statusv1.NotificationHealth) (report.NotificationHealth, error) {
		return report.NotificationHealth{Cluster: p.GetCluster(), Providers: notificationDeliveriesFromProto(p.GetProviders())}, nil
	})
}

func notificationDeliveriesToProto(ds []report.NotificationDelivery) []*statusv1.NotificationDelivery {
	var out []*statusv1.NotificationDelivery
	for _, d := range ds {
		out = append(out, &statusv1.NotificationDelivery{Provider: d.Provider, Type: d.Type, Failing: d.Failing, Event: d.Event,
			DeliveryId: d.DeliveryID, Message: d.Message})
	}
	return out
}

func notificationDeliveriesFromProto(ps []*statusv1.NotificationDelivery) []report.NotificationDelivery {
	var out []report.NotificationDelivery
	for _, p := range ps {
		out = append(out, report.NotificationDelivery{Provider: p.GetProvider(), Type: p.GetType(), Failing: p.GetFailing(),
			Event: p.GetEvent(), DeliveryID: p.GetDeliveryId(), Message: p.GetMessage()})
	}
	return out
}
