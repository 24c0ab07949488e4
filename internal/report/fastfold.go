package report

import "github.com/proxops/proxops/internal/plan"

// resultIndex lets a Fleet fold an operation result into a cluster's status in place, at a cost that does
// not grow with the plan: Apply copies the whole status and derives every resource and counter again, which
// over a run of n operations costs n². The index is built once per plan (from the status it was built on) and
// dropped whenever anything but a result is folded into the cluster.
type resultIndex struct {
	runID string
	ops   int
	// opByID maps an operation id to its place in Tracking.Operations; opsByRef and findingsByRef list, per
	// resource, its operations and its findings (warnings aside) in order.
	opByID        map[string]int
	opsByRef      map[string][]int
	findingsByRef map[string][]int
	// done and failed count the operations past dispatch and the failed ones (the applying reason).
	done, failed int
}

// newResultIndex indexes a status, or returns nil when its timing does not pair with its resources one to
// one (a status folded without event times), which the fast fold relies on.
func newResultIndex(s *ClusterStatus) *resultIndex {
	if len(s.Timing.Resources) != len(s.Resources) {
		return nil
	}
	for i, r := range s.Resources {
		t := s.Timing.Resources[i]
		if t.Kind != r.Kind || t.Name != r.Name || (r.State == StateConverged && t.LastConvergedAt.IsZero()) {
			return nil
		}
	}
	ix := &resultIndex{runID: s.Tracking.RunID, ops: len(s.Tracking.Operations), opByID: map[string]int{},
		opsByRef: map[string][]int{}, findingsByRef: map[string][]int{}}
	for i, o := range s.Tracking.Operations {
		ix.opByID[o.ID] = i
		ix.opsByRef[o.Ref] = append(ix.opsByRef[o.Ref], i)
		if opDone(o.State) {
			ix.done++
		}
		if o.State == plan.OpFailed {
			ix.failed++
		}
	}
	for i, f := range s.Findings {
		if f.Ref != "" && f.Kind != plan.FindingWarning {
			ix.findingsByRef[f.Ref] = append(ix.findingsByRef[f.Ref], i)
		}
	}
	return ix
}

func opDone(st plan.OpState) bool { return st != plan.OpWaiting && st != plan.OpDispatched }

// fits reports whether the index was built for the status's current plan.
func (ix *resultIndex) fits(s *ClusterStatus) bool {
	return ix != nil && ix.runID == s.Tracking.RunID && ix.ops == len(s.Tracking.Operations)
}

// fold folds a result event (already known to be about the cluster and not folded before) into s in
// place, exactly as Apply would. It returns false, having changed nothing, when the event needs Apply.
func (ix *resultIndex) fold(s *ClusterStatus, e Event) bool {
	r := e.Result
	if e.At.IsZero() || s.Tracking.SettledPhase == PhaseHeld {
		return false
	}
	kind, name := SplitRef(r.Ref)
	ri, listed := s.resourceIndex(kind, name)
	if !listed {
		return false
	}
	before := s.Resources[ri]
	counters, phase, reason := s.Counters, s.Phase, s.Reason

	if k, ok := ix.opByID[r.OpID]; ok && s.Tracking.RunOpen && r.RunID != "" && r.RunID == s.Tracking.RunID {
		op := &s.Tracking.Operations[k]
		if op.State == plan.OpWaiting || op.State == plan.OpDispatched {
			old := op.State
			op.advance(*r)
			ix.count(s, *op, old, -1)
			ix.count(s, *op, op.State, +1)
		}
	}
	ops := make([]OpTrack, 0, len(ix.opsByRef[r.Ref]))
	for _, k := range ix.opsByRef[r.Ref] {
		ops = append(ops, s.Tracking.Operations[k])
	}
	findings := make([]plan.Finding, 0, len(ix.findingsByRef[r.Ref]))
	for _, k := range ix.findingsByRef[r.Ref] {
		findings = append(findings, s.Findings[k])
	}
	s.resolve(&s.Resources[ri], ops, findings)
	after := s.Resources[ri]
	if before.State.Differs() {
		s.Counters.Drifted--
	}
	if after.State.Differs() {
		s.Counters.Drifted++
	}
	s.derivePhase(ix.done, ix.failed)

	s.Tracking.setSeq(StreamResults, max(e.Seq, s.Tracking.ResultsSeq))
	s.Timing.LastEventAt = e.At
	if before == after && counters == s.Counters && phase == s.Phase && reason == s.Reason {
		return true
	}
	s.Revision++
	s.Timing.UpdatedAt = e.At
	t := &s.Timing.Resources[ri]
	if before != after {
		t.UpdatedAt = e.At
	}
	if after.State == StateConverged && (before.State != StateConverged || t.LastConvergedAt.IsZero()) {
		t.LastConvergedAt = e.At
	}
	return true
}

// count adds (sign +1) or removes (-1) what an operation in state st contributes to the counters and to
// the applying reason.
func (ix *resultIndex) count(s *ClusterStatus, o OpTrack, st plan.OpState, sign int) {
	if opDone(st) {
		ix.done += sign
	}
	if st == plan.OpFailed {
		ix.failed += sign
	}
	if s.Tracking.NotApplied {
		return
	}
	c := &s.Counters
	switch st {
	case plan.OpSucceeded:
		c.ActionsOK += sign
		if o.Action == plan.ActionDelete {
			c.Pruned += sign
		}
	case plan.OpFailed:
		c.ActionsErr += sign
	case plan.OpSkipped, plan.OpSuperseded:
		c.ActionsSkipped += sign
	case plan.OpWaiting, plan.OpDispatched:
		// Not finished: counted once they are.
	}
}

func (s *ClusterStatus) resourceIndex(kind, name string) (int, bool) {
	return binarySearchResource(s.Resources, kind, name)
}
