package planner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

// execute runs a published plan to its end: it waits for a confirmation when the plan is held, publishes
// every ready operation to its node's work queue (<run>.<op> as message id, so a re-publication after a
// takeover is stored once), takes results in, records ownership, supersedes what is not dispatched yet when
// a newer event arrives, and publishes PlanFinished. A resumed run (one taken over from another planner) reads
// the results already stored before its first dispatch; the runner ignores duplicates and never dispatches an
// operation twice.
func (d *driver) execute(ctx context.Context, planned plan.Planned, ctl wire.ClusterControl, resumed, heldPublished bool) error {
	pl := planned.Plan
	runID := planned.RunID
	log := d.log.With("run_id", runID, "plan_id", pl.ID)
	r, err := plan.NewRun(pl)
	if err == nil {
		r.NameSnapshots(pl.ID)
	}
	if err != nil {
		// A plan the runner refuses is a defect; close the run as failed rather than leave it open.
		log.Error("plan cannot be run", "err", err)
		f := plan.Finished{Outcome: plan.OutcomeFailed}
		return d.finish(ctx, planned, f, log)
	}
	if planned.DryRun || planned.Suspended {
		f, _ := notApplied(pl)
		return d.finish(ctx, planned, f, log)
	}
	d.recordsAfter = recordsAfter(pl)
	d.planned = &planned
	for _, rec := range pl.ObjectRecords {
		if err := d.recordObject(ctx, runID, rec, log); err != nil {
			// The executors refuse to write to the object until it is recorded: its operations fail visibly.
			log.Error("ownership record not written", "kind", rec.Kind, "id", rec.ID, "err", err)
		}
	}
	for _, rec := range pl.Record {
		if rec.After == "" {
			if err := d.recordOwned(ctx, runID, rec.Owned, log); err != nil {
				// The executors refuse to write to the guest until it is recorded: its operations fail visibly.
				log.Error("ownership record not written", "vmid", rec.Owned.VMID, "err", err)
			}
		}
	}
	since := map[string]time.Time{}
	from := ctl.RunResultsSeq + 1
	if resumed {
		// Taking over an open run: what its operations already did is read before anything is dispatched,
		// so no operation that started or finished is published again.
		if from, err = d.reloadResults(ctx, r, pl, runID, from, since, log); err != nil {
			return err
		}
	}
	results := make(chan plan.Result, 256)
	fctx, stopFollow := context.WithCancel(ctx)
	defer stopFollow()
	go d.followResults(fctx, runID, from, results)

	held := pl.Held
	if held {
		if ok, err := d.confirmed(ctx, pl.ID, ctl.RunPlansSeq); err != nil {
			return err
		} else if ok {
			held = false
			log.Info("plan confirmed")
		} else if !heldPublished {
			h := plan.Held{RunInfo: planned.RunInfo, Reason: pl.HeldReason, Prunes: pl.HeldPrunes}
			if err := d.publish(ctx, runID, bus.PlanHeld, h); err != nil {
				return err
			}
			log.Warn("plan held until confirmed", "reason", pl.HeldReason, "prunes", len(pl.HeldPrunes))
		}
	}
	superseded := false
	tick := time.NewTicker(d.p.cfg.Tick)
	defer tick.Stop()
	for {
		if !held {
			for _, op := range r.Ready() {
				if err := d.dispatch(ctx, planned, op); err != nil {
					return err
				}
				_ = r.Dispatched(op.ID)
				since[op.ID] = time.Now()
				log.Debug("operation dispatched", "op_id", op.ID, "node", op.Node, "vmid", op.VMID, "action", string(op.Action))
			}
		}
		if r.Done() {
			break
		}
		look := false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case res := <-results:
			d.take(ctx, r, pl, runID, res, since, log)
		case <-d.wake:
			look = true
		case <-tick.C:
			look = true
			d.lookUpStale(ctx, r, pl, runID, since, log)
		}
		if !look {
			continue
		}
		// A newer event for another commit or tree supersedes what is not dispatched yet; a request for the
		// same tree (an operator's apply of the commit being applied) waits for the run's end, unless the plan
		// is held: nothing of it ran, and the request is planned afresh (and confirmed, with apply --yes).
		now, _, err := d.p.readControl(ctx, d.cluster)
		if err == nil && !superseded && now.WantSeq > ctl.RunWantSeq && (held || !equalEvent(planned.Repo, planned.Tree, planned.Commit, now.Want)) {
			superseded = true
			r.Supersede()
			log.Info("superseded by a newer event; operations in flight finish", "event_id", now.Want.EventID,
				"commit", now.Want.Commit, "tree", now.Want.Tree, "in_flight", len(r.InFlight()))
		}
		if held && !superseded {
			if ok, err := d.confirmed(ctx, pl.ID, ctl.RunPlansSeq); err == nil && ok {
				held = false
				log.Info("plan confirmed")
			}
		}
	}
	return d.finish(ctx, planned, r.Finished(), log)
}

// dispatch signs one operation and publishes it on its node's work queue.
func (d *driver) dispatch(ctx context.Context, planned plan.Planned, op plan.Operation) error {
	op.RunID, op.PlanID = planned.RunID, planned.PlanID
	switch op.Action {
	case plan.ActionSnapshot:
		if err := d.nameSnapshot(ctx, planned, &op, d.log); err != nil {
			return err
		}
	case plan.ActionRollback:
		op = op.ForRun(planned.PlanID, planned.Commit)
	default:
		// Only the snapshot operations are named by their run.
	}
	subject, err := bus.OpSubject(d.cluster, op.Node)
	if err != nil {
		return err
	}
	m, err := wire.SignOperation(op, d.p.cfg.Signer.Sign)
	if err != nil {
		return err
	}
	if d.leaseLost() {
		return context.Canceled
	}
	if _, err := d.p.bus.Publish(ctx, subject, m, bus.WithMsgID(op.RunID+"."+op.ID)); err != nil {
		return err
	}
	d.p.metrics.dispatched.Inc()
	return nil
}

// take feeds one result of the run to the runner and records what its success makes ProxOps'. The ownership
// records a success makes (a create's, a clone's, a claim's) are written before the runner learns of it, so
// before any operation that depends on it is dispatched: executors write only to guests recorded so. When a
// record cannot be written, the operation counts as failed and its dependants are skipped.
func (d *driver) take(ctx context.Context, r *plan.Run, pl plan.Plan, runID string, res plan.Result, since map[string]time.Time, log *slog.Logger) {
	l := log.With("op_id", res.OpID, "vmid", res.VMID, "action", string(res.Action), "node", res.Node)
	if res.Status == plan.StatusSucceeded && unsettled(r, res.OpID) {
		if err := d.recordAfter(ctx, pl, runID, res, l); err != nil {
			l.Error("operation succeeded but its ownership record was not written; it counts as failed", "err", err)
			res.Status, res.ErrorClass, res.Message = plan.StatusFailed, plan.ErrorRetryable, err.Error()
		}
	}
	if !r.Observe(res) || !res.Status.Final() {
		return
	}
	delete(since, res.OpID)
	d.p.metrics.results.WithLabelValues(string(res.Status)).Inc()
	if res.Status != plan.StatusSucceeded {
		l.Warn("operation did not succeed", "status", string(res.Status), "class", string(res.ErrorClass), "message", res.Message)
		return
	}
	l.Info("operation succeeded", "already_done", res.AlreadyDone, "upid", res.UPID)
	// The run holds the plan's operations by id: looking one up in the plan walked all of them, twice for
	// every result.
	op, found := r.Operation(res.OpID)
	if res.Action == plan.ActionDelete && res.VMID > 0 {
		d.forgetOwned(ctx, res.VMID, l)
		if found {
			// PVE's purge removed the guest's HA resource with the guest.
			d.forgetRecordedObject(ctx, manifest.ObjectKindHAResource, haSID(op.GuestType, res.VMID), l)
		}
	}
	if found && (op.Action == plan.ActionDeletePool || op.Action == plan.ActionDeleteBackupJob ||
		op.Action == plan.ActionDeleteHAResource || op.Action == plan.ActionDeleteHARule || op.Action == plan.ActionDeleteFirewallObject) {
		if kind, id, ok := plan.ObjectOf(op); ok {
			d.forgetObject(ctx, kind, id, l)
		}
	}
	d.tookSnapshot(ctx, pl, res, l)
	if found && op.Action == plan.ActionRollback {
		if by, _ := op.Param(plan.RequestedByParam); by != "" && d.planned != nil {
			d.suspendAfterRollback(ctx, *d.planned, op, l)
		}
	}
}

// unsettled reports whether an operation of the run still waits for its final result.
func unsettled(r *plan.Run, id string) bool {
	st, ok := r.State(id)
	return ok && (st == plan.OpWaiting || st == plan.OpDispatched)
}

// recordAfter writes the ownership records that a succeeded operation makes, and returns an error naming the
// first record it could not write.
func (d *driver) recordAfter(ctx context.Context, pl plan.Plan, runID string, res plan.Result, log *slog.Logger) error {
	for _, i := range d.recordsAfter[res.OpID] {
		rec := pl.Record[i]
		if rec.After != res.OpID {
			continue
		}
		o := rec.Owned
		if o.Fingerprint == "" {
			o.Fingerprint = res.Fingerprint
		}
		if o.Fingerprint == "" {
			key, _ := bus.OwnedKey(d.cluster, o.VMID)
			return fmt.Errorf("ownership record %s (%s) not written: the result carries no identity fingerprint", key, bus.BucketOwned)
		}
		if err := d.recordOwned(ctx, runID, o, log); err != nil {
			return err
		}
	}
	return nil
}

// recordsAfter indexes a plan's ownership records by the operation whose success writes them, so taking a
// result costs the same whatever the plan's size.
func recordsAfter(pl plan.Plan) map[string][]int {
	out := map[string][]int{}
	for i, rec := range pl.Record {
		if rec.After != "" {
			out[rec.After] = append(out[rec.After], i)
		}
	}
	return out
}

// reloadResults feeds the run's results stored from sequence from up to the end of the results stream into
// the runner, and returns the sequence to follow on from.
func (d *driver) reloadResults(ctx context.Context, r *plan.Run, pl plan.Plan, runID string, from uint64,
	since map[string]time.Time, log *slog.Logger) (uint64, error) {
	filter, err := bus.ResultFilter(d.cluster)
	if err != nil {
		return from, err
	}
	n := 0
	err = d.p.bus.ReadStream(ctx, bus.StreamResults, filter, from, func(m *bus.Message) error {
		from = m.Sequence + 1
		res, ok := d.runResult(ctx, m, runID)
		if !ok {
			return nil
		}
		n++
		d.take(ctx, r, pl, runID, res, since, log)
		return nil
	})
	if err != nil {
		return from, fmt.Errorf("reload the results of run %s: %w", runID, err)
	}
	log.Info("results of the run reloaded", "results", n, "in_flight", len(r.InFlight()))
	return from, nil
}

// runResult decodes a message of the results stream; ok is false when it is undecodable (logged and
// skipped) or belongs to another run.
func (d *driver) runResult(ctx context.Context, m *bus.Message, runID string) (plan.Result, bool) {
	res, err := wire.DecodeResult(ctx, m.Decode)
	if err != nil {
		d.log.Warn("undecodable result ignored", "seq", m.Sequence, "err", err)
		return plan.Result{}, false
	}
	return res, res.RunID == runID
}

// followResults sends the run's results from sequence from on, following the stream; it picks up again
// after a failure where it stopped.
func (d *driver) followResults(ctx context.Context, runID string, from uint64, out chan<- plan.Result) {
	filter, _ := bus.ResultFilter(d.cluster)
	for ctx.Err() == nil {
		err := d.p.bus.Follow(ctx, bus.StreamResults, []string{filter}, from, func(m *bus.Message, _ time.Time) error {
			from = m.Sequence + 1
			res, ok := d.runResult(ctx, m, runID)
			if !ok {
				return nil
			}
			select {
			case out <- res:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if ctx.Err() != nil {
			return
		}
		d.log.Warn("following results failed; picking up again", "err", err, "from_seq", from)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// lookUpStale reads the executor's journal of operations in flight for long: an outcome recorded there
// whose result message never arrived is taken as the result, so no run waits forever on a lost message.
func (d *driver) lookUpStale(ctx context.Context, r *plan.Run, pl plan.Plan, runID string, since map[string]time.Time, log *slog.Logger) {
	for _, id := range r.InFlight() {
		at, ok := since[id]
		if !ok {
			since[id] = time.Now()
			continue
		}
		if time.Since(at) < d.p.cfg.StaleResult {
			continue
		}
		since[id] = time.Now()
		op, ok := r.Operation(id)
		if !ok {
			continue
		}
		// A run opened before records named their node finds them under their old key.
		m := wire.NewOperationRecord()
		if _, err := d.p.bus.GetOpRecord(ctx, d.cluster, op.Node, runID, id, m); err != nil {
			continue
		}
		rec, err := wire.OperationRecordFromProto(m)
		if err != nil || !rec.Status.Final() {
			continue
		}
		log.Info("outcome taken from the operation journal", "op_id", id, "status", string(rec.Status))
		d.take(ctx, r, pl, runID, plan.Result{RunID: runID, OpID: id, PlanID: pl.ID, Cluster: d.cluster, Node: op.Node,
			VMID: op.VMID, GuestType: op.GuestType, Ref: op.Ref, Action: op.Action, Status: rec.Status, Message: rec.Message,
			UPID: rec.UPID, Fingerprint: rec.Fingerprint}, since, log)
	}
}

// confirmed reports whether a confirmation of the plan's content id arrived since the run started.
func (d *driver) confirmed(ctx context.Context, planID string, from uint64) (bool, error) {
	subject, err := bus.ConfirmSubject(d.cluster)
	if err != nil {
		return false, err
	}
	found := false
	err = d.p.bus.ReadStream(ctx, bus.StreamPlans, subject, from+1, func(m *bus.Message) error {
		c, err := wire.DecodeConfirmation(ctx, m.Decode)
		if err != nil {
			d.log.Warn("undecodable confirmation ignored", "seq", m.Sequence, "err", err)
			return nil
		}
		if c.PlanID == planID && c.Cluster == d.cluster {
			found = true
		}
		return nil
	})
	return found, err
}

// finish publishes the run's end and closes it.
func (d *driver) finish(ctx context.Context, planned plan.Planned, f plan.Finished, log *slog.Logger) error {
	if planned.DryRun || planned.Suspended {
		f.Outcome = plan.OutcomeNotApplied
	}
	fr := plan.FinishedRun{RunInfo: planned.RunInfo, Finished: f, At: time.Now().UTC()}
	if err := d.publish(ctx, planned.RunID, bus.PlanFinished, fr); err != nil {
		return err
	}
	d.p.metrics.runs.WithLabelValues(string(f.Outcome)).Inc()
	log.Info("run finished", "outcome", string(f.Outcome), "succeeded", f.Succeeded, "failed", f.Failed,
		"skipped", f.Skipped, "superseded", f.Superseded)
	return d.done(ctx, planned.RunID)
}

// recordOwned stores a guest in the ownership inventory; the error names the record.
func (d *driver) recordOwned(ctx context.Context, runID string, o plan.Owned, log *slog.Logger) error {
	key, err := bus.OwnedKey(d.cluster, o.VMID)
	if err != nil {
		return fmt.Errorf("ownership record of vmid %d not written: %w", o.VMID, err)
	}
	m, err := wire.OwnedGuestToProto(wire.OwnedGuest{Cluster: d.cluster, Owned: o, RunID: runID, RecordedAt: time.Now().UTC()})
	if err == nil {
		err = d.putOwned(ctx, key, m)
	}
	if err != nil {
		return fmt.Errorf("ownership record %s (%s) not written: %w", key, bus.BucketOwned, err)
	}
	log.Debug("guest recorded as owned", "vmid", o.VMID, "ref", o.Ref)
	return nil
}

// forgetOwned removes a deleted guest from the ownership inventory.
func (d *driver) forgetOwned(ctx context.Context, vmid int, log *slog.Logger) {
	key, err := bus.OwnedKey(d.cluster, vmid)
	if err != nil {
		return
	}
	if err := d.p.bus.DeleteKey(ctx, bus.BucketOwned, key); err != nil && !errors.Is(err, bus.ErrNotFound) {
		log.Warn("ownership record of a deleted guest not removed", "vmid", vmid, "err", err)
	}
}
