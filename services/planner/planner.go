package planner

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/wire"
)

// Run plans and drives clusters until ctx ends: it consumes RepoChanged (shared durable consumer, each
// event handled once by one replica), plans dry runs at once, records apply requests in each cluster's
// control state, and drives every cluster whose lease it can take: running the plan, reloading an open
// run a stopped planner left, and taking over a lease that expired. On shutdown it stops dispatching and
// releases its leases, so another replica carries the runs on.
func Run(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger.With("planner", cfg.Name)
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	b, done, err := bus.ConnectUnlessGiven(ctx, cfg.Bus, cfg.NATS, "proxops-planner", bus.Options{Logger: log})
	if err != nil {
		return err
	}
	defer done()
	trees := map[string]loadedTree{}
	for name, r := range cfg.Loaded {
		trees[name] = loadedTree{repo: r, process: cfg.Process}
	}
	p := &planner{cfg: cfg, bus: b, log: log, metrics: m, decryptor: secrets.NewDecryptor(cfg.Keys),
		trees: trees, drivers: map[string]*driver{}, kick: make(chan string, 256)}
	return p.run(ctx)
}

type planner struct {
	cfg       Config
	bus       *bus.Bus
	log       *slog.Logger
	metrics   *metrics
	decryptor *secrets.Decryptor

	treeMu sync.Mutex
	trees  map[string]loadedTree

	mu      sync.Mutex
	drivers map[string]*driver
	wg      sync.WaitGroup
	kick    chan string
}

func (p *planner) run(ctx context.Context) error {
	if err := p.bus.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamRepo, Durable: bus.ConsumerPlannerRepo,
		Filter: bus.SubjectRepoChanged, AckWait: 30 * time.Second, Description: "planners: repository events"}); err != nil {
		return err
	}
	p.log.Info("planner ready")
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Go(func() {
		err := p.bus.Consume(ctx, bus.StreamRepo, bus.ConsumerPlannerRepo,
			bus.ConsumeOptions{Concurrency: p.cfg.Concurrency, MaxWait: 2 * time.Second, RetryDelay: 2 * time.Second}, p.handleEvent)
		if err != nil && ctx.Err() == nil {
			errc <- err
		}
	})
	if !p.cfg.PlanOnly {
		wg.Go(func() { p.schedule(ctx) })
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	wg.Wait()
	p.wg.Wait()
	p.log.Info("planner stopped")
	return err
}

// handleEvent takes one RepoChanged: a dry run is planned and published at once (nothing is applied); an
// apply request is recorded as its clusters' newest wanted event, to be planned by whichever planner
// drives the cluster.
func (p *planner) handleEvent(ctx context.Context, d *bus.Delivery) error {
	ev, err := wire.DecodeRepoChanged(ctx, d.Decode)
	if err != nil {
		p.log.Error("undecodable repository event", "stream_seq", d.StreamSequence(), "err", err)
		return bus.Terminal(err)
	}
	if err := ev.Validate(); err != nil {
		p.log.Error("invalid repository event", "stream_seq", d.StreamSequence(), "err", err)
		return bus.Terminal(err)
	}
	seq := d.StreamSequence()
	log := p.log.With("event_id", ev.EventID, "commit", ev.Commit, "tree", ev.Tree, "dry_run", ev.DryRun)
	stop := heartbeat(ctx, d)
	defer stop()
	names, err := p.clusterNames(ctx, ev)
	if errors.Is(err, bus.ErrNotFound) {
		log.Error("repository event names a tree that is not stored; nothing to plan", "err", err)
		return bus.Terminal(err)
	}
	if errors.Is(err, event.ErrTreeMismatch) {
		// Without the event's clusters there is nobody to address a rejection to: the tree cannot be
		// trusted to name them.
		p.metrics.events.WithLabelValues("tree_mismatch").Inc()
		log.Error("repository event names a tree whose content does not match its name; nothing is planned", "err", err)
		return bus.Terminal(err)
	}
	if err != nil {
		return err
	}
	var valid []string
	for _, c := range names {
		if err := bus.ValidateCluster(c); err != nil {
			log.Warn("cluster name cannot be planned", "cluster", c, "err", err)
			continue
		}
		valid = append(valid, c)
	}
	if ev.DryRun {
		p.metrics.events.WithLabelValues("dry_run").Inc()
		return p.dryRuns(ctx, ev, valid)
	}
	p.metrics.events.WithLabelValues("apply").Inc()
	for _, c := range valid {
		how, err := p.want(ctx, c, ev, seq)
		if err != nil {
			return err
		}
		if how == recordedSkipped {
			ctl, _, _ := p.readControl(ctx, c)
			log.Debug("event skipped: the cluster's plan was rejected for a cause that stays until something changes "+
				"(a new commit, the secrets, the configuration, or an operator's request)", "cluster", c, "event_seq", seq,
				"trigger", string(ev.Trigger), "rejected_for", ctl.Blocked.Reason, "rejected_at", ctl.Blocked.At)
			p.metrics.events.WithLabelValues("skipped").Inc()
			continue
		}
		log.Info("apply requested", "cluster", c, "event_seq", seq, "request_id", ev.RequestID, "recorded", how)
		select {
		case p.kick <- c:
		default:
		}
	}
	return nil
}

// heartbeat keeps a delivery alive while it is worked on.
func heartbeat(ctx context.Context, d *bus.Delivery) func() {
	hctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-t.C:
				_ = d.InProgress()
			}
		}
	}()
	return cancel
}

// maxRequests bounds the requests one wanted event or run keeps to answer.
const maxRequests = 256

// How want recorded an event.
const (
	// recordedWanted: the event is the cluster's newest wanted event.
	recordedWanted = "wanted"
	// recordedCoalesced: an equal event waits to be planned; the request joined it.
	recordedCoalesced = "coalesced"
	// recordedJoined: the run in progress plans the same tree and has not published yet; the request joined it.
	recordedJoined = "joined"
	// recordedAbsorbed: the run in progress plans the same tree and nobody waits for an answer.
	recordedAbsorbed = "absorbed"
	// recordedSeen: recorded before (a redelivery), or an older event a newer one already covers.
	recordedSeen = "seen"
	// recordedSkipped: a trigger nobody waits on for the tree a permanent rejection waits out, with the same
	// inputs: planning it again would be rejected the same way.
	recordedSkipped = "skipped"
)

// equalEvent reports whether an event asks for what repo, tree and commit name: the same repository at
// the same tree (or, when a side has no tree, the same commit).
func equalEvent(repo, tree, commit string, ev event.RepoChanged) bool {
	if repo != ev.Repo {
		return false
	}
	if tree != "" && ev.Tree != "" {
		return tree == ev.Tree
	}
	return commit != "" && commit == ev.Commit
}

// queued reports whether a wanted event waits for a run (it is not the event of the run in progress).
func queued(ctl wire.ClusterControl) bool {
	return ctl.Pending() && (ctl.RunID == "" || ctl.WantSeq > ctl.RunWantSeq)
}

// addRequests appends the request ids that are not empty and not in list yet, up to maxRequests.
func addRequests(list []string, ids ...string) []string {
	for _, id := range ids {
		if id != "" && !slices.Contains(list, id) && len(list) < maxRequests {
			list = append(list, id)
		}
	}
	return list
}

// want records an apply event for a cluster. Equal events coalesce, so a commit announced by the poll, a
// webhook and an operator's request is planned once and every requester is answered by that run: an event
// equal to the wanted one joins it; one equal to the run in progress joins that run while its plan is not
// published yet (after that it is planned again once the run ends, and a trigger nobody waits on is left to
// the run). Any other event becomes the wanted one (the newest commit wins), taking over the requests of the
// event it replaces, and clears a retry: something changed. An operator's request also ends a retry's wait.
// A trigger nobody waits on for the tree of a permanent rejection, with the same inputs from outside the
// repository, is skipped (waitsForChange).
func (p *planner) want(ctx context.Context, cluster string, ev event.RepoChanged, seq uint64) (string, error) {
	digest := ""
	inputs := func() string {
		if digest == "" {
			digest = p.inputsDigest(ctx, ev.Tree, cluster)
		}
		return digest
	}
	for range 20 {
		ctl, rev, err := p.readControl(ctx, cluster)
		if err != nil {
			return "", err
		}
		how, seen := recordedWanted, max(ctl.SeenSeq, ctl.WantSeq)
		switch {
		case seq <= seen && (ev.RequestID == "" || ctl.Answers(ev.RequestID)):
			return recordedSeen, nil
		case seq > seen && waitsForChange(ctl, ev, inputs):
			how = recordedSkipped
		case seq <= seen:
			// An older request handled after a newer event (events are handled concurrently): the newer work
			// answers it; when that work is published already, the newest wanted event is planned once more.
			switch {
			case queued(ctl):
				ctl.WantRequests, how = addRequests(ctl.WantRequests, ev.RequestID), recordedCoalesced
			case ctl.RunID != "" && !ctl.RunPublished:
				ctl.RunRequests, how = addRequests(ctl.RunRequests, ev.RequestID), recordedJoined
			case ctl.WantSeq == 0:
				ctl.Want, ctl.WantSeq = ev, ctl.DoneSeq+1
				ctl.RetryAt, ctl.RetryAttempt, ctl.RetryReason = time.Time{}, 0, ""
			default:
				ctl.WantSeq, ctl.WantRequests = ctl.WantSeq+1, addRequests(nil, ev.RequestID)
				ctl.Want.RequestID, how = "", recordedCoalesced
			}
		case queued(ctl) && ctl.Want.Rollback != nil && ev.Rollback == nil && ev.RequestID == "" &&
			equalEvent(ctl.Want.Repo, ctl.Want.Tree, ctl.Want.Commit, ev):
			// An operator's rollback waits: a trigger nobody waits on for the same tree leaves it wanted.
			how = recordedAbsorbed
		case queued(ctl) && equalEvent(ctl.Want.Repo, ctl.Want.Tree, ctl.Want.Commit, ev) && event.SameRollback(ctl.Want.Rollback, ev.Rollback):
			ctl.WantRequests, how = addRequests(ctl.WantRequests, ev.RequestID), recordedCoalesced
			if ev.RequestID != "" {
				ctl.RetryAt = time.Time{}
			}
		case !queued(ctl) && ctl.RunID != "" && equalEvent(ctl.Want.Repo, ctl.RunTree, ctl.RunCommit, ev) && ev.RequestID == "" && ev.Rollback == nil:
			how = recordedAbsorbed
		case !queued(ctl) && ctl.RunID != "" && equalEvent(ctl.Want.Repo, ctl.RunTree, ctl.RunCommit, ev) && !ctl.RunPublished &&
			event.SameRollback(ctl.Want.Rollback, ev.Rollback):
			ctl.RunRequests, how = addRequests(ctl.RunRequests, ev.RequestID), recordedJoined
		default:
			var carried []string
			if queued(ctl) {
				carried = addRequests(nil, append([]string{ctl.Want.RequestID}, ctl.WantRequests...)...)
				carried = slices.DeleteFunc(carried, func(id string) bool { return id == ev.RequestID })
			}
			ctl.Want, ctl.WantSeq, ctl.WantRequests = ev, max(seq, ctl.WantSeq+1), carried
			ctl.RetryAt, ctl.RetryAttempt, ctl.RetryReason = time.Time{}, 0, ""
			ctl.Blocked = wire.Blocked{}
		}
		ctl.SeenSeq = max(seen, seq)
		if _, err := p.writeControl(ctx, ctl, rev); err == nil {
			return how, nil
		} else if !errors.Is(err, bus.ErrRevisionMismatch) && !errors.Is(err, bus.ErrExists) {
			return "", err
		}
	}
	return "", fmt.Errorf("record event for %s: too many concurrent updates", cluster)
}

// dryRuns plans every cluster of a dry-run event in parallel and publishes the plans as not applied.
func (p *planner) dryRuns(ctx context.Context, ev event.RepoChanged, clusters []string) error {
	var wg sync.WaitGroup
	errs := make([]error, len(clusters))
	for i, c := range clusters {
		wg.Go(func() { errs[i] = p.dryRun(ctx, ev, c) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// dryRunID is a dry run's id: derived from the event and the cluster, so a redelivered event publishes
// under the same message ids and is stored once. It starts with "dry-".
func dryRunID(eventID, cluster string) string {
	sum := sha256.Sum256([]byte(eventID + "\x00" + cluster))
	return "dry-" + hex.EncodeToString(sum[:10])
}

func (p *planner) dryRun(ctx context.Context, ev event.RepoChanged, cluster string) error {
	runID := dryRunID(ev.EventID, cluster)
	log := p.log.With("cluster", cluster, "run_id", runID, "event_id", ev.EventID)
	out, err := p.compute(ctx, ev, cluster)
	if err != nil {
		log.Warn("dry run not planned; will retry", "err", err)
		return err
	}
	info := runInfo(ev, cluster, runID)
	info.DryRun = true
	pub := func(e bus.PlanEvent, m any) error { return p.publishFree(ctx, cluster, runID, e, m) }
	if out.rejection != nil {
		p.metrics.plans.WithLabelValues("rejected_" + out.rejection.Reason).Inc()
		log.Info("plan rejected", "reason", out.rejection.Reason, "diagnostics", len(out.rejection.Diagnostics))
		return pub(bus.PlanRejected, plan.Rejected{RunInfo: info, Rejection: *out.rejection})
	}
	ctl, _, err := p.readControl(ctx, cluster)
	if err != nil {
		return err
	}
	info.PlanID = out.plan.ID
	info.Suspended = (out.suspended || ctl.Suspended) && ev.Rollback == nil
	planned := plan.Planned{RunInfo: info, Plan: out.plan}
	p.countPlan(out.plan)
	log.Info("dry run planned", "plan_id", out.plan.ID, "operations", len(out.plan.Operations))
	if err := pub(bus.PlanPlanned, planned); err != nil {
		return err
	}
	f, err := notApplied(out.plan)
	if err != nil {
		return err
	}
	return pub(bus.PlanFinished, plan.FinishedRun{RunInfo: info, Finished: f, At: time.Now().UTC()})
}

func (p *planner) countPlan(pl plan.Plan) {
	switch {
	case pl.Held:
		p.metrics.plans.WithLabelValues("held").Inc()
	case pl.Empty():
		p.metrics.plans.WithLabelValues("no_drift").Inc()
	default:
		p.metrics.plans.WithLabelValues("planned").Inc()
	}
}

// notApplied is the summary of a plan that is shown but not applied.
func notApplied(pl plan.Plan) (plan.Finished, error) {
	r, err := plan.NewRun(pl)
	if err != nil {
		return plan.Finished{}, err
	}
	f := r.Finished()
	f.Outcome = plan.OutcomeNotApplied
	return f, nil
}

func runInfo(ev event.RepoChanged, cluster, runID string) plan.RunInfo {
	return plan.RunInfo{Cluster: cluster, RunID: runID, Repo: ev.Repo, Commit: ev.Commit, Tree: ev.Tree,
		EventID: ev.EventID, RequestID: ev.RequestID, RequestedBy: ev.RequestedBy}
}

// newID returns a fresh id: prefix, time and randomness, usable as a KV key token and in message ids.
func newID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s%x%s", prefix, time.Now().UTC().Unix(), hex.EncodeToString(b[:]))
}

// schedule follows the clusters' control state and the leases, and starts driving a cluster that has work
// (a wanted event not handled yet, or an open run) whenever its lease can be taken: at once when the work
// appears, when the holder releases the lease or lets it expire, and on a periodic sweep.
func (p *planner) schedule(ctx context.Context) {
	sweep := time.NewTicker(p.cfg.SweepInterval)
	defer sweep.Stop()
	var leases <-chan bus.LeaseEvent
	var controls <-chan string
	watch := func() {
		if leases == nil {
			if ch, err := p.bus.WatchLeases(ctx); err == nil {
				leases = ch
			} else {
				p.log.Warn("watch leases", "err", err)
			}
		}
		if controls == nil {
			if ch, err := p.bus.WatchKeys(ctx, bus.BucketClusters, ">"); err == nil {
				controls = ch
			} else {
				p.log.Warn("watch cluster state", "err", err)
			}
		}
	}
	watch()
	p.sweep(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-leases:
			if !ok {
				leases = nil
				continue
			}
			if !ev.Held {
				p.consider(ctx, ev.Key)
			}
		case key, ok := <-controls:
			if !ok {
				controls = nil
				continue
			}
			p.consider(ctx, key)
		case c := <-p.kick:
			p.consider(ctx, c)
		case <-sweep.C:
			watch()
			p.sweep(ctx)
		}
	}
}

func (p *planner) sweep(ctx context.Context) {
	keys, err := p.bus.Keys(ctx, bus.BucketClusters)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("list clusters", "err", err)
		}
		return
	}
	for _, k := range keys {
		p.recheck(ctx, k)
		p.consider(ctx, k)
	}
}

// consider starts driving a cluster when it has work and its lease can be taken; a cluster this planner
// already drives is told to look at its state again.
func (p *planner) consider(ctx context.Context, cluster string) {
	if ctx.Err() != nil || bus.ValidateCluster(cluster) != nil {
		return
	}
	p.mu.Lock()
	d := p.drivers[cluster]
	p.mu.Unlock()
	if d != nil {
		d.notify()
		return
	}
	ctl, _, err := p.readControl(ctx, cluster)
	if err != nil || (!ctl.Pending() && ctl.RunID == "") {
		return
	}
	key, _ := bus.LeaseKey(cluster)
	lease, err := p.bus.AcquireLease(ctx, key, p.cfg.Name)
	if err != nil {
		if !errors.Is(err, bus.ErrLeaseHeld) && ctx.Err() == nil {
			p.log.Warn("take lease", "cluster", cluster, "err", err)
		}
		return
	}
	d = newDriver(p, cluster, lease)
	p.mu.Lock()
	p.drivers[cluster] = d
	p.mu.Unlock()
	p.metrics.driving.Inc()
	p.wg.Go(func() {
		d.run(ctx)
		p.mu.Lock()
		delete(p.drivers, cluster)
		p.mu.Unlock()
		p.metrics.driving.Dec()
		// Work recorded while the driver was letting go is picked up again.
		select {
		case p.kick <- cluster:
		default:
		}
	})
}

// readControl reads a cluster's control state (the zero state, revision 0, when there is none).
func (p *planner) readControl(ctx context.Context, cluster string) (wire.ClusterControl, uint64, error) {
	key, err := bus.ClusterKey(cluster)
	if err != nil {
		return wire.ClusterControl{}, 0, err
	}
	m := wire.NewClusterControl()
	rev, err := p.bus.GetProto(ctx, bus.BucketClusters, key, m)
	if errors.Is(err, bus.ErrNotFound) {
		return wire.ClusterControl{Cluster: cluster}, 0, nil
	}
	if err != nil {
		return wire.ClusterControl{}, 0, err
	}
	ctl, err := wire.ClusterControlFromProto(m)
	if err != nil {
		return wire.ClusterControl{}, 0, err
	}
	ctl.Cluster = cluster
	return ctl, rev, nil
}

// writeControl writes a cluster's control state with compare-and-set on rev (0: the key must not exist).
func (p *planner) writeControl(ctx context.Context, ctl wire.ClusterControl, rev uint64) (uint64, error) {
	key, err := bus.ClusterKey(ctl.Cluster)
	if err != nil {
		return 0, err
	}
	m, err := wire.ClusterControlToProto(ctl)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		return p.bus.CreateProto(ctx, bus.BucketClusters, key, m)
	}
	return p.bus.UpdateProto(ctx, bus.BucketClusters, key, m, rev)
}
