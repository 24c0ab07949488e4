// Package report is ProxOps' status report: one ClusterStatus per cluster, and the pure aggregator that folds
// repository events, plans, rejections, holds, confirmations, operation results, finished runs and gap
// reports into it.
//
// A ClusterStatus has three parts. The Report is deterministic: the same history gives the same Report, byte
// for byte, whatever the order in which the streams' messages were interleaved (each stream's own order is
// kept, and a plan is always seen after the repository event it answers and before its run finishes). It
// holds no wall-clock time, run id, task UPID or digest (but the run ids that refused operations carry). Tracking is the aggregator's bookkeeping (the stream
// sequences folded, the run followed), so a restarted service goes on without folding an event twice.
// Timing holds the wall-clock part, filled from the times the events were stored.
//
// The package is pure: it imports the standard library and ProxOps' domain packages only.
package report

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
)

// Phase is where a cluster stands.
type Phase string

const (
	// PhaseUnknown: nothing has been planned for the cluster yet.
	PhaseUnknown Phase = "unknown"
	// PhaseConverged: PVE matches git (the last run succeeded, or the last plan had nothing to do).
	PhaseConverged Phase = "converged"
	// PhasePlanning: a repository event arrived and its plan has not been published yet.
	PhasePlanning Phase = "planning"
	// PhaseApplying: a run is applying operations.
	PhaseApplying Phase = "applying"
	// PhaseDrifted: a dry-run plan found operations to do; nothing was applied.
	PhaseDrifted Phase = "drifted"
	// PhaseRejected: the plan failed closed (parse errors, unknown nodes, secrets, unreadable PVE state).
	PhaseRejected Phase = "rejected"
	// PhaseFailed: the last run finished with failed operations.
	PhaseFailed Phase = "failed"
	// PhaseHeld: the plan waits for an operator's confirmation (mass-prune latch).
	PhaseHeld Phase = "held"
	// PhaseSuspended: the cluster is suspended; plans are shown, nothing is applied.
	PhaseSuspended Phase = "suspended"
)

// Phases lists every phase in a fixed order.
var Phases = []Phase{PhaseUnknown, PhaseConverged, PhasePlanning, PhaseApplying, PhaseDrifted, PhaseRejected,
	PhaseFailed, PhaseHeld, PhaseSuspended}

// Severity orders phases by how much they need a person: failed and rejected first, converged last.
func (p Phase) Severity() int {
	switch p {
	case PhaseRejected:
		return 8
	case PhaseFailed:
		return 7
	case PhaseHeld:
		return 6
	case PhaseDrifted:
		return 5
	case PhaseSuspended:
		return 4
	case PhaseApplying:
		return 3
	case PhasePlanning:
		return 2
	case PhaseUnknown:
		return 1
	default:
		return 0
	}
}

// ResourceState is the state of one resource, with the predecessor's names.
type ResourceState string

const (
	// StateDesired: declared and not on PVE yet (create, clone or download pending).
	StateDesired ResourceState = "desired"
	// StateDrift: on PVE and different from git (an update is pending).
	StateDrift ResourceState = "drift"
	// StateConverged: on PVE and equal to git.
	StateConverged ResourceState = "converged"
	// StateOrphan: owned by ProxOps, absent from git, to be pruned.
	StateOrphan ResourceState = "orphan"
	// StatePruned: deleted by the last run.
	StatePruned ResourceState = "pruned"
	// StateSkipped: a live guest ProxOps does not own (never touched), or a prune deferred by the budget.
	StateSkipped ResourceState = "skipped"
	// StateAnomalous: a difference ProxOps will not write (data loss, live-only slots, misplaced guest).
	StateAnomalous ResourceState = "anomalous"
	// StateInProgress: an operation on it is running.
	StateInProgress ResourceState = "in_progress"
	// StateFailed: an operation on it failed.
	StateFailed ResourceState = "failed"
	// StateSuspended: rolled back by an operator and suspended from correction; Reason says its drift from
	// git, which is reported and not corrected.
	StateSuspended ResourceState = "suspended"
)

// ResourceStates lists every resource state in a fixed order.
var ResourceStates = []ResourceState{StateDesired, StateDrift, StateConverged, StateOrphan, StatePruned,
	StateSkipped, StateAnomalous, StateInProgress, StateFailed, StateSuspended}

// Differs reports whether the state means PVE does not match git yet.
func (s ResourceState) Differs() bool {
	return s == StateDesired || s == StateDrift || s == StateOrphan
}

// Resource is the status of one declared or observed resource.
type Resource struct {
	Kind string
	Name string
	Node string
	// VMID is 0 for artifacts and unknown guests.
	VMID  int
	State ResourceState
	// LastAction is the last operation that finished on it; LastError the message of the last failure, cleared
	// when a later operation on it succeeds.
	LastAction plan.Action
	LastError  string
	// Reason says why the resource is in its state (the pending operation's reason, the finding's message).
	Reason string
	// PruneReason says why a prune is pending or deferred.
	PruneReason string
}

// Ref is Kind/name.
func (r Resource) Ref() string { return r.Kind + "/" + r.Name }

// CompareResources orders resources by kind, then name.
func CompareResources(a, b Resource) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
}

// Counters summarise a cluster. Objects to Anomalies describe the last plan and its run, like the
// predecessor's last cycle; Plans and Rejections are totals since the status began.
type Counters struct {
	Objects        int
	ActionsOK      int
	ActionsErr     int
	ActionsSkipped int
	Pruned         int
	PruneDeferred  int
	Skipped        int
	Anomalies      int
	Gaps           int
	// SecurityWarnings counts live settings that weaken a guest's isolation from its host.
	SecurityWarnings int
	Drifted          int
	Plans            int
	Rejections       int
	// Refused counts the operations executors refused to run since the status began (Report.Refused keeps
	// the latest MaxRefused of them).
	Refused int
}

// Report is the deterministic part of a cluster's status.
type Report struct {
	Cluster string
	Phase   Phase
	// Reason explains the phase for a person: the rejection, the hold, the failures, the pending commit.
	Reason            string
	LastCommitSeen    string
	LastCommitApplied string
	// LastTreeApplied is the tree of the last run that succeeded; LastAppliedBy the operator user who asked
	// for it when it was a work-tree apply (empty for a commit the watcher fetched).
	LastTreeApplied string
	LastAppliedBy   string
	// PlanID is the content id of the last plan.
	PlanID string
	// Resources, sorted by kind, name.
	Resources []Resource
	// Findings of the last plan, in the plan's order.
	Findings []plan.Finding
	// HeldPrunes are the prunes a held plan waits to have confirmed.
	HeldPrunes []string
	// Gaps of the last gap report, sorted.
	Gaps []inventory.Gap
	// Security holds the security warnings of the last gap report, sorted.
	Security []inventory.SecurityWarning
	// Diagnostics of the last rejection, sorted; empty once a plan is accepted again.
	Diagnostics diag.List
	// Refused are the latest operations executors refused to run (unsigned, signed by a key they do not
	// trust, of a run that is not open, ...), oldest first, at most MaxRefused.
	Refused []RefusedOperation
	// FailingNotifications are the notification providers whose last delivery about the cluster failed,
	// sorted by provider.
	FailingNotifications []NotificationDelivery
	Counters             Counters
}

// NotificationHealth is the notifier's latest delivery outcome per provider for one cluster.
type NotificationHealth struct {
	Cluster   string
	Providers []NotificationDelivery
}

// NotificationDelivery is the outcome of a provider's last delivery about a cluster.
type NotificationDelivery struct {
	Provider, Type string
	// Failing: the delivery failed (and is retried) or was refused (and is not).
	Failing           bool
	Event, DeliveryID string
	// Message says why it failed.
	Message string
}

// MaxRefused is how many refused operations a report keeps: the latest; Counters.Refused counts them all.
const MaxRefused = 200

// RefusedOperation is an operation an executor refused to run, as its dead letter shows it. Cluster and
// Node are those of the executor that refused it (the dead letter's subject); the rest is what the
// operation claimed, clipped to a short printable text.
type RefusedOperation struct {
	Cluster string
	Node    string
	RunID   string
	OpID    string
	Action  plan.Action
	Ref     string
	VMID    int
	// Reason is the refusal's code (unsigned, unknown_key, bad_signature, run_not_open, secret_reference);
	// Message the executor's text.
	Reason  string
	Message string
}

// OpTrack is one operation of the last plan, as far as the status knows it.
type OpTrack struct {
	ID     string
	Ref    string
	Action plan.Action
	Node   string
	VMID   int
	State  plan.OpState
	// Message is the executor's or planner's message about the outcome.
	Message string
	// Reason is the plan's reason for the operation.
	Reason string
}

// Tracking is the aggregator's bookkeeping; it is not part of the report.
type Tracking struct {
	// Last stream sequence folded, per stream.
	RepoSeq, PlansSeq, ResultsSeq, GapsSeq, DLQSeq, NotifySeq uint64
	// RunID is the run whose results are followed; RunOpen says it has not finished.
	RunID   string
	RunOpen bool
	// RunCompleted: the run (or the plan without a run) has been counted as a completed reconcile.
	RunCompleted bool
	// NotApplied: the last plan only showed its operations (dry run, suspended cluster).
	NotApplied bool
	// SeenEventID is the last repository event for this cluster; AnsweredEventID the one the last plan or
	// rejection answered. They differ while a plan is awaited.
	SeenEventID     string
	AnsweredEventID string
	// SettledPhase and SettledReason are what the plan stream says, before a pending event overrides it.
	SettledPhase  Phase
	SettledReason string
	// Operations of the last plan, in plan order.
	Operations []OpTrack
	// BlockedTree is the tree of the last plan rejected for a permanent cause: the planners skip triggers
	// nobody waits on for it until something changes, so such a trigger awaits no plan.
	BlockedTree string
}

// Seq returns the last sequence folded from a stream.
func (t Tracking) Seq(s Stream) uint64 {
	if p := t.seqField(s); p != nil {
		return *p
	}
	return 0
}

func (t *Tracking) setSeq(s Stream, seq uint64) {
	if p := t.seqField(s); p != nil {
		*p = seq
	}
}

// seqField is the field that holds a stream's sequence; nil for a stream that is not tracked.
func (t *Tracking) seqField(s Stream) *uint64 {
	switch s {
	case StreamRepo:
		return &t.RepoSeq
	case StreamPlans:
		return &t.PlansSeq
	case StreamResults:
		return &t.ResultsSeq
	case StreamGaps:
		return &t.GapsSeq
	case StreamDLQ:
		return &t.DLQSeq
	case StreamNotify:
		return &t.NotifySeq
	}
	return nil
}

// ResourceTiming is the wall-clock part of one resource's status.
type ResourceTiming struct {
	Kind, Name      string
	UpdatedAt       time.Time
	LastConvergedAt time.Time
}

// Timing is the wall-clock part of a cluster's status: when things happened, from the times the events
// were stored.
type Timing struct {
	// UpdatedAt: the report last changed.
	UpdatedAt time.Time
	// LastPlanAt: the planner last answered (a plan or a rejection).
	LastPlanAt time.Time
	// LastSuccessAt: a run last succeeded, or a plan last found nothing to do.
	LastSuccessAt time.Time
	// LastEventAt: the last event folded.
	LastEventAt time.Time
	// LastTriggerAt: the repository event last seen for the cluster was stored.
	LastTriggerAt time.Time
	// Resources, sorted by kind, name.
	Resources []ResourceTiming
}

// Resource returns a resource's timing.
func (t Timing) Resource(kind, name string) (ResourceTiming, bool) {
	i, ok := slices.BinarySearchFunc(t.Resources, ResourceTiming{Kind: kind, Name: name}, compareResourceTiming)
	if !ok {
		return ResourceTiming{}, false
	}
	return t.Resources[i], true
}

func compareResourceTiming(a, b ResourceTiming) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
}

// ClusterStatus is a cluster's status: the deterministic Report, a Revision that increases with every change
// of the Report, the aggregator's Tracking and the Timing.
type ClusterStatus struct {
	Report
	Revision int64
	Tracking Tracking
	Timing   Timing
}

// New returns the status of a cluster nothing is known about yet.
func New(cluster string) ClusterStatus {
	return ClusterStatus{
		Report:   Report{Cluster: cluster, Phase: PhaseUnknown},
		Tracking: Tracking{SettledPhase: PhaseUnknown},
	}
}

// Resource returns a resource by kind and name.
func (r Report) Resource(kind, name string) (Resource, bool) {
	i, ok := binarySearchResource(r.Resources, kind, name)
	if !ok {
		return Resource{}, false
	}
	return r.Resources[i], true
}

func binarySearchResource(rs []Resource, kind, name string) (int, bool) {
	return slices.BinarySearchFunc(rs, Resource{Kind: kind, Name: name}, CompareResources)
}

// SplitRef splits Kind/name; a ref without a slash is a name of an unknown kind.
func SplitRef(ref string) (kind, name string) {
	k, n, ok := strings.Cut(ref, "/")
	if !ok {
		return "", ref
	}
	return k, n
}

// clone copies every slice, so a fold never changes the status it was given.
func (s ClusterStatus) clone() ClusterStatus {
	s.Resources = slices.Clone(s.Resources)
	s.Findings = slices.Clone(s.Findings)
	s.HeldPrunes = slices.Clone(s.HeldPrunes)
	s.Gaps = slices.Clone(s.Gaps)
	s.Diagnostics = slices.Clone(s.Diagnostics)
	s.Refused = slices.Clone(s.Refused)
	s.FailingNotifications = slices.Clone(s.FailingNotifications)
	s.Tracking.Operations = slices.Clone(s.Tracking.Operations)
	s.Timing.Resources = slices.Clone(s.Timing.Resources)
	return s
}
