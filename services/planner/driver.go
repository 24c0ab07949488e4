package planner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

// driver drives one cluster while this planner holds its lease: it plans the newest wanted event, runs the
// plan, and carries on an open run another planner left.
type driver struct {
	p       *planner
	cluster string
	lease   *bus.Lease
	log     *slog.Logger
	filter  string
	wake    chan struct{}

	// lastSeq is where this driver last saw the cluster's plan subjects end.
	lastSeq uint64
	// recordsAfter indexes the ownership records of the plan being run by the operation they wait for.
	recordsAfter map[string][]int
	// planned is the plan being run.
	planned *plan.Planned

	cancel   context.CancelFunc
	lostOnce sync.Once
	isLost   bool
	lostMu   sync.Mutex
}

func newDriver(p *planner, cluster string, lease *bus.Lease) *driver {
	filter, _ := bus.PlanFilter(cluster)
	return &driver{p: p, cluster: cluster, lease: lease, filter: filter, wake: make(chan struct{}, 1),
		log: p.log.With("cluster", cluster)}
}

// notify asks the driver to look at its cluster's state again.
func (d *driver) notify() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// lost stops the driver at once: the lease is no longer this planner's.
func (d *driver) lost(err error) {
	d.lostOnce.Do(func() {
		d.lostMu.Lock()
		d.isLost = true
		d.lostMu.Unlock()
		d.log.Warn("lease lost; stopped driving the cluster", "err", err)
		if d.cancel != nil {
			d.cancel()
		}
	})
}

func (d *driver) leaseLost() bool {
	d.lostMu.Lock()
	defer d.lostMu.Unlock()
	return d.isLost
}

func (d *driver) run(ctx context.Context) {
	dctx, cancel := context.WithCancel(ctx)
	d.cancel = cancel
	defer cancel()
	d.log.Info("driving cluster", "holder", d.lease.Holder())
	var wg sync.WaitGroup
	wg.Go(func() { d.renew(dctx) })
	defer wg.Wait()
	defer cancel()

	backoff := 200 * time.Millisecond
	ready := false
	for dctx.Err() == nil {
		var err error
		if !ready {
			if d.lastSeq, err = d.p.bus.LastSequence(dctx, bus.StreamPlans, d.filter); err == nil {
				ready = true
			}
		}
		if err == nil {
			var done bool
			done, err = d.step(dctx)
			if err == nil && done {
				d.release(ctx)
				return
			}
		}
		if err == nil {
			backoff = 200 * time.Millisecond
			continue
		}
		if dctx.Err() != nil {
			break
		}
		d.log.Warn("cluster step failed; retrying", "err", err, "retry_in", backoff)
		select {
		case <-time.After(backoff):
		case <-dctx.Done():
		}
		backoff = min(2*backoff, 10*time.Second)
	}
	if !d.leaseLost() {
		// Shutting down: let another planner take the cluster over at once.
		d.release(ctx)
	}
}

// release gives the lease up.
func (d *driver) release(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := d.lease.Release(rctx); err != nil && !errors.Is(err, bus.ErrLeaseLost) {
		d.log.Warn("release lease", "err", err)
	}
	d.log.Info("released cluster")
}

// renew keeps the lease alive every third of its TTL; when it cannot be renewed it stops the driver.
func (d *driver) renew(ctx context.Context) {
	every := max(d.p.cfg.LeaseTTL/3, 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := d.lease.Renew(ctx)
		switch {
		case err == nil:
			lastOK = time.Now()
		case errors.Is(err, bus.ErrLeaseLost):
			d.lost(err)
			return
		case ctx.Err() != nil:
			return
		case time.Since(lastOK) > d.p.cfg.LeaseTTL*2/3:
			// Not renewed for most of its life: it may expire before this planner hears back.
			d.lost(fmt.Errorf("not renewed for %s: %w", time.Since(lastOK).Round(time.Millisecond), err))
			return
		default:
			d.log.Warn("renew lease", "err", err)
		}
	}
}

// step does the next thing the cluster needs. done reports that nothing is left: the lease can go.
func (d *driver) step(ctx context.Context) (done bool, err error) {
	ctl, rev, err := d.p.readControl(ctx, d.cluster)
	if err != nil {
		return false, err
	}
	switch {
	case ctl.RunID != "":
		return false, d.resume(ctx, ctl, rev)
	case ctl.Pending() && time.Now().Before(ctl.RetryAt):
		// A plan rejected for a transient cause: planned again at RetryAt, or at once when an operator asks
		// or something changes (the control state changes, which wakes the driver).
		d.log.Info("waiting to plan again", "retry_at", ctl.RetryAt, "attempt", ctl.RetryAttempt, "reason", ctl.RetryReason)
		t := time.NewTimer(time.Until(ctl.RetryAt))
		defer t.Stop()
		select {
		case <-t.C:
		case <-d.wake:
		case <-ctx.Done():
		}
		return false, nil
	case ctl.Pending():
		return false, d.start(ctx, ctl, rev)
	default:
		return true, nil
	}
}

// Backoff of the retries of a plan rejected for a transient cause: 1 s, doubled at each rejection in a
// row, at most 20 s.
const (
	retryFirst = time.Second
	retryMax   = 20 * time.Second
)

// retryDelay is the wait before the attempt-th retry (0: the first).
func retryDelay(attempt uint32) time.Duration {
	if attempt >= 5 {
		return retryMax
	}
	return min(retryFirst<<attempt, retryMax)
}

// seal marks the run published: no request joins it any more. It returns every request the run answers.
func (d *driver) seal(ctx context.Context, runID string) (wire.ClusterControl, error) {
	for range 20 {
		ctl, rev, err := d.p.readControl(ctx, d.cluster)
		if err != nil {
			return ctl, err
		}
		if ctl.RunID != runID {
			return ctl, fmt.Errorf("run %s is no longer the cluster's run", runID)
		}
		if ctl.RunPublished {
			return ctl, nil
		}
		ctl.RunPublished = true
		if _, err := d.p.writeControl(ctx, ctl, rev); err == nil {
			return ctl, nil
		} else if !errors.Is(err, bus.ErrRevisionMismatch) {
			return ctl, err
		}
	}
	return wire.ClusterControl{}, fmt.Errorf("seal run %s: too many concurrent updates", runID)
}

// start plans the newest wanted event under a new run and runs the plan. The run is recorded in the
// control state before anything is published, so a planner that takes over knows where to look.
func (d *driver) start(ctx context.Context, ctl wire.ClusterControl, rev uint64) error {
	resultFilter, _ := bus.ResultFilter(d.cluster)
	resultsSeq, err := d.p.bus.LastSequence(ctx, bus.StreamResults, resultFilter)
	if err != nil {
		return err
	}
	invFilter, _ := bus.InventoryFilter(d.cluster)
	invSeq, err := d.p.bus.LastSequence(ctx, bus.StreamInventory, invFilter)
	if err != nil {
		return err
	}
	// What the plan is made with from outside the repository, before anything is read.
	inputs := d.p.inputsDigest(ctx, ctl.Want.Tree, d.cluster)
	runID := newID("r")
	ctl.RunID, ctl.RunWantSeq, ctl.RunPlansSeq, ctl.RunResultsSeq = runID, ctl.WantSeq, d.lastSeq, resultsSeq
	ctl.Blocked = wire.Blocked{}
	ctl.RunTree, ctl.RunCommit, ctl.RunPublished = ctl.Want.Tree, ctl.Want.Commit, false
	ctl.RunRequests, ctl.WantRequests = addRequests(nil, append([]string{ctl.Want.RequestID}, ctl.WantRequests...)...), nil
	if _, err := d.p.writeControl(ctx, ctl, rev); err != nil {
		if errors.Is(err, bus.ErrRevisionMismatch) || errors.Is(err, bus.ErrExists) {
			return nil // changed meanwhile: look again
		}
		return err
	}
	ev := ctl.Want
	log := d.log.With("run_id", runID, "event_id", ev.EventID, "commit", ev.Commit)
	log.Info("planning", "trigger", string(ev.Trigger))
	out, err := d.p.compute(ctx, ev, d.cluster)
	if err != nil {
		return err
	}
	info := runInfo(ev, d.cluster, runID)
	now, err := d.seal(ctx, runID)
	if err != nil {
		return err
	}
	info.RequestIDs = now.RunRequests
	if out.rejection != nil {
		d.p.metrics.plans.WithLabelValues("rejected_" + out.rejection.Reason).Inc()
		rej := *out.rejection
		if rej.Transient {
			rej.RetryAt = time.Now().Add(retryDelay(ctl.RetryAttempt)).UTC()
		}
		log.Warn("plan rejected; nothing is applied", "reason", rej.Reason, "cause", rejectionCause(rej),
			"transient", rej.Transient, "retry_at", rej.RetryAt, "diagnostics", len(rej.Diagnostics))
		if err := d.publish(ctx, runID, bus.PlanRejected, plan.Rejected{RunInfo: info, Rejection: rej}); err != nil {
			return err
		}
		var blocked *wire.Blocked
		// A refused rollback says nothing about the cluster's own plans: they go on as before.
		if !rej.Transient && ev.Rollback == nil {
			blocked = &wire.Blocked{Tree: ev.Tree, Commit: ev.Commit, Inputs: inputs, Reason: rejectionCause(rej),
				At: time.Now().UTC(), Nodes: out.refused, InventorySeq: invSeq}
			log.Info("the cluster waits for a change before it is planned again: a new commit, the secrets, the "+
				"configuration, the executor of a refusing node reading PVE again, or an operator's request", "cause", blocked.Reason)
		}
		return d.close(ctx, runID, &rej, blocked)
	}
	info.PlanID = out.plan.ID
	// An operator's rollback is applied on a suspended cluster too: suspending a cluster is how an operator
	// stops ProxOps' own corrections, not their own explicit request.
	info.Suspended = (out.suspended || now.Suspended) && ev.Rollback == nil
	planned := plan.Planned{RunInfo: info, Plan: out.plan}
	if !info.Suspended {
		d.liftSuspensions(ctx, out.lifted, log)
	}
	d.p.countPlan(out.plan)
	if err := d.publish(ctx, runID, bus.PlanPlanned, planned); err != nil {
		return err
	}
	log.Info("plan published", "plan_id", out.plan.ID, "operations", len(out.plan.Operations), "held", out.plan.Held,
		"suspended", info.Suspended)
	return d.execute(ctx, planned, ctl, false, false)
}

// resume carries on the run the control state names, from its events on the streams: finished or
// rejected, the run is closed; planned, it is reloaded with its results and continued; never published,
// it is dropped and the event planned afresh.
func (d *driver) resume(ctx context.Context, ctl wire.ClusterControl, rev uint64) error {
	var planned *plan.Planned
	closed, held := false, false
	err := d.p.bus.ReadStream(ctx, bus.StreamPlans, d.filter, ctl.RunPlansSeq+1, func(m *bus.Message) error {
		ev := bus.PlanEvent(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
		switch ev {
		case bus.PlanPlanned:
			pl, err := wire.DecodePlanned(ctx, m.Decode)
			if err != nil {
				return err
			}
			if pl.RunID == ctl.RunID {
				planned = &pl
			}
		case bus.PlanHeld:
			h, err := wire.DecodeHeld(ctx, m.Decode)
			if err != nil {
				return err
			}
			held = held || h.RunID == ctl.RunID
		case bus.PlanFinished:
			f, err := wire.DecodeFinished(ctx, m.Decode)
			if err != nil {
				return err
			}
			closed = closed || f.RunID == ctl.RunID
		case bus.PlanRejected:
			r, err := wire.DecodeRejected(ctx, m.Decode)
			if err != nil {
				return err
			}
			closed = closed || r.RunID == ctl.RunID
		}
		if m.Sequence > d.lastSeq {
			d.lastSeq = m.Sequence
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reload run %s: %w", ctl.RunID, err)
	}
	switch {
	case closed:
		return d.done(ctx, ctl.RunID)
	case planned == nil:
		d.log.Info("run was never published; planning afresh", "run_id", ctl.RunID)
		// The run's requests wait for the wanted event's run: the same event, or a newer one.
		ctl.WantRequests = addRequests(ctl.RunRequests, ctl.WantRequests...)
		clearRun(&ctl)
		if _, err := d.p.writeControl(ctx, ctl, rev); err != nil && !errors.Is(err, bus.ErrRevisionMismatch) {
			return err
		}
		return nil
	}
	d.p.metrics.takeovers.Inc()
	d.log.Info("carrying on an open run", "run_id", ctl.RunID, "plan_id", planned.PlanID)
	return d.execute(ctx, *planned, ctl, true, held)
}

// clearRun forgets the run in progress in a control state.
func clearRun(ctl *wire.ClusterControl) {
	ctl.RunID, ctl.RunWantSeq, ctl.RunPlansSeq, ctl.RunResultsSeq = "", 0, 0, 0
	ctl.RunTree, ctl.RunCommit, ctl.RunPublished, ctl.RunRequests = "", "", false, nil
}

// done closes the run in the control state: its event is handled.
func (d *driver) done(ctx context.Context, runID string) error { return d.close(ctx, runID, nil, nil) }

// close closes the run in the control state. A run rejected for a transient cause whose event is still the
// newest leaves the event wanted, to be planned again at the rejection's RetryAt; otherwise the event is
// handled and the retries start over. A run rejected for a permanent cause (blocked) whose event is still
// the newest records what it was rejected against: the same triggers are skipped until something changes.
func (d *driver) close(ctx context.Context, runID string, rejection *plan.Rejection, blocked *wire.Blocked) error {
	for range 20 {
		ctl, rev, err := d.p.readControl(ctx, d.cluster)
		if err != nil {
			return err
		}
		if ctl.RunID != runID {
			return nil
		}
		switch {
		case rejection != nil && rejection.Transient && ctl.WantSeq == ctl.RunWantSeq:
			ctl.RetryAt, ctl.RetryAttempt = rejection.RetryAt, ctl.RetryAttempt+1
			ctl.RetryReason = rejectionCause(*rejection)
		case ctl.WantSeq == ctl.RunWantSeq:
			ctl.DoneSeq = max(ctl.DoneSeq, ctl.RunWantSeq)
			ctl.RetryAt, ctl.RetryAttempt, ctl.RetryReason = time.Time{}, 0, ""
			if blocked != nil {
				ctl.Blocked = *blocked
			}
		default:
			ctl.DoneSeq = max(ctl.DoneSeq, ctl.RunWantSeq)
		}
		clearRun(&ctl)
		if _, err := d.p.writeControl(ctx, ctl, rev); err == nil {
			return nil
		} else if !errors.Is(err, bus.ErrRevisionMismatch) {
			return err
		}
	}
	return fmt.Errorf("close run %s: too many concurrent updates", runID)
}

// rejectionCause is a rejection's reason and its first diagnostic, in one line for logs and status.
func rejectionCause(r plan.Rejection) string {
	if len(r.Diagnostics) == 0 {
		return r.Reason
	}
	return r.Reason + ": " + r.Diagnostics[0].Message
}
