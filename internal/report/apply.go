package report

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
)

// Stream names the stream an event comes from; sequences are compared per stream.
type Stream string

const (
	StreamRepo    Stream = "repo"
	StreamPlans   Stream = "plans"
	StreamResults Stream = "results"
	StreamGaps    Stream = "gaps"
	// StreamDLQ is the dead letters: the operations executors refused.
	StreamDLQ Stream = "dlq"
	// StreamNotify is the notifier's latest delivery outcomes per cluster.
	StreamNotify Stream = "notify"
)

// Streams lists the streams in a fixed order.
var Streams = []Stream{StreamRepo, StreamPlans, StreamResults, StreamGaps, StreamDLQ, StreamNotify}

// Event is one input of the aggregator: exactly one of the pointers is set.
type Event struct {
	// Seq is the event's sequence in its stream; an event at or below the sequence a status has folded from
	// that stream is skipped. 0 means "not from a stream" and is never skipped.
	Seq uint64
	// At is when the event was stored; it only fills Timing.
	At time.Time

	Repo      *event.RepoChanged
	Planned   *plan.Planned
	Rejected  *plan.Rejected
	Held      *plan.Held
	Confirmed *plan.Confirmation
	Finished  *plan.FinishedRun
	Result    *plan.Result
	Gaps      *inventory.GapReport
	Refused   *RefusedOperation
	Notify    *NotificationHealth
}

// Stream returns the stream the event belongs to.
func (e Event) Stream() Stream {
	switch {
	case e.Repo != nil:
		return StreamRepo
	case e.Result != nil:
		return StreamResults
	case e.Gaps != nil:
		return StreamGaps
	case e.Refused != nil:
		return StreamDLQ
	case e.Notify != nil:
		return StreamNotify
	default:
		return StreamPlans
	}
}

// Cluster returns the cluster a cluster event concerns; "" for a repository event (it concerns every cluster
// it names, or all of them).
func (e Event) Cluster() string {
	switch {
	case e.Planned != nil:
		return e.Planned.Cluster
	case e.Rejected != nil:
		return e.Rejected.Cluster
	case e.Held != nil:
		return e.Held.Cluster
	case e.Confirmed != nil:
		return e.Confirmed.Cluster
	case e.Finished != nil:
		return e.Finished.Cluster
	case e.Result != nil:
		return e.Result.Cluster
	case e.Gaps != nil:
		return e.Gaps.Cluster
	case e.Refused != nil:
		return e.Refused.Cluster
	case e.Notify != nil:
		return e.Notify.Cluster
	}
	return ""
}

// Preview reports whether an event belongs to an operator's preview (`proxops diff`): a dry run someone
// requested, of a commit or of a work tree. Previews never change a cluster's status. A work tree that is
// applied (`proxops apply --worktree`) is no preview: what it does to PVE shows.
func (e Event) Preview() bool {
	var info *plan.RunInfo
	switch {
	case e.Repo != nil:
		return e.Repo.DryRun && e.Repo.RequestID != ""
	case e.Planned != nil:
		info = &e.Planned.RunInfo
	case e.Rejected != nil:
		info = &e.Rejected.RunInfo
	default:
		return false
	}
	return info.DryRun && info.RequestID != ""
}

// concerns reports whether the event is about the cluster.
func (e Event) concerns(cluster string) bool {
	if e.Repo != nil {
		return len(e.Repo.Clusters) == 0 || slices.Contains(e.Repo.Clusters, cluster)
	}
	return e.Cluster() == cluster
}

// Apply folds one event into a cluster's status. It reports whether the event was folded: false when it
// is about another cluster or was folded before (its sequence is not above the one the status has folded
// from its stream). The status it is given is not changed. Revision increases when the Report changed.
func Apply(s ClusterStatus, e Event) (ClusterStatus, bool) {
	if !e.concerns(s.Cluster) {
		return s, false
	}
	stream := e.Stream()
	if e.Seq != 0 && e.Seq <= s.Tracking.Seq(stream) {
		return s, false
	}
	next := s.clone()
	if e.Seq != 0 {
		next.Tracking.setSeq(stream, e.Seq)
	}
	if !e.Preview() {
		switch {
		case e.Repo != nil:
			next.foldRepo(*e.Repo, e.At)
		case e.Planned != nil:
			next.foldPlanned(*e.Planned, e.At)
		case e.Rejected != nil:
			next.foldRejected(*e.Rejected, e.At)
		case e.Held != nil:
			next.foldHeld(*e.Held)
		case e.Confirmed != nil:
			next.foldConfirmed(*e.Confirmed)
		case e.Finished != nil:
			next.foldFinished(*e.Finished, e.At)
		case e.Result != nil:
			next.foldResult(*e.Result)
		case e.Gaps != nil:
			next.foldGaps(*e.Gaps)
		case e.Refused != nil:
			next.foldRefused(*e.Refused)
		case e.Notify != nil:
			next.foldNotify(*e.Notify)
		}
		switch {
		case e.Refused != nil, e.Notify != nil:
			// A refusal or a notification's outcome changes no resource and no phase.
		case e.Result != nil:
			// A result changes one operation: only its resource needs resolving again.
			next.derive(e.Result.Ref)
		default:
			next.derive()
		}
	}
	if !e.At.IsZero() {
		next.Timing.LastEventAt = e.At
	}
	if !reflect.DeepEqual(s.Report, next.Report) {
		next.Revision++
		next.stamp(s.Report, e.At)
	}
	return next, true
}

func (s *ClusterStatus) foldRepo(e event.RepoChanged, at time.Time) {
	// A trigger nobody waits on for the tree of a permanent rejection is skipped by the planners while
	// nothing changes: it awaits no plan, and the rejection stays the news.
	if e.RequestID != "" || e.Tree == "" || e.Tree != s.Tracking.BlockedTree {
		s.Tracking.SeenEventID = e.EventID
	}
	s.LastCommitSeen = e.Commit
	if !at.IsZero() {
		s.Timing.LastTriggerAt = at
	}
}

// answered records the repository event a plan or rejection answers.
func (s *ClusterStatus) answered(info plan.RunInfo, at time.Time) {
	s.Tracking.AnsweredEventID = info.EventID
	if !at.IsZero() {
		s.Timing.LastPlanAt = at
	}
}

// WaitsForChange ends the reason of a cluster whose plan was rejected for a cause that stays: what plans it
// again.
const WaitsForChange = "planned again when something changes: a new commit, the secrets or configuration, or an operator's request (proxops apply)"

func (s *ClusterStatus) foldPlanned(e plan.Planned, at time.Time) {
	s.answered(e.RunInfo, at)
	if !e.DryRun {
		s.Tracking.BlockedTree = ""
	}
	s.Counters.Plans++
	notApplied := e.DryRun || e.Suspended || e.RunID == ""
	if notApplied && s.Tracking.RunOpen {
		// A plan that is only shown does not replace the view of a run still applying.
		return
	}
	s.PlanID = e.Plan.ID
	s.Findings = slices.Clone(e.Plan.Findings)
	s.HeldPrunes = slices.Clone(e.Plan.HeldPrunes)
	s.Diagnostics = nil
	s.Tracking.RunID = e.RunID
	s.Tracking.NotApplied = notApplied
	s.Tracking.Operations = make([]OpTrack, 0, len(e.Plan.Operations))
	for _, op := range e.Plan.Operations {
		s.Tracking.Operations = append(s.Tracking.Operations, OpTrack{ID: op.ID, Ref: op.Ref, Action: op.Action,
			Node: op.Node, VMID: op.VMID, State: plan.OpWaiting, Reason: op.Reason})
	}
	if len(s.Tracking.Operations) == 0 {
		s.Tracking.Operations = nil
	}
	s.Resources = s.resourcesFor(e.Plan.Resources, true)
	n := len(e.Plan.Operations)
	switch {
	case e.Suspended:
		s.settle(PhaseSuspended, fmt.Sprintf("cluster suspended: %s not applied", plural(n, "operation")))
		s.Tracking.RunOpen, s.Tracking.RunCompleted = false, true
	case notApplied && n > 0:
		s.settle(PhaseDrifted, fmt.Sprintf("dry run: %s not applied", plural(n, "operation")))
		s.Tracking.RunOpen, s.Tracking.RunCompleted = false, true
	case notApplied:
		s.settleDone()
		s.Tracking.RunOpen, s.Tracking.RunCompleted = false, true
		s.succeeded(at)
	case e.Plan.Held:
		s.settle(PhaseHeld, heldReason(e.Plan.HeldReason))
		s.Tracking.RunOpen, s.Tracking.RunCompleted = true, false
	case n > 0:
		s.settle(PhaseApplying, "")
		s.Tracking.RunOpen, s.Tracking.RunCompleted = true, false
	default:
		// Nothing to do: PVE already matches this commit, but for the guests an operator rolled back.
		s.settleDone()
		s.Tracking.RunOpen, s.Tracking.RunCompleted = false, true
		s.LastCommitApplied, s.LastTreeApplied, s.LastAppliedBy = e.Commit, e.Tree, e.RequestedBy
		s.succeeded(at)
	}
}

// settleDone settles a plan or run that left nothing to do: converged, or drifted when guests an operator
// rolled back are suspended from correction (they differ from git, and stay so until someone decides).
func (s *ClusterStatus) settleDone() {
	var refs []string
	for _, f := range s.Findings {
		if f.Kind == plan.FindingSuspended {
			refs = append(refs, f.Ref)
		}
	}
	if s.operatorRollback() {
		for _, o := range s.Tracking.Operations {
			if o.Action == plan.ActionRollback {
				refs = append(refs, o.Ref)
			}
		}
	}
	if len(refs) == 0 {
		s.settle(PhaseConverged, "")
		return
	}
	slices.Sort(refs)
	refs = slices.Compact(refs)
	s.settle(PhaseDrifted, fmt.Sprintf("rolled back by an operator and suspended from correction: %s (drift from git reported, not corrected, "+
		"until a commit changes the manifest or proxops resume %s/<guest>)", strings.Join(refs, ", "), s.Cluster))
}

// operatorRollback reports whether the last run is an operator's rollback: a rollback succeeded and nothing
// failed (the run's own rollback follows a failure).
func (s *ClusterStatus) operatorRollback() bool {
	rolledBack := false
	for _, o := range s.Tracking.Operations {
		switch {
		case o.State == plan.OpFailed:
			return false
		case o.Action == plan.ActionRollback && o.State == plan.OpSucceeded:
			rolledBack = true
		}
	}
	return rolledBack
}

func (s *ClusterStatus) succeeded(at time.Time) {
	if !at.IsZero() {
		s.Timing.LastSuccessAt = at
	}
}

func heldReason(r string) string {
	if r == "" {
		return "waiting for an operator's confirmation"
	}
	return r
}

func (s *ClusterStatus) settle(p Phase, reason string) {
	s.Tracking.SettledPhase = p
	s.Tracking.SettledReason = reason
}

func (s *ClusterStatus) foldRejected(e plan.Rejected, at time.Time) {
	s.answered(e.RunInfo, at)
	s.Counters.Rejections++
	s.Diagnostics = e.Rejection.Diagnostics.Sorted()
	if len(s.Diagnostics) == 0 {
		s.Diagnostics = nil
	}
	reason := e.Rejection.Reason
	if reason == "" {
		reason = "rejected"
	}
	errs, _ := e.Rejection.Diagnostics.Count()
	if errs > 0 {
		reason = fmt.Sprintf("%s: %s", reason, plural(errs, "error"))
	}
	if e.Rejection.Reason == plan.RejectObserve && len(s.Diagnostics) > 0 {
		// PVE could not be read: the cause (the node, the request, PVE's answer) is the news.
		reason += " (" + s.Diagnostics[0].Message + ")"
	}
	reason += "; nothing was applied"
	s.Tracking.BlockedTree = ""
	switch {
	case e.Rejection.Transient && !e.Rejection.RetryAt.IsZero():
		reason += "; planned again at " + e.Rejection.RetryAt.UTC().Format(time.RFC3339)
	case !e.Rejection.Transient && !e.DryRun:
		reason += "; " + WaitsForChange
		s.Tracking.BlockedTree = e.Tree
	}
	s.settle(PhaseRejected, reason)
}

func (s *ClusterStatus) foldHeld(e plan.Held) {
	if e.PlanID != "" && e.PlanID != s.PlanID {
		return
	}
	if e.RunID != "" {
		s.Tracking.RunID = e.RunID
	}
	s.Tracking.RunOpen, s.Tracking.RunCompleted = true, false
	s.HeldPrunes = slices.Clone(e.Prunes)
	s.settle(PhaseHeld, heldReason(e.Reason))
}

func (s *ClusterStatus) foldConfirmed(c plan.Confirmation) {
	if s.Tracking.SettledPhase != PhaseHeld || c.PlanID != s.PlanID {
		return
	}
	s.HeldPrunes = nil
	s.settle(PhaseApplying, "")
}

func (s *ClusterStatus) foldResult(r plan.Result) {
	if !s.Tracking.RunOpen || r.RunID == "" || r.RunID != s.Tracking.RunID {
		return
	}
	i := slices.IndexFunc(s.Tracking.Operations, func(o OpTrack) bool { return o.ID == r.OpID })
	if i < 0 {
		return
	}
	op := &s.Tracking.Operations[i]
	if op.State != plan.OpWaiting && op.State != plan.OpDispatched {
		return
	}
	op.advance(r)
	if s.Tracking.SettledPhase == PhaseHeld {
		// The plan was confirmed: its operations are running.
		s.HeldPrunes = nil
		s.settle(PhaseApplying, "")
	}
}

func (s *ClusterStatus) foldFinished(f plan.FinishedRun, at time.Time) {
	if f.RunID == "" {
		return
	}
	if f.RunID != s.Tracking.RunID {
		if s.Tracking.RunOpen {
			// Another run is being followed; this one is stale.
			return
		}
		// The plan of this run was never seen (expired from the stream): take the run from its summary.
		s.Tracking.RunID = f.RunID
		s.Tracking.NotApplied = false
		if f.PlanID != "" {
			s.PlanID = f.PlanID
		}
		s.Tracking.Operations = nil
	}
	place := make(map[string]int, len(s.Tracking.Operations))
	for i, t := range s.Tracking.Operations {
		if _, dup := place[t.ID]; !dup {
			place[t.ID] = i
		}
	}
	for _, o := range f.Operations {
		state := o.State
		if state == plan.OpWaiting {
			state = plan.OpSkipped
		}
		i, ok := place[o.ID]
		if !ok {
			s.Tracking.Operations = append(s.Tracking.Operations, OpTrack{ID: o.ID, Ref: o.Ref, Action: o.Action})
			i = len(s.Tracking.Operations) - 1
			place[o.ID] = i
		}
		s.Tracking.Operations[i].State = state
		s.Tracking.Operations[i].Message = maskUPIDs(o.Message)
	}
	// Operations the summary does not list were never run.
	for i := range s.Tracking.Operations {
		if st := s.Tracking.Operations[i].State; st == plan.OpWaiting || st == plan.OpDispatched {
			s.Tracking.Operations[i].State = plan.OpSkipped
		}
	}
	s.Tracking.RunOpen = false
	s.Tracking.RunCompleted = true
	s.HeldPrunes = nil
	failed := s.countOps(plan.OpFailed)
	switch f.Outcome {
	case plan.OutcomeSucceeded:
		// An operator's rollback applies no commit: what was applied before stays the last applied.
		if !s.operatorRollback() {
			s.LastCommitApplied, s.LastTreeApplied, s.LastAppliedBy = f.Commit, f.Tree, f.RequestedBy
		}
		s.settleDone()
		s.succeeded(at)
	case plan.OutcomeFailed:
		s.settle(PhaseFailed, fmt.Sprintf("%s failed; the next plan retries", plural(failed, "operation")))
	case plan.OutcomeSuperseded:
		s.settle(PhasePlanning, "superseded by a newer commit")
	case plan.OutcomeNotApplied:
		if s.Tracking.SettledPhase == PhaseApplying || s.Tracking.SettledPhase == PhaseHeld {
			s.settle(PhaseDrifted, "not applied")
		}
	}
}

func (s *ClusterStatus) foldGaps(r inventory.GapReport) {
	r.Gaps, r.Security = slices.Clone(r.Gaps), slices.Clone(r.Security)
	r.Normalize()
	s.Gaps, s.Security = r.Gaps, r.Security
	if len(s.Gaps) == 0 {
		s.Gaps = nil
	}
	if len(s.Security) == 0 {
		s.Security = nil
	}
}

// foldNotify keeps the providers whose last delivery about the cluster failed, sorted by provider.
func (s *ClusterStatus) foldNotify(h NotificationHealth) {
	s.FailingNotifications = nil
	for _, d := range h.Providers {
		if !d.Failing {
			continue
		}
		d.Provider, d.Type, d.Event = clip(d.Provider, 64), clip(d.Type, 32), clip(d.Event, 32)
		d.DeliveryID, d.Message = clip(d.DeliveryID, 160), clip(d.Message, 512)
		s.FailingNotifications = append(s.FailingNotifications, d)
	}
	slices.SortFunc(s.FailingNotifications, func(a, b NotificationDelivery) int { return strings.Compare(a.Provider, b.Provider) })
	s.FailingNotifications = slices.CompactFunc(s.FailingNotifications, func(a, b NotificationDelivery) bool { return a.Provider == b.Provider })
}

// foldRefused records an operation an executor refused, keeping the latest MaxRefused.
func (s *ClusterStatus) foldRefused(r RefusedOperation) {
	s.Counters.Refused++
	r.Node, r.RunID, r.OpID = clip(r.Node, 64), clip(r.RunID, 64), clip(r.OpID, 64)
	r.Ref, r.Reason, r.Message = clip(r.Ref, 128), clip(r.Reason, 64), clip(r.Message, 512)
	if !slices.Contains(plan.Actions, r.Action) {
		r.Action = ""
	}
	r.VMID = max(r.VMID, 0)
	s.Refused = append(s.Refused, r)
	if n := len(s.Refused); n > MaxRefused {
		s.Refused = slices.Clone(s.Refused[n-MaxRefused:])
	}
}

// clip makes a text an operation claimed safe to show: one line of printable characters, at most n of
// them.
func clip(s string, n int) string {
	var b strings.Builder
	count := 0
	for _, r := range strings.Join(strings.Fields(s), " ") {
		if count == n {
			b.WriteString("…")
			break
		}
		if !unicode.IsPrint(r) {
			r = '?'
		}
		b.WriteRune(r)
		count++
	}
	return b.String()
}

func (s *ClusterStatus) countOps(st plan.OpState) int {
	n := 0
	for _, o := range s.Tracking.Operations {
		if o.State == st {
			n++
		}
	}
	return n
}

// derive recomputes everything that follows from the rest: the phase and its reason, resource states and
// counters. Given refs, only those resources are resolved again (when they are listed already).
func (s *ClusterStatus) derive(refs ...string) {
	if !s.reresolve(refs) {
		s.Resources = s.resourcesFor(nil, false)
	}
	ops := s.Tracking.Operations
	c := &s.Counters
	c.ActionsOK, c.ActionsErr, c.ActionsSkipped, c.Pruned = 0, 0, 0, 0
	if !s.Tracking.NotApplied {
		for _, o := range ops {
			switch o.State {
			case plan.OpSucceeded:
				c.ActionsOK++
				if o.Action == plan.ActionDelete {
					c.Pruned++
				}
			case plan.OpFailed:
				c.ActionsErr++
			case plan.OpSkipped, plan.OpSuperseded:
				c.ActionsSkipped++
			case plan.OpWaiting, plan.OpDispatched:
				// Not finished: counted once they are.
			}
		}
	}
	c.PruneDeferred, c.Skipped, c.Anomalies = 0, 0, 0
	for _, f := range s.Findings {
		switch f.Kind {
		case plan.FindingDeferredPrune:
			c.PruneDeferred++
		case plan.FindingSkipped:
			c.Skipped++
		case plan.FindingAnomaly, plan.FindingMisplaced:
			c.Anomalies++
		case plan.FindingPending, plan.FindingWarning, plan.FindingSuspended:
			// No counter of their own.
		}
	}
	c.Gaps = len(s.Gaps)
	c.SecurityWarnings = len(s.Security)
	c.Objects = len(s.Resources)
	c.Drifted = 0
	for _, r := range s.Resources {
		if r.State.Differs() {
			c.Drifted++
		}
	}

	done := 0
	for _, o := range ops {
		if opDone(o.State) {
			done++
		}
	}
	s.derivePhase(done, s.countOps(plan.OpFailed))
}

// derivePhase sets the phase and its reason; done and failed count the last plan's operations past
// dispatch and failed.
func (s *ClusterStatus) derivePhase(done, failed int) {
	pending := s.Tracking.SeenEventID != "" && s.Tracking.SeenEventID != s.Tracking.AnsweredEventID
	switch {
	case pending:
		s.Phase = PhasePlanning
		s.Reason = "waiting for the plan of commit " + shortCommit(s.LastCommitSeen)
	case s.Tracking.SettledPhase == PhaseApplying:
		s.Phase = PhaseApplying
		s.Reason = fmt.Sprintf("%d of %s done", done, plural(len(s.Tracking.Operations), "operation"))
		if failed > 0 {
			s.Reason += fmt.Sprintf(", %d failed", failed)
		}
	default:
		s.Phase = s.Tracking.SettledPhase
		s.Reason = s.Tracking.SettledReason
	}
	if s.Phase == "" {
		s.Phase = PhaseUnknown
	}
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// resourcesFor rebuilds the resource list: the declared refs (or, unless replace, the refs already listed),
// and every ref the last plan acts on or reports, with states from the plan's operations and findings. Node,
// vmid, last action and last error carry over from the previous records.
func (s *ClusterStatus) resourcesFor(declared []string, replace bool) []Resource {
	prev := make(map[string]Resource, len(s.Resources))
	for _, r := range s.Resources {
		prev[r.Ref()] = r
	}
	refs := map[string]bool{}
	if !replace {
		for ref := range prev {
			refs[ref] = true
		}
	} else {
		for _, ref := range declared {
			refs[ref] = true
		}
	}
	ops := map[string][]OpTrack{}
	for _, o := range s.Tracking.Operations {
		refs[o.Ref] = true
		ops[o.Ref] = append(ops[o.Ref], o)
	}
	findings := map[string][]plan.Finding{}
	for _, f := range s.Findings {
		if f.Ref != "" && f.Kind != plan.FindingWarning {
			refs[f.Ref] = true
			findings[f.Ref] = append(findings[f.Ref], f)
		}
	}
	out := make([]Resource, 0, len(refs))
	for ref := range refs {
		kind, name := SplitRef(ref)
		r := Resource{Kind: kind, Name: name}
		if old, ok := prev[ref]; ok {
			r.Node, r.VMID, r.LastAction, r.LastError = old.Node, old.VMID, old.LastAction, old.LastError
		}
		s.resolve(&r, ops[ref], findings[ref])
		out = append(out, r)
	}
	slices.SortFunc(out, CompareResources)
	if len(out) == 0 {
		return nil
	}
	return out
}

// reresolve resolves the listed resources again in place; false when refs is empty or one is not listed.
func (s *ClusterStatus) reresolve(refs []string) bool {
	if len(refs) == 0 {
		return false
	}
	for _, ref := range refs {
		kind, name := SplitRef(ref)
		i, ok := slices.BinarySearchFunc(s.Resources, Resource{Kind: kind, Name: name}, CompareResources)
		if !ok {
			return false
		}
		var ops []OpTrack
		for _, o := range s.Tracking.Operations {
			if o.Ref == ref {
				ops = append(ops, o)
			}
		}
		var findings []plan.Finding
		for _, f := range s.Findings {
			if f.Ref == ref && f.Kind != plan.FindingWarning {
				findings = append(findings, f)
			}
		}
		s.resolve(&s.Resources[i], ops, findings)
	}
	return true
}

// resolve sets a resource's state, reason, placement and last outcome from the last plan's operations and
// findings on it.
func (s *ClusterStatus) resolve(r *Resource, ops []OpTrack, findings []plan.Finding) {
	for _, o := range ops {
		if o.Node != "" {
			r.Node, r.VMID = o.Node, o.VMID
			break
		}
	}
	if len(ops) == 0 {
		for _, f := range findings {
			if f.Node != "" {
				r.Node, r.VMID = f.Node, f.VMID
				break
			}
		}
	}
	r.State, r.Reason, r.PruneReason = StateConverged, "", ""

	// The last operation that finished decides last action and error; but the rollback a run makes after a
	// failure undoes the change, it does not make it: the failure's message (which says it rolls back) stays.
	failedBefore := false
	for _, o := range ops {
		switch o.State {
		case plan.OpSucceeded:
			r.LastAction = o.Action
			if o.Action != plan.ActionRollback || !failedBefore {
				r.LastError = ""
			}
		case plan.OpFailed:
			r.LastAction, r.LastError = o.Action, o.Message
			failedBefore = true
		case plan.OpWaiting, plan.OpDispatched, plan.OpSkipped, plan.OpSuperseded:
			// Did not run to an end: no action taken.
		}
	}
	if len(ops) > 0 && !s.Tracking.NotApplied {
		r.State, r.Reason = opsState(ops)
	} else if len(ops) > 0 {
		lead := leadOp(ops)
		r.State, r.Reason = pendingState(lead), lead.Reason
	}
	for _, o := range ops {
		if o.Action == plan.ActionDelete && r.State == StateOrphan {
			r.PruneReason = o.Reason
		}
	}
	if r.State != StateConverged {
		return
	}
	// Findings speak for resources whose operations (if any) are done.
	for _, f := range findings {
		switch f.Kind {
		case plan.FindingAnomaly, plan.FindingMisplaced:
			r.State, r.Reason = StateAnomalous, f.Message
			return
		default:
			// The other kinds rank below anomalies: the next loop.
		}
	}
	for _, f := range findings {
		switch f.Kind {
		case plan.FindingSkipped:
			r.State, r.Reason = StateSkipped, f.Message
			return
		case plan.FindingDeferredPrune:
			r.State, r.Reason, r.PruneReason = StateSkipped, "prune deferred: "+f.Message, f.Message
			return
		case plan.FindingPending:
			r.State, r.Reason = StateDrift, f.Message
			return
		case plan.FindingSuspended:
			r.State, r.Reason = StateSuspended, f.Message
			return
		case plan.FindingAnomaly, plan.FindingMisplaced, plan.FindingWarning:
			// Anomalies were decided above; a warning leaves the state as it is.
		}
	}
}

// rollbackOutcome says how the rollback a run made after a failure ended ("" when it made none).
func rollbackOutcome(ops []OpTrack, failure OpTrack) string {
	for _, o := range ops {
		if o.Action != plan.ActionRollback || o.ID == failure.ID {
			continue
		}
		switch o.State {
		case plan.OpSucceeded:
			return "; rolled back to its safety snapshot: it is as it was before the plan"
		case plan.OpFailed:
			return "; the rollback to its safety snapshot failed too: " + o.Message
		case plan.OpWaiting, plan.OpDispatched:
			return "; rolling back to its safety snapshot"
		case plan.OpSkipped, plan.OpSuperseded:
			// Not run: nothing to say.
		}
	}
	return ""
}

// leadOp is the operation that says what is done to a resource: the first one, but a safety snapshot, which is
// how a change is made, not what it is.
func leadOp(ops []OpTrack) OpTrack {
	if i := slices.IndexFunc(ops, func(o OpTrack) bool { return o.Action != plan.ActionSnapshot }); i >= 0 {
		return ops[i]
	}
	return ops[0]
}

// pendingState is the state of a resource whose first operation has not run.
func pendingState(o OpTrack) ResourceState {
	switch o.Action {
	case plan.ActionCreate, plan.ActionClone, plan.ActionDownload:
		return StateDesired
	case plan.ActionDelete:
		return StateOrphan
	default:
		return StateDrift
	}
}

// opsState is a resource's state from the operations of an applied plan on it.
func opsState(ops []OpTrack) (ResourceState, string) {
	var failed, running, succeeded, notRun []OpTrack
	for _, o := range ops {
		switch o.State {
		case plan.OpFailed:
			failed = append(failed, o)
		case plan.OpDispatched:
			running = append(running, o)
		case plan.OpSucceeded:
			succeeded = append(succeeded, o)
		default:
			notRun = append(notRun, o)
		}
	}
	switch {
	case len(failed) > 0:
		return StateFailed, failed[0].Reason + rollbackOutcome(ops, failed[0])
	case len(running) > 0:
		return StateInProgress, running[0].Reason
	case len(notRun) == 0:
		if slices.ContainsFunc(succeeded, func(o OpTrack) bool { return o.Action == plan.ActionDelete }) {
			return StatePruned, ""
		}
		// A rollback that succeeded in a run where nothing failed is an operator's (the run's own rollback
		// follows a failure): the guest is rolled back and suspended from correction.
		if i := slices.IndexFunc(succeeded, func(o OpTrack) bool { return o.Action == plan.ActionRollback }); i >= 0 {
			return StateSuspended, "rolled back: " + succeeded[i].Reason + "; suspended from correction until a commit changes its manifest or an operator resumes it"
		}
		return StateConverged, ""
	}
	first := leadOp(notRun)
	if len(succeeded) > 0 && first.State == plan.OpWaiting {
		return StateInProgress, first.Reason
	}
	reason := first.Reason
	if first.State == plan.OpSkipped || first.State == plan.OpSuperseded {
		msg := first.Message
		if msg == "" {
			msg = string(first.State)
		}
		reason = strings.TrimSpace("not applied (" + msg + "): " + first.Reason)
		reason = strings.TrimSuffix(reason, ":")
	}
	return pendingState(first), reason
}

// stamp fills Timing after the report changed from prev. Resources, prev's resources and the timing are all
// sorted by kind, name, so one merge walk pairs them.
func (s *ClusterStatus) stamp(prev Report, at time.Time) {
	if at.IsZero() {
		return
	}
	s.Timing.UpdatedAt = at
	old := s.Timing.Resources
	out := make([]ResourceTiming, 0, len(s.Resources))
	i, j := 0, 0
	for _, r := range s.Resources {
		t := ResourceTiming{Kind: r.Kind, Name: r.Name}
		for i < len(old) && compareResourceTiming(old[i], t) < 0 {
			i++
		}
		if i < len(old) && compareResourceTiming(old[i], t) == 0 {
			t = old[i]
		}
		for j < len(prev.Resources) && CompareResources(prev.Resources[j], r) < 0 {
			j++
		}
		existed := j < len(prev.Resources) && CompareResources(prev.Resources[j], r) == 0
		var before Resource
		if existed {
			before = prev.Resources[j]
		}
		if !existed || before != r {
			t.UpdatedAt = at
		}
		if r.State == StateConverged && (!existed || before.State != StateConverged || t.LastConvergedAt.IsZero()) {
			t.LastConvergedAt = at
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		out = nil
	}
	s.Timing.Resources = out
}

// advance moves a waiting or dispatched operation to the state a result reports, with the result's message
// (task ids masked); a failure without a message says "failed".
func (op *OpTrack) advance(r plan.Result) {
	msg := maskUPIDs(r.Message)
	switch r.Status {
	case plan.StatusStarted, plan.StatusProgress:
		op.State = plan.OpDispatched
	case plan.StatusSucceeded:
		op.State, op.Message = plan.OpSucceeded, msg
	case plan.StatusFailed:
		op.State, op.Message = plan.OpFailed, msg
		if op.Message == "" {
			op.Message = "failed"
		}
	case plan.StatusSkipped:
		op.State, op.Message = plan.OpSkipped, msg
	}
}
