package report

import (
	"cmp"
	"slices"

	"github.com/proxops/proxops/internal/plan"
)

// Completion is a reconcile that an event completed: a run finished, a plan that had nothing to do or was
// only shown, or a rejection. Metrics count them.
type Completion struct {
	// Result is ok, failed, superseded, dry_run, suspended, or the rejection's reason (parse_error,
	// unknown_node, secrets, observe_failed, cannot_create, plan_error).
	Result string
	// Operations are the final states of the run's operations (empty unless a run finished).
	Operations []plan.OpOutcome
}

// Completion results beside the rejection reasons.
const (
	ResultOK         = "ok"
	ResultFailed     = "failed"
	ResultSuperseded = "superseded"
	ResultDryRun     = "dry_run"
	ResultSuspended  = "suspended"
)

// Change says what folding one event did to one cluster.
type Change struct {
	Cluster string
	// Before and After are the cluster's status around the event (Before is New(cluster) for a cluster seen
	// for the first time).
	Before, After ClusterStatus
	// Completed is set when the event completed a reconcile.
	Completed *Completion
}

// Changed reports whether the report changed.
func (c Change) Changed() bool { return c.After.Revision != c.Before.Revision }

// Fleet holds the status of every cluster and folds events into them. A repository event applies to every
// cluster it concerns; a cluster seen for the first time starts from the latest repository event that
// concerns it, so the result does not depend on whether the cluster's first plan or the event came first.
type Fleet struct {
	clusters map[string]ClusterStatus
	// index lets results be folded in place, per cluster; shared marks the clusters whose status was handed
	// out since, and is copied before it is next changed in place.
	index  map[string]*resultIndex
	shared map[string]bool
	// The latest repository event for every cluster, and per cluster the latest restricted to a list.
	repoAll *repoMark
	repoFor map[string]repoMark
	n       int
}

// repoMark is a repository event and its place in the order they were folded.
type repoMark struct {
	e Event
	n int
}

// NewFleet starts from statuses loaded from storage.
func NewFleet(loaded ...ClusterStatus) *Fleet {
	f := &Fleet{clusters: map[string]ClusterStatus{}, repoFor: map[string]repoMark{}, index: map[string]*resultIndex{},
		shared: map[string]bool{}}
	for _, s := range loaded {
		f.clusters[s.Cluster] = s
	}
	return f
}

// Status returns one cluster's status.
func (f *Fleet) Status(cluster string) (ClusterStatus, bool) {
	s, ok := f.clusters[cluster]
	f.shared[cluster] = ok
	return s, ok
}

// Statuses returns every cluster's status, sorted by cluster name.
func (f *Fleet) Statuses() []ClusterStatus {
	out := make([]ClusterStatus, 0, len(f.clusters))
	for _, s := range f.clusters {
		out = append(out, s)
		f.shared[s.Cluster] = true
	}
	slices.SortFunc(out, func(a, b ClusterStatus) int { return cmp.Compare(a.Cluster, b.Cluster) })
	return out
}

// ResumeFrom returns, for a stream, the sequence to read from so that no cluster misses an event: one past
// the lowest sequence any cluster has folded (1 when there is no cluster). Events below a cluster's own
// sequence are skipped by Apply.
func (f *Fleet) ResumeFrom(s Stream) uint64 {
	if len(f.clusters) == 0 {
		return 1
	}
	low := ^uint64(0)
	for _, c := range f.clusters {
		low = min(low, c.Tracking.Seq(s))
	}
	return low + 1
}

// Apply folds one event and returns what it did to each cluster it concerns, sorted by cluster. A result
// is folded in place, at a cost that does not grow with the plan: the Before and After of its Change share
// their slices with the Fleet's status and are only good until the next Apply (their other fields stay).
func (f *Fleet) Apply(e Event) []Change {
	if e.Repo != nil {
		return f.applyRepo(e)
	}
	cluster := e.Cluster()
	if cluster == "" {
		return nil
	}
	if e.Result != nil {
		if ch, ok := f.applyResult(cluster, e); ok {
			return ch
		}
	}
	delete(f.index, cluster)
	before, known := f.clusters[cluster]
	start := before
	if !known {
		before = New(cluster)
		start = before
		if r := f.latestRepo(cluster); r != nil {
			start, _ = Apply(start, *r)
		}
	}
	after, folded := Apply(start, e)
	if !folded && known {
		return nil
	}
	f.clusters[cluster] = after
	ch := Change{Cluster: cluster, Before: before, After: after}
	if folded {
		ch.Completed = completion(start, after, e)
	}
	return []Change{ch}
}

// applyResult folds a result into a known cluster in place; false when Apply must fold it.
func (f *Fleet) applyResult(cluster string, e Event) ([]Change, bool) {
	s, known := f.clusters[cluster]
	if !known || e.Preview() {
		return nil, false
	}
	if e.Seq != 0 && e.Seq <= s.Tracking.ResultsSeq {
		return nil, true
	}
	ix := f.index[cluster]
	if !ix.fits(&s) {
		if ix = newResultIndex(&s); ix == nil {
			return nil, false
		}
		f.index[cluster] = ix
	}
	if f.shared[cluster] {
		s = s.clone()
	}
	before := s
	if !ix.fold(&s, e) {
		delete(f.index, cluster)
		return nil, false
	}
	f.shared[cluster] = false
	f.clusters[cluster] = s
	return []Change{{Cluster: cluster, Before: before, After: s}}, true
}

func (f *Fleet) applyRepo(e Event) []Change {
	if e.Preview() {
		return nil
	}
	f.n++
	mark := repoMark{e: e, n: f.n}
	if len(e.Repo.Clusters) == 0 {
		f.repoAll = &mark
	} else {
		for _, c := range e.Repo.Clusters {
			f.repoFor[c] = mark
		}
	}
	var out []Change
	for _, s := range f.Statuses() {
		after, folded := Apply(s, e)
		if !folded {
			continue
		}
		delete(f.index, s.Cluster)
		f.clusters[s.Cluster] = after
		out = append(out, Change{Cluster: s.Cluster, Before: s, After: after})
	}
	return out
}

func (f *Fleet) latestRepo(cluster string) *Event {
	one, restricted := f.repoFor[cluster]
	switch {
	case f.repoAll == nil && !restricted:
		return nil
	case f.repoAll == nil || (restricted && one.n > f.repoAll.n):
		return &one.e
	default:
		return &f.repoAll.e
	}
}

// completion says which reconcile, if any, the event completed.
func completion(before, after ClusterStatus, e Event) *Completion {
	if e.Preview() {
		return nil
	}
	switch {
	case e.Rejected != nil:
		reason := e.Rejected.Rejection.Reason
		if reason == "" {
			reason = plan.RejectInternal
		}
		return &Completion{Result: reason}
	case e.Planned != nil:
		if !after.Tracking.RunCompleted || after.Tracking.RunID != e.Planned.RunID || after.PlanID != e.Planned.Plan.ID {
			return nil
		}
		switch {
		case e.Planned.Suspended:
			return &Completion{Result: ResultSuspended}
		case after.Tracking.NotApplied:
			return &Completion{Result: ResultDryRun}
		default:
			return &Completion{Result: ResultOK}
		}
	case e.Finished != nil:
		if before.Tracking.RunCompleted && before.Tracking.RunID == e.Finished.RunID {
			return nil
		}
		if after.Tracking.RunID != e.Finished.RunID {
			return nil
		}
		c := &Completion{Operations: e.Finished.Operations}
		switch e.Finished.Outcome {
		case plan.OutcomeSucceeded:
			c.Result = ResultOK
		case plan.OutcomeFailed:
			c.Result = ResultFailed
		case plan.OutcomeSuperseded:
			c.Result = ResultSuperseded
		default:
			return nil
		}
		return c
	}
	return nil
}
