package executor_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/executor"
)

// replica is an in-process executor the test stops by cancelling its context.
type inProcReplica struct {
	cancel  context.CancelFunc
	stopped chan struct{}
	err     error
}

// runReplica starts an executor and waits until it serves; the test stops it with stop (or at its end).
func (e *env) runReplica(cfg executor.Config) *inProcReplica {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &inProcReplica{cancel: cancel, stopped: make(chan struct{})}
	ready := make(chan struct{})
	cfg.OnReady = func() { close(ready) }
	go func() {
		defer close(r.stopped)
		r.err = executor.Run(ctx, cfg)
	}()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-r.stopped:
		case <-time.After(30 * time.Second):
			e.t.Error("executor did not stop")
		}
	})
	select {
	case <-ready:
	case <-r.stopped:
		e.t.Fatalf("executor stopped before serving: %v", r.err)
	case <-time.After(20 * time.Second):
		e.t.Fatal("executor not ready")
	}
	return r
}

// stop cancels the replica's context and waits until Run returns.
func (r *inProcReplica) stop(t *testing.T, within time.Duration) error {
	t.Helper()
	r.cancel()
	select {
	case <-r.stopped:
		return r.err
	case <-time.After(within):
		t.Fatalf("executor still running %s after its context ended", within)
		return nil
	}
}

// createHold makes the simulator hold the create task of vmid for hold before its work and reports when
// that task starts and ends.
type createHold struct {
	started chan struct{}
	ended   atomic.Bool
}

func holdCreate(sim *pvesim.Sim, vmid int, hold time.Duration) *createHold {
	h := &createHold{started: make(chan struct{})}
	id := strconv.Itoa(vmid)
	sim.OnTask(func(ti pvesim.TaskInfo) error {
		if ti.Type != "qmcreate" || ti.ID != id {
			return nil
		}
		close(h.started)
		time.Sleep(hold)
		h.ended.Store(true)
		return nil
	})
	return h
}

// finals returns the final results of an operation on the results stream.
func (e *env) finals(op plan.Operation) []plan.Result {
	e.t.Helper()
	var out []plan.Result
	for _, r := range e.results() {
		if r.RunID == op.RunID && r.OpID == op.ID && r.Status.Final() {
			out = append(out, r)
		}
	}
	return out
}

// On shutdown the executor stops fetching and lets the operation in flight finish within ShutdownGrace:
// its result is reported by the stopping replica, and an operation queued after the shutdown began is left
// for the next replica.
func TestShutdownLetsTheRunningOperationFinishAndFetchesNothingNew(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	hold := holdCreate(e.sim, 150, 800*time.Millisecond)
	cfg := e.config()
	cfg.Replica, cfg.ShutdownGrace = "a", 15*time.Second
	a := e.runReplica(cfg)

	first := e.dispatch(createOp(150))
	select {
	case <-hold.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the create task never started")
	}
	a.cancel()
	second := e.dispatch(createOp(151))
	if err := a.stop(t, 15*time.Second); err != nil {
		t.Fatalf("executor stopped with %v", err)
	}
	if !hold.ended.Load() {
		t.Fatal("Run returned while its operation's task was still running")
	}
	got := e.finals(first)
	if len(got) != 1 || got[0].Status != plan.StatusSucceeded || got[0].Executor != "a" || got[0].Attempt != 1 {
		t.Fatalf("final results of the operation running at shutdown: %+v, want one success by replica a", got)
	}
	if !e.sim.Exists(150) {
		t.Fatal("guest 150 missing after its create succeeded")
	}
	if n := len(e.finals(second)); n != 0 || e.sim.Exists(151) {
		t.Fatalf("the stopping replica took an operation queued after shutdown began (%d results, guest exists %v)",
			n, e.sim.Exists(151))
	}

	cfg.Replica = "b"
	e.runReplica(cfg)
	r := e.mustSucceed(second)
	if r.Executor != "b" {
		t.Errorf("queued operation applied by %q, want the next replica b", r.Executor)
	}
	if n := e.creates(); n != 2 {
		t.Errorf("%d create requests reached PVE, want 2 (one per operation)", n)
	}
	if got := e.finals(first); len(got) != 1 {
		t.Errorf("%d final results for the first operation, want 1", len(got))
	}
}

// An operation still running when ShutdownGrace ends is handed back at once (NAK without delay): the next
// replica takes it, re-attaches to the PVE task by the UPID the journal holds, and reports it; PVE sees
// one create.
func TestShutdownHandsBackAnOperationThatOutlastsTheGrace(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	hold := holdCreate(e.sim, 160, 3*time.Second)
	cfg := e.config()
	cfg.Replica, cfg.ShutdownGrace = "a", 200*time.Millisecond
	a := e.runReplica(cfg)

	op := e.dispatch(createOp(160))
	select {
	case <-hold.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the create task never started")
	}
	if err := a.stop(t, 10*time.Second); err != nil {
		t.Fatalf("executor stopped with %v", err)
	}
	if hold.ended.Load() {
		t.Fatal("Run waited for the task instead of handing the operation back after its shutdown grace")
	}
	if got := e.finals(op); len(got) != 0 {
		t.Fatalf("the stopping replica reported %+v for an operation it did not finish", got)
	}
	key, _ := bus.OpKey(cluster, op.Node, op.RunID, op.ID)
	m := wire.NewOperationRecord()
	if _, err := e.bus.GetProto(testContext(t), bus.BucketOps, key, m); err != nil {
		t.Fatalf("operation record: %v", err)
	}
	rec, err := wire.OperationRecordFromProto(m)
	if err != nil || rec.UPID == "" || rec.Status.Final() {
		t.Fatalf("operation record after the hand-back %+v (%v): want the task's UPID and no outcome", rec, err)
	}

	cfg.Replica = "b"
	start := time.Now()
	e.runReplica(cfg)
	r := e.mustSucceed(op)
	t.Logf("taken over and finished in %s", time.Since(start))
	if r.Executor != "b" || r.Attempt != 2 || r.UPID != rec.UPID {
		t.Errorf("result %+v: want replica b, attempt 2, the handed-back task %s", r, rec.UPID)
	}
	if n := e.creates(); n != 1 {
		t.Errorf("%d create requests reached PVE, want 1", n)
	}
	if got := e.finals(op); len(got) != 1 {
		t.Errorf("%d final results, want 1", len(got))
	}
	if !hold.ended.Load() || !e.sim.Exists(160) {
		t.Error("guest 160 missing after its create was reported successful")
	}
}
