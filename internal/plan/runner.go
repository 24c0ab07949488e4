package plan

import (
	"fmt"
	"slices"
)

// OpState is the state of one operation within a run.
type OpState string

const (
	// OpWaiting: not yet dispatched.
	OpWaiting OpState = "waiting"
	// OpDispatched: published to its node; no final result yet.
	OpDispatched OpState = "dispatched"
	OpSucceeded  OpState = "succeeded"
	OpFailed     OpState = "failed"
	// OpSkipped: a dependency failed or was skipped.
	OpSkipped OpState = "skipped"
	// OpSuperseded: a newer commit arrived before it was dispatched.
	OpSuperseded OpState = "superseded"
)

func (s OpState) final() bool {
	return s == OpSucceeded || s == OpFailed || s == OpSkipped || s == OpSuperseded
}

// Outcome of a finished run.
type Outcome string

const (
	OutcomeSucceeded  Outcome = "succeeded"
	OutcomeFailed     Outcome = "failed"
	OutcomeSuperseded Outcome = "superseded"
	OutcomeNotApplied Outcome = "not-applied"
)

// OpOutcome is one operation's final state in a run.
type OpOutcome struct {
	ID      string
	Ref     string
	Action  Action
	State   OpState
	Message string
}

// Finished summarises a run.
type Finished struct {
	Outcome    Outcome
	Succeeded  int
	Failed     int
	Skipped    int
	Superseded int
	Operations []OpOutcome
}

// Run is the plan runner's state machine: which operations are ready to dispatch, which are skipped because
// a dependency failed, and when the plan is finished. It is fed results in any order, including duplicates
// and results replayed after a crash; it never dispatches an operation twice and keeps at most one operation
// per guest in flight. Each result costs time in proportion to the operations it makes ready or skips, not
// to the size of the plan.
type Run struct {
	ops     []Operation
	index   map[string]int
	state   []OpState
	message []string
	// busy maps a vmid to the index of its operation in flight.
	busy map[int]int
	// unmet counts each operation's dependencies that have not succeeded; dependants lists, per operation,
	// the operations that depend on it.
	unmet      []int
	dependants [][]int
	// ready holds the waiting operations whose dependencies all succeeded.
	ready map[int]struct{}
	// open counts the operations that are not final.
	open int
	// snapshotName is the name of the run's safety snapshots, when the run knows its id.
	snapshotName string
}

// NewRun starts a run of a plan. It fails when a dependency names an unknown operation or points forward.
func NewRun(p Plan) (*Run, error) {
	n := len(p.Operations)
	r := &Run{
		ops:        p.Operations,
		index:      make(map[string]int, n),
		state:      make([]OpState, n),
		message:    make([]string, n),
		busy:       make(map[int]int),
		unmet:      make([]int, n),
		dependants: make([][]int, n),
		ready:      make(map[int]struct{}),
		open:       n,
	}
	for i, op := range p.Operations {
		if _, dup := r.index[op.ID]; dup {
			return nil, fmt.Errorf("plan %s: duplicate operation id %q", p.ID, op.ID)
		}
		r.index[op.ID] = i
		r.state[i] = OpWaiting
	}
	for i, op := range p.Operations {
		for _, dep := range op.DependsOn {
			j, ok := r.index[dep]
			if !ok {
				return nil, fmt.Errorf("plan %s: operation %s depends on unknown operation %q", p.ID, op.ID, dep)
			}
			if j >= i {
				return nil, fmt.Errorf("plan %s: operation %s depends on %s, which is not before it", p.ID, op.ID, dep)
			}
			r.unmet[i]++
			r.dependants[j] = append(r.dependants[j], i)
		}
		if r.unmet[i] == 0 {
			r.ready[i] = struct{}{}
		}
	}
	return r, nil
}

// Ready returns the operations that may be dispatched now, in plan order: waiting, every dependency
// succeeded, and no other operation of the same guest in flight (or picked in this call).
func (r *Run) Ready() []Operation {
	if len(r.ready) == 0 {
		return nil
	}
	idx := make([]int, 0, len(r.ready))
	for i := range r.ready {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	var out []Operation
	picked := map[int]bool{}
	for _, i := range idx {
		op := r.ops[i]
		if op.VMID > 0 {
			if _, inFlight := r.busy[op.VMID]; inFlight || picked[op.VMID] {
				continue
			}
			picked[op.VMID] = true
		}
		out = append(out, op)
	}
	return out
}

// set moves operation i to state s, keeping the counts and the ready set.
func (r *Run) set(i int, s OpState) {
	was := r.state[i]
	if was == s {
		return
	}
	r.state[i] = s
	if was == OpWaiting {
		delete(r.ready, i)
	}
	if !was.final() && s.final() {
		r.open--
	}
	if s == OpSucceeded {
		for _, k := range r.dependants[i] {
			r.unmet[k]--
			if r.unmet[k] == 0 && r.state[k] == OpWaiting {
				r.ready[k] = struct{}{}
			}
		}
	}
}

// Dispatched records that an operation was published. It is a no-op for an operation that is not waiting.
func (r *Run) Dispatched(id string) error {
	i, ok := r.index[id]
	if !ok {
		return fmt.Errorf("unknown operation %q", id)
	}
	if r.state[i] != OpWaiting {
		return nil
	}
	r.set(i, OpDispatched)
	if vmid := r.ops[i].VMID; vmid > 0 {
		r.busy[vmid] = i
	}
	return nil
}

// Observe feeds a result. Started and progress results mark the operation dispatched (a run reloaded after
// a crash learns what was in flight); final results settle it and skip the dependants of a failure.
// Results for unknown operations, and results after an operation is final, are ignored; it reports whether
// the run's state changed.
func (r *Run) Observe(res Result) bool {
	i, ok := r.index[res.OpID]
	if !ok || r.state[i].final() {
		return false
	}
	switch res.Status {
	case StatusStarted, StatusProgress:
		if r.state[i] == OpWaiting {
			_ = r.Dispatched(res.OpID)
			return true
		}
		return false
	case StatusSucceeded:
		r.settle(i, OpSucceeded, res.Message)
	case StatusFailed:
		r.settle(i, OpFailed, res.Message)
		r.skipDependants(i)
		r.afterFailure(i)
	case StatusSkipped:
		r.settle(i, OpSkipped, res.Message)
		r.skipDependants(i)
	default:
		return false
	}
	return true
}

func (r *Run) settle(i int, s OpState, msg string) {
	r.set(i, s)
	r.message[i] = msg
	if vmid := r.ops[i].VMID; vmid > 0 && r.busy[vmid] == i {
		delete(r.busy, vmid)
	}
}

// skipDependants marks every waiting operation that depends, directly or not, on operation from (which did
// not succeed) as skipped, naming the first of its own dependencies that did not succeed. Dependencies
// point backwards, so visiting the affected operations in plan order settles each dependency first.
func (r *Run) skipDependants(from int) {
	seen := map[int]bool{}
	queue := []int{from}
	var affected []int
	for len(queue) > 0 {
		j := queue[0]
		queue = queue[1:]
		for _, k := range r.dependants[j] {
			if seen[k] || r.state[k] != OpWaiting {
				continue
			}
			seen[k] = true
			affected = append(affected, k)
			queue = append(queue, k)
		}
	}
	slices.Sort(affected)
	for _, i := range affected {
		for _, dep := range r.ops[i].DependsOn {
			j := r.index[dep]
			if s := r.state[j]; s == OpFailed || s == OpSkipped || s == OpSuperseded {
				r.set(i, OpSkipped)
				r.message[i] = fmt.Sprintf("skipped: %s %s did not succeed", r.ops[j].Ref, r.ops[j].Action)
				break
			}
		}
	}
}

// Supersede marks every operation not yet dispatched as superseded; those in flight finish normally.
func (r *Run) Supersede() {
	for i := range r.ops {
		if r.state[i] == OpWaiting {
			r.set(i, OpSuperseded)
			r.message[i] = "superseded by a newer commit"
		}
	}
}

// InFlight returns the ids of the operations dispatched without a final result, in plan order.
func (r *Run) InFlight() []string {
	var ids []string
	for i, op := range r.ops {
		if r.state[i] == OpDispatched {
			ids = append(ids, op.ID)
		}
	}
	return ids
}

// Operation returns an operation of the plan by id.
func (r *Run) Operation(id string) (Operation, bool) {
	i, ok := r.index[id]
	if !ok {
		return Operation{}, false
	}
	return r.ops[i], true
}

// State returns an operation's state.
func (r *Run) State(id string) (OpState, bool) {
	i, ok := r.index[id]
	if !ok {
		return "", false
	}
	return r.state[i], true
}

// Done reports whether every operation is final.
func (r *Run) Done() bool { return r.open == 0 }

// Finished summarises the run; call it when Done.
func (r *Run) Finished() Finished {
	var f Finished
	for i, op := range r.ops {
		switch r.state[i] {
		case OpSucceeded:
			f.Succeeded++
		case OpFailed:
			f.Failed++
		case OpSkipped:
			f.Skipped++
		case OpSuperseded:
			f.Superseded++
		case OpWaiting, OpDispatched:
			// Not finished: in none of the totals.
		}
		f.Operations = append(f.Operations, OpOutcome{ID: op.ID, Ref: op.Ref, Action: op.Action, State: r.state[i], Message: r.message[i]})
	}
	switch {
	case f.Failed > 0:
		f.Outcome = OutcomeFailed
	case f.Superseded > 0:
		f.Outcome = OutcomeSuperseded
	default:
		f.Outcome = OutcomeSucceeded
	}
	return f
}
