// Package executor is the ProxOps executor: the only service that holds PVE credentials. One executor owns
// one node of one cluster; replicas of the same node share its durable consumer. It serves
// proxops.v1.observe.<cluster>.<node> (and publishes each inventory it takes), and applies the operations
// of proxops.v1.op.<cluster>.<node> through internal/pve with bounded concurrency per node, per storage and
// per guest, heartbeats while PVE tasks run, lock-aware waits, a journal in proxops_ops that makes
// redelivery idempotent, and a dead-letter copy for operations that exhaust their deliveries.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/clock"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/opsign"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/wire"
)

// Run serves the node until ctx ends: it connects to PVE (refusing releases before 8.0), ensures the
// node's durable consumer, answers observe requests and applies operations. On shutdown it stops fetching,
// lets operations in flight finish for Config.ShutdownGrace and hands back the rest.
func Run(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger.With("cluster", cfg.Cluster, "node", cfg.Node, "replica", cfg.Replica)
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	defer m.unregister(cfg.Registry)
	pcfg := cfg.PVE
	pcfg.Metrics = m
	clients := &pveClients{cfg: pcfg, source: cfg.Credentials, log: log}
	version := ""
	client, err := clients.connect(ctx, cfg.Secrets)
	switch {
	case err == nil:
		version = client.Version()
	case ctx.Err() != nil:
		return err
	default:
		// PVE refused or is unreachable (credentials, TLS, down): serve anyway, and try again on every observe
		// and operation, so each failure is reported, with PVE's answer, to whoever asked; a planner then
		// names the cause instead of finding nobody to ask.
		if clients.source == nil {
			clients.source = fixedCredentials(credentialsOf(pcfg, cfg.Secrets))
		}
		log.Warn("cannot connect to PVE yet; every observe and operation tries again", "err", err)
	}
	b, done, err := bus.ConnectUnlessGiven(ctx, cfg.Bus, cfg.NATS, "proxops-executor-"+cfg.Cluster+"-"+cfg.Node, bus.Options{Logger: log})
	if err != nil {
		return err
	}
	defer done()
	kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ops, err := b.JetStream().KeyValue(kctx, bus.BucketOps)
	cancel()
	if err != nil {
		return fmt.Errorf("open %s: %w", bus.BucketOps, err)
	}
	trusted, err := opsign.NewVerifier(cfg.TrustedPlannerKeys)
	if err != nil {
		return err
	}
	e := &executor{cfg: cfg, log: log, bus: b, pve: clients, version: version, metrics: m, ops: ops, trusted: trusted,
		guests: map[int]*sync.Mutex{}, storages: map[string]chan struct{}{}}
	m.readOnly(cfg.ObserveOnly || cfg.endpointMismatch(cfg.RepoBaseURL) != "")
	if msg := cfg.endpointMismatch(cfg.RepoBaseURL); msg != "" {
		log.Error("endpoint mismatch: every operation and observe will be refused", "repo_base_url", cfg.RepoBaseURL)
	}
	return e.run(ctx)
}

type executor struct {
	cfg     Config
	log     *slog.Logger
	bus     *bus.Bus
	pve     *pveClients
	version string
	metrics *metrics
	// ops is proxops_ops: operation records and guest guards.
	ops jetstream.KeyValue
	// trusted verifies the planners' signatures of operations.
	trusted *opsign.Verifier

	mu       sync.Mutex
	guests   map[int]*sync.Mutex
	storages map[string]chan struct{}
}

func (e *executor) run(ctx context.Context) error {
	observeSubject, _ := bus.ObserveSubject(e.cfg.Cluster, e.cfg.Node)
	svc, err := e.bus.Serve(ctx, observeSubject, bus.QueueExecutors, bus.ServeOptions{Concurrency: 2}, e.observe)
	if err != nil {
		return err
	}
	defer svc.Stop()
	if e.cfg.Credentials != nil {
		var wg sync.WaitGroup
		wctx, cancel := context.WithCancel(ctx)
		wg.Go(func() { e.watchCredentials(wctx) })
		defer wg.Wait()
		defer cancel()
	}
	if e.cfg.ObserveOnly {
		e.log.Info("executor ready (observe only: no operation is applied)", "pve_version", e.version)
		e.ready()
		<-ctx.Done()
		e.log.Info("executor stopped")
		return nil
	}
	queues, err := e.ensureQueues(ctx)
	if err != nil {
		return err
	}
	stopWatch, err := e.watchExhausted(ctx, queues)
	if err != nil {
		return err
	}
	defer stopWatch()
	work, release := e.graceContext(ctx)
	defer release()
	e.log.Info("executor ready", "pve_version", e.version, "concurrency", e.cfg.Concurrency)
	e.ready()
	err = e.consume(ctx, work, queues)
	e.log.Info("executor stopped")
	return err
}

func (e *executor) ready() {
	if e.cfg.OnReady != nil {
		e.cfg.OnReady()
	}
}

// opQueues are the durable consumers an executor takes operations from, by scope: the node's own, and the
// cluster's work queue (bus.ClusterScope) of the objects that belong to no node.
type opQueues map[string]string

// ensureQueues creates or updates both consumers. executor.concurrency bounds the node, not each replica:
// the node's consumer hands out at most that many unacknowledged operations across all replicas. A replica
// configured differently from the one that set the consumer up takes it over with its own value (the last
// replica started wins), and says so. The cluster's work queue is served by every executor of the cluster,
// one operation at a time across all of them.
func (e *executor) ensureQueues(ctx context.Context) (opQueues, error) {
	durable, _ := bus.ExecutorConsumer(e.cfg.Cluster, e.cfg.Node)
	opSubject, _ := bus.OpSubject(e.cfg.Cluster, e.cfg.Node)
	e.warnConcurrencyChange(ctx, durable)
	if err := e.bus.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamOps, Durable: durable, Filter: opSubject,
		AckWait: e.cfg.AckWait, MaxDeliver: e.cfg.MaxDeliver, MaxAckPending: e.cfg.Concurrency,
		Description: "operations for " + e.cfg.Cluster + "/" + e.cfg.Node}); err != nil {
		return nil, err
	}
	clusterSubject, _ := bus.OpSubject(e.cfg.Cluster, bus.ClusterScope)
	clusterDurable, _ := bus.ExecutorConsumer(e.cfg.Cluster, bus.ClusterScope)
	if err := e.bus.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamOps, Durable: clusterDurable, Filter: clusterSubject,
		AckWait: e.cfg.AckWait, MaxDeliver: e.cfg.MaxDeliver, MaxAckPending: 1,
		Description: "operations for cluster " + e.cfg.Cluster + " that belong to no node"}); err != nil {
		return nil, err
	}
	return opQueues{e.cfg.Node: durable, bus.ClusterScope: clusterDurable}, nil
}

// watchExhausted listens for the server's announcement of an operation whose deliveries all ran out with
// none settled (every replica that took it died or hung): one of the replicas that serve its queue reports
// it failed and dead-letters it. The returned function stops listening.
func (e *executor) watchExhausted(ctx context.Context, queues opQueues) (stop func(), err error) {
	var watchers []*bus.Watcher
	stop = func() {
		for _, w := range watchers {
			w.Stop()
		}
	}
	for scope, d := range queues {
		w, err := e.bus.OnMaxDeliveries(ctx, bus.StreamOps, d, bus.QueueExecutors,
			func(ctx context.Context, adv bus.MaxDeliveries) { e.exhausted(ctx, scope, adv) })
		if err != nil {
			stop()
			return nil, err
		}
		watchers = append(watchers, w)
	}
	return stop, nil
}

// graceContext is the context operations run in: it outlives ctx by Config.ShutdownGrace, so operations in
// flight may finish once ctx ends. release ends it.
func (e *executor) graceContext(ctx context.Context) (work context.Context, release func()) {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(e.cfg.ShutdownGrace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-work.Done():
		}
		cancelWork()
	})
	return work, func() {
		stop()
		cancelWork()
	}
}

// consume takes operations from both queues until ctx ends: the node's with the configured concurrency, the
// cluster's one at a time. Operations run in work.
func (e *executor) consume(ctx, work context.Context, queues opQueues) error {
	var clusterErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		clusterErr = e.bus.Consume(ctx, bus.StreamOps, queues[bus.ClusterScope], bus.ConsumeOptions{Concurrency: 1, MaxWait: 2 * time.Second},
			func(_ context.Context, d *bus.Delivery) error { return e.handle(work, bus.ClusterScope, d) })
	})
	err := e.bus.Consume(ctx, bus.StreamOps, queues[e.cfg.Node], bus.ConsumeOptions{Concurrency: e.cfg.Concurrency, MaxWait: 2 * time.Second},
		func(_ context.Context, d *bus.Delivery) error { return e.handle(work, e.cfg.Node, d) })
	wg.Wait()
	return errors.Join(err, clusterErr)
}

// refusal says why this executor must not act for a cluster and node at the base-url a request or
// operation names (empty: not named), or "". An operation of the cluster's work queue names
// bus.ClusterScope for its node.
func (e *executor) refusal(cluster, node, baseURL string) string {
	switch {
	case cluster == e.cfg.Cluster && node == bus.ClusterScope:
	case cluster != e.cfg.Cluster || node != e.cfg.Node:
		return fmt.Sprintf("refused: this executor serves %s/%s, not %s/%s", e.cfg.Cluster, e.cfg.Node, cluster, node)
	case len(e.cfg.AllowedNodes) > 0 && !slices.Contains(e.cfg.AllowedNodes, node):
		return fmt.Sprintf("refused: node %s is not in cluster %s's allowlist", node, cluster)
	}
	if msg := e.cfg.endpointMismatch(e.cfg.RepoBaseURL); msg != "" {
		return msg
	}
	return e.cfg.requestMismatch(baseURL)
}

func (e *executor) observe(ctx context.Context, r *bus.Request) (proto.Message, error) {
	req, err := wire.DecodeObserveRequest(ctx, r.Decode)
	if err != nil {
		return nil, err
	}
	if msg := e.refusal(req.Cluster, req.Node, req.BaseURL); msg != "" {
		e.log.Warn("observe refused", "reason", msg)
		return nil, errors.New(msg)
	}
	var n inventory.Node
	client, _, err := e.pve.current(ctx)
	if err == nil && !req.ChecksOnly {
		n, err = client.Observe(ctx, pve.ObserveRequest{Cluster: req.Cluster, Node: req.Node,
			ContentStorages: req.ContentStorages, AllContent: req.AllContent, FirewallVMIDs: req.FirewallVMIDs,
			AllFirewalls: req.AllFirewalls, ClusterFirewall: req.ClusterFirewall, Pools: req.Pools,
			BackupJobs: req.BackupJobs, HA: req.HA})
	}
	n.Cluster, n.Node = req.Cluster, req.Node
	inv := wire.NodeInventory{Node: n, RequestID: req.RequestID, ObservedAt: time.Now().UTC()}
	if err == nil && req.ListNodes {
		// A cluster with an empty allowlist is observed on every node PVE lists; the planner learns them here.
		inv.ClusterNodes, err = client.Nodes(ctx)
	}
	if err == nil {
		err = e.observeChecks(ctx, client, req, &inv)
	}
	if err != nil {
		inv.Node.Guests, inv.Node.Storages, inv.Node.Volumes, inv.Node.ListedStorages = nil, nil, nil, nil
		inv.Node.ClusterFirewall = nil
		inv.Error, inv.ErrorClass = err.Error(), string(pve.ClassOf(err))
		e.log.Warn("observe failed", "node", req.Node, "class", inv.ErrorClass, "err", err)
	}
	msg, cerr := wire.NodeInventoryToProto(inv)
	if cerr != nil {
		return nil, cerr
	}
	if err == nil && !req.ChecksOnly {
		e.metrics.pveRead(time.Now())
		if perr := e.publishInventory(ctx, msg); perr != nil {
			e.log.Warn("publish inventory", "err", perr)
		}
	}
	return msg, nil
}

// observeChecks answers what a planner asks before it plans moves: the cluster's HA rules and resources and, per guest of
// the node, PVE's migration precondition. A precondition that cannot be read is answered with its error (the
// planner falls back to its own checks); HA rules that cannot be read fail the observation.
func (e *executor) observeChecks(ctx context.Context, client *pve.Client, req wire.ObserveRequest, inv *wire.NodeInventory) error {
	if req.HARules {
		rules, err := client.ListHARules(ctx)
		switch {
		case pve.NotServed(err):
			// PVE 8 has HA groups, not rules.
		case err != nil:
			return err
		}
		for _, r := range rules {
			inv.HARules = append(inv.HARules, inventory.HARule{ID: r.ID, Type: r.Type, Resources: r.Resources, Nodes: r.Nodes,
				Strict: r.Strict, Affinity: r.Affinity, Disable: r.Disable})
		}
		inv.HARulesRead = true
		if inv.HAResources, err = client.HAResourceStates(ctx); err != nil {
			return err
		}
	}
	for _, q := range req.MigrationChecks {
		out := inventory.MigrationCheck{MigrationQuery: q}
		chk, err := client.CheckMigration(ctx, req.Node, q.Type, q.VMID, q.Target)
		if err != nil {
			out.Error = err.Error()
			e.log.Warn("migration precondition not read", "vmid", q.VMID, "target", q.Target, "err", err)
		} else {
			out.Running, out.LocalDisks, out.LocalCDROMs = chk.Running, chk.LocalDisks, chk.CDROMs
			out.LocalResources, out.Mapped = chk.LocalResources, chk.Mapped
			out.Known, out.Allowed, out.UnavailableStorages = chk.Known, chk.Allowed, chk.UnavailableStorages
		}
		inv.MigrationChecks = append(inv.MigrationChecks, out)
	}
	return nil
}

// publishInventory publishes an inventory of the node on its inventory subject.
func (e *executor) publishInventory(ctx context.Context, msg proto.Message) error {
	subject, _ := bus.InventorySubject(e.cfg.Cluster, e.cfg.Node)
	_, err := e.bus.Publish(ctx, subject, msg)
	return err
}

// warnConcurrencyChange logs when the node's consumer exists with another concurrency than this replica's.
func (e *executor) warnConcurrencyChange(ctx context.Context, durable string) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := e.bus.JetStream().Consumer(cctx, bus.StreamOps, durable)
	if err != nil {
		return
	}
	if was := c.CachedInfo().Config.MaxAckPending; was != e.cfg.Concurrency {
		e.log.Warn("the node's concurrency changes to this replica's setting; give every replica of the node the same executor.concurrency",
			"was", was, "now", e.cfg.Concurrency)
	}
}

// exhausted settles an operation that ran out of deliveries without any delivery settling it: the last
// one's ack wait expired with no heartbeat (its replica crashed or hung) or it was handed back. Unless its
// journal says it finished, it is recorded and reported failed (class retryable: a later plan may try
// again), then copied to the dead-letter stream and removed from the work queue, so no plan waits for it.
// The node's replicas share the advisories; the final result's and the dead letter's message ids make a
// repeat harmless.
func (e *executor) exhausted(ctx context.Context, scope string, adv bus.MaxDeliveries) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalResultPatience+30*time.Second)
	defer cancel()
	log := e.log.With("stream_seq", adv.StreamSeq, "deliveries", adv.Deliveries)
	m, err := e.bus.StreamMessage(ctx, adv.Stream, adv.StreamSeq)
	if errors.Is(err, bus.ErrNotFound) {
		log.Info("operation out of deliveries was already settled")
		return
	}
	if err != nil {
		log.Error("read the operation that ran out of deliveries", "err", err)
		return
	}
	reason := fmt.Sprintf("gave up after %d deliveries: none was settled (the replicas that took it stopped, "+
		"or hung without heartbeats, for longer than the ack wait)", adv.Deliveries)
	op, err := wire.DecodeOperation(ctx, m.Decode)
	if err == nil {
		h := &opRun{e: e, scope: scope, op: op, start: time.Now(), attempt: int(adv.Deliveries)}
		j, jerr := loadJournal(ctx, e.bus, op, e.cfg.Replica, nil)
		switch {
		case jerr == nil && j.rec.Status.Final():
			// It finished, but no acknowledgement reached the server: report the outcome once more.
			h.publish(ctx, plan.Result{Status: j.rec.Status, Message: j.rec.Message, UPID: j.rec.UPID,
				Fingerprint: j.rec.Fingerprint, AlreadyDone: true})
			if rerr := m.Remove(ctx); rerr != nil {
				log.Warn("remove a finished operation from the work queue", "err", rerr)
			}
			return
		case jerr == nil:
			if ferr := j.finish(ctx, plan.StatusFailed, reason, ""); ferr != nil {
				h.log().Warn("record outcome", "err", ferr)
			}
		default:
			h.log().Warn("read operation record", "err", jerr)
		}
		e.metrics.operation(string(op.Action), "dead_lettered")
		h.log().Error("operation ran out of deliveries; dead-lettered", "reason", reason)
		h.publish(ctx, plan.Result{Status: plan.StatusFailed, Message: reason, ErrorClass: plan.ErrorRetryable})
	} else {
		log.Error("undecodable operation ran out of deliveries; dead-lettered", "err", err)
	}
	subject, _ := bus.DLQSubject(e.cfg.Cluster, scope)
	if err := m.DeadLetter(ctx, subject, reason); err != nil {
		log.Error("dead-letter", "err", err)
	}
}

// handle applies one operation delivered from the work queue of scope (the node's, or bus.ClusterScope)
// and settles the delivery.
func (e *executor) handle(ctx context.Context, scope string, d *bus.Delivery) error {
	if e.cfg.Fault != nil {
		e.cfg.Fault("received")
	}
	op, sig, err := wire.DecodeSignedOperation(ctx, d.Decode)
	if err != nil {
		e.log.Error("undecodable operation", "stream_seq", d.StreamSequence(), "err", err)
		return bus.Terminal(err)
	}
	h := &opRun{e: e, scope: scope, d: d, op: op, start: time.Now(), attempt: int(d.NumDelivered())}
	// Nothing is done for an operation no trusted planner signed: not even a read of PVE.
	if err := e.trusted.Verify(sig.Signer, sig.Signature, sig.Payload); err != nil {
		return h.refuse(ctx, opsign.Reason(err), "refused: "+err.Error())
	}
	return h.run(ctx)
}

// runOpen reports whether op's run is the run its cluster has in progress, as the planners' shared state
// (proxops_clusters) records it: set before a run dispatches anything, cleared once it finished.
func (e *executor) runOpen(ctx context.Context, op plan.Operation) (bool, error) {
	key, err := bus.ClusterKey(op.Cluster)
	if err != nil {
		return false, err
	}
	m := wire.NewClusterControl()
	if _, err := e.bus.GetProto(ctx, bus.BucketClusters, key, m); errors.Is(err, bus.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("read the state of cluster %s: %w", op.Cluster, err)
	}
	ctl, err := wire.ClusterControlFromProto(m)
	if err != nil {
		return false, fmt.Errorf("read the state of cluster %s: %w", op.Cluster, err)
	}
	return ctl.RunID != "" && ctl.RunID == op.RunID, nil
}

// refuse settles an operation this executor will not run, before anything is written to PVE: it is
// reported failed (terminal), counted by reason, and copied to the dead-letter stream with the reason in
// its header, so it is visible wherever an operator looks.
func (h *opRun) refuse(ctx context.Context, reason, msg string) error {
	e := h.e
	h.log().Warn("operation refused", "reason", reason, "message", msg)
	e.metrics.operation(string(h.op.Action), "refused")
	e.metrics.refused.WithLabelValues(reason).Inc()
	h.refused = true
	h.publish(ctx, plan.Result{Status: plan.StatusFailed, ErrorClass: plan.ErrorTerminal, Message: msg})
	subject, _ := bus.DLQSubject(e.cfg.Cluster, h.scope)
	if err := h.d.DeadLetterRefused(ctx, subject, reason, msg); err != nil {
		h.log().Error("dead-letter", "err", err)
		return h.d.Term(msg)
	}
	return nil
}

// opRun is one delivery of one operation.
type opRun struct {
	e *executor
	// scope is the work queue the operation came from: the executor's node, or bus.ClusterScope.
	scope    string
	d        *bus.Delivery
	op       plan.Operation
	start    time.Time
	attempt  int
	lastBeat time.Time
	beatMu   sync.Mutex
	// refused: the operation was refused unrun; its failed result gets a message id of its own, so it
	// never stands in for the result of the operation a planner really dispatched under the same ids.
	refused bool
}

func (h *opRun) log() *slog.Logger {
	return h.e.log.With("run_id", h.op.RunID, "op_id", h.op.ID, "action", string(h.op.Action), "vmid", h.op.VMID,
		"attempt", h.attempt)
}

func (h *opRun) run(ctx context.Context) error {
	e := h.e
	if settled, err := h.admit(ctx); settled {
		return err
	}
	defer e.metrics.applying()()
	stopBeat := h.heartbeat(ctx)
	defer stopBeat()
	// Apply runs under opCtx, which also ends when the guest guard is lost to another replica.
	opCtx, cancelOp := context.WithCancel(ctx)
	defer cancelOp()
	release, err := h.acquire(ctx, cancelOp)
	if err != nil {
		var busy *errGuestBusy
		if errors.As(err, &busy) {
			return h.busy(ctx, busy)
		}
		if ctx.Err() != nil {
			_ = h.d.NakWithDelay(0)
			return ctx.Err()
		}
		return h.retry(ctx, err)
	}
	defer release()
	j, err := loadJournal(ctx, e.bus, h.op, e.cfg.Replica, e.cfg.Fault)
	if err != nil {
		return h.retry(ctx, err)
	}
	if j.rec.Status.Final() {
		// Finished by an earlier delivery whose acknowledgement was lost: report again, do nothing.
		h.publish(ctx, plan.Result{Status: j.rec.Status, Message: j.rec.Message, UPID: j.rec.UPID,
			Fingerprint: j.rec.Fingerprint, AlreadyDone: true})
		return h.d.Ack(ctx)
	}
	if h.attempt == 1 {
		h.publish(ctx, plan.Result{Status: plan.StatusStarted})
	}
	return h.applyUntilSettled(ctx, opCtx, j)
}

// admit refuses an operation this executor must not run: one for another cluster, node or endpoint, one
// on the wrong work queue, one with a malformed secret reference, or one whose run is not open (a signed
// operation is good for the run it was signed for, while that run is open: published again later, a
// replay, it is refused; within the open run, its journal entry settles it once). settled reports that the
// delivery has been answered, with err as run's result.
func (h *opRun) admit(ctx context.Context) (settled bool, err error) {
	e := h.e
	msg := e.refusal(h.op.Cluster, h.op.Node, h.op.BaseURL)
	if msg == "" && h.op.Node != h.scope {
		msg = fmt.Sprintf("refused: an operation for %s/%s arrived on the work queue of %s/%s", h.op.Cluster, h.op.Node, e.cfg.Cluster, h.scope)
	}
	if msg != "" {
		h.log().Warn("operation refused", "reason", msg)
		e.metrics.operation(string(h.op.Action), "refused")
		h.publish(ctx, plan.Result{Status: plan.StatusFailed, ErrorClass: plan.ErrorTerminal, Message: msg})
		return true, h.d.Term(msg)
	}
	if err := h.op.CheckSecretRefs(); err != nil {
		return true, h.refuse(ctx, "secret_reference", "refused: "+err.Error())
	}
	open, err := e.runOpen(ctx, h.op)
	if err != nil {
		return true, h.retry(ctx, err)
	}
	if !open {
		return true, h.refuse(ctx, "run_not_open", fmt.Sprintf("refused: run %s is not the run in progress for cluster %s "+
			"(an operation is only run while its run is open)", h.op.RunID, h.op.Cluster))
	}
	return false, nil
}

// applyRetries is what an operation's attempts within one delivery have used up: since when the guest has
// been locked, the next lock wait, and how many failed tasks were tried again.
type applyRetries struct {
	lockSince   time.Time
	delay       time.Duration
	taskRetries int
}

// applyUntilSettled applies the operation against PVE until it succeeds, is refused, fails, or is handed
// back, waiting on a locked guest and trying an unexplained task failure again as configured.
func (h *opRun) applyUntilSettled(ctx, opCtx context.Context, j *journal) error {
	e := h.e
	tries := applyRetries{delay: e.cfg.RetryBackoff}
	for {
		var out pve.Outcome
		client, secrets, err := e.pve.current(opCtx)
		if err == nil {
			if merr := secretsMismatch(h.op, secrets); merr != nil {
				return h.secretsRefused(ctx, j, merr)
			}
			out, err = client.Apply(opCtx, h.op, pve.ApplyOptions{Journal: j, Prior: j.prior(), Secrets: secrets,
				Progress: h.progress(ctx), Ownership: ownership{b: e.bus, cluster: h.op.Cluster},
				Objects: ownership{b: e.bus, cluster: h.op.Cluster}})
		} else {
			err = &pve.Error{Class: plan.ErrorRetryable, Err: err}
		}
		if err == nil {
			return h.succeeded(ctx, j, out)
		}
		if again, rerr := h.afterFailure(ctx, opCtx, j, err, &tries); !again {
			return rerr
		}
	}
}

// secretsRefused refuses an operation resolved against another secrets file than this executor's.
func (h *opRun) secretsRefused(ctx context.Context, j *journal, merr error) error {
	h.log().Warn("operation refused", "reason", merr)
	h.e.metrics.operation(string(h.op.Action), "refused")
	if jerr := j.finish(ctx, plan.StatusFailed, merr.Error(), ""); jerr != nil {
		h.log().Warn("record outcome", "err", jerr)
	}
	h.publish(ctx, plan.Result{Status: plan.StatusFailed, ErrorClass: plan.ErrorTerminal, Message: merr.Error()})
	return h.d.Term(merr.Error())
}

// succeeded records, reports and acknowledges a successful operation.
func (h *opRun) succeeded(ctx context.Context, j *journal, out pve.Outcome) error {
	result := "succeeded"
	if out.AlreadyDone {
		result = "already_done"
	}
	h.e.metrics.operation(string(h.op.Action), result)
	msg := out.Message
	if msg == "" && out.AlreadyDone {
		msg = "already done"
	}
	if jerr := j.finish(ctx, plan.StatusSucceeded, msg, out.Fingerprint); jerr != nil {
		h.log().Warn("record outcome", "err", jerr)
	}
	h.publish(ctx, plan.Result{Status: plan.StatusSucceeded, Message: msg, UPID: out.UPID, TaskLog: out.TaskLog,
		AlreadyDone: out.AlreadyDone, Fingerprint: out.Fingerprint})
	h.log().Info("operation succeeded", "upid", out.UPID, "already_done", out.AlreadyDone)
	return h.d.Ack(ctx)
}

// afterFailure decides what follows a failed attempt: again is true when the operation is to be applied
// once more in this delivery; otherwise ret is run's result.
func (h *opRun) afterFailure(ctx, opCtx context.Context, j *journal, err error, tries *applyRetries) (again bool, ret error) {
	e := h.e
	if reason, ok := pve.RefusalOf(err); ok {
		// Not ProxOps' guest, or not the guest the claim was planned for: nothing was written.
		if jerr := j.finish(ctx, plan.StatusFailed, err.Error(), ""); jerr != nil {
			h.log().Warn("record outcome", "err", jerr)
		}
		return false, h.refuse(ctx, reason, err.Error())
	}
	if ctx.Err() != nil {
		// Shutting down: hand the operation back; the journal lets the next delivery re-attach.
		_ = h.d.NakWithDelay(0)
		return false, ctx.Err()
	}
	if opCtx.Err() != nil {
		// The guest guard went to another replica (this one stalled for longer than its TTL): stop
		// acting on the guest and let the operation come back later.
		h.log().Warn("guest guard lost; handing the operation back", "err", err)
		return false, h.d.NakWithDelay(e.cfg.RetryBackoff)
	}
	if lock, ok := pve.LockOf(err); ok {
		return h.waitForLock(ctx, j, lock, err, tries)
	}
	if pve.UnexplainedTaskFailure(err) && tries.taskRetries < e.cfg.TaskRetries {
		// Apply starts over from what PVE shows now: the journal holds the failed task, so a create,
		// clone or download is only sent again once PVE shows its target free or absent.
		tries.taskRetries++
		e.metrics.operation(string(h.op.Action), "retried")
		h.log().Warn("PVE task failed; trying again", "err", err, "retry_in", e.cfg.RetryBackoff)
		upid, tail := failedTask(err)
		h.publish(ctx, plan.Result{Status: plan.StatusProgress, Message: "retrying after a failed task: " + err.Error(),
			ErrorClass: plan.ErrorRetryable, UPID: upid, TaskLog: tail})
		return h.pause(ctx, e.cfg.RetryBackoff)
	}
	return false, h.fail(ctx, j, err)
}

// waitForLock waits on a guest busy with a long job (backup, migrate, ...) or whose config file lock another
// PVE worker holds, heartbeat after heartbeat, without spending deliveries, up to LockWait in all.
func (h *opRun) waitForLock(ctx context.Context, j *journal, lock string, err error, tries *applyRetries) (again bool, ret error) {
	e := h.e
	if tries.lockSince.IsZero() {
		tries.lockSince = time.Now()
	}
	waited := time.Since(tries.lockSince)
	if waited >= e.cfg.LockWait {
		return false, h.lockWaitExceeded(ctx, j, lock, waited, err)
	}
	wait := min(tries.delay, e.cfg.LockWait-waited)
	h.log().Info("guest locked; waiting", "lock", lock, "retry_in", wait)
	h.publish(ctx, plan.Result{Status: plan.StatusProgress, Message: "waiting: " + lockText(lock)})
	tries.delay = min(2*tries.delay, time.Minute)
	return h.pause(ctx, wait)
}

// pause waits d before the next attempt; when ctx ends first, the operation is handed back at once.
func (h *opRun) pause(ctx context.Context, d time.Duration) (again bool, ret error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true, nil
	case <-ctx.Done():
		_ = h.d.NakWithDelay(0)
		return false, ctx.Err()
	}
}

// lockText describes a lock for results.
func lockText(lock string) string {
	if lock == pve.LockFileContended {
		return "the guest's config file lock is held by another PVE worker"
	}
	return fmt.Sprintf("guest is locked (%s)", lock)
}

// lockWaitExceeded reports an operation whose guest stayed locked for the whole lock wait: a failed result
// naming the lock, and the delivery is terminated (waiting longer is the next plan's decision).
func (h *opRun) lockWaitExceeded(ctx context.Context, j *journal, lock string, waited time.Duration, err error) error {
	msg := fmt.Sprintf("gave up after waiting %s (lock-wait %s): %s: %v", waited.Round(time.Millisecond), h.e.cfg.LockWait, lockText(lock), err)
	if jerr := j.finish(ctx, plan.StatusFailed, msg, ""); jerr != nil {
		h.log().Warn("record outcome", "err", jerr)
	}
	h.e.metrics.operation(string(h.op.Action), "failed")
	h.log().Warn("lock wait exceeded", "lock", lock, "waited", waited)
	h.publish(ctx, plan.Result{Status: plan.StatusFailed, Message: msg, ErrorClass: plan.ErrorRetryable})
	return h.d.Term(msg)
}

// busy settles a delivery whose guest another replica's operation holds: it comes back after a delay, or,
// on its last delivery, fails like any retryable failure (dead letter and a failed result).
func (h *opRun) busy(ctx context.Context, busy *errGuestBusy) error {
	err := &pve.Error{Class: plan.ErrorRetryable, Err: busy}
	if h.d.LastDelivery() {
		j, jerr := loadJournal(ctx, h.e.bus, h.op, h.e.cfg.Replica, h.e.cfg.Fault)
		if jerr != nil {
			return h.retry(ctx, jerr)
		}
		return h.fail(ctx, j, err)
	}
	delay := h.backoff()
	h.e.metrics.operation(string(h.op.Action), "busy")
	h.log().Info("guest busy on another replica; later", "holder", busy.holder.String(), "retry_in", delay)
	h.publish(ctx, plan.Result{Status: plan.StatusProgress, Message: "waiting: " + busy.Error()})
	return h.d.NakWithDelay(delay)
}

// fail settles a failed attempt: retryable errors are redelivered with backoff (or dead-lettered on the
// last delivery), conflicts and terminal errors are reported and terminated.
func (h *opRun) fail(ctx context.Context, j *journal, err error) error {
	e := h.e
	class := pve.ClassOf(err)
	upid, tail := failedTask(err)
	if class == plan.ErrorRetryable && !h.d.LastDelivery() {
		delay := h.backoff()
		e.metrics.operation(string(h.op.Action), "retried")
		h.log().Warn("operation failed; will retry", "err", err, "retry_in", delay)
		h.publish(ctx, plan.Result{Status: plan.StatusProgress, Message: "retrying: " + err.Error(), ErrorClass: class, UPID: upid, TaskLog: tail})
		return h.d.NakWithDelay(delay)
	}
	msg := err.Error()
	if jerr := j.finish(ctx, plan.StatusFailed, msg, ""); jerr != nil {
		h.log().Warn("record outcome", "err", jerr)
	}
	h.publish(ctx, plan.Result{Status: plan.StatusFailed, Message: msg, ErrorClass: class, UPID: upid, TaskLog: tail})
	if class == plan.ErrorRetryable {
		e.metrics.operation(string(h.op.Action), "dead_lettered")
		h.log().Error("operation exhausted its deliveries; dead-lettered", "err", err)
		subject, _ := bus.DLQSubject(e.cfg.Cluster, h.scope)
		if derr := h.d.DeadLetter(ctx, subject, msg); derr != nil {
			h.log().Error("dead-letter", "err", derr)
			return h.d.Term(msg)
		}
		return nil
	}
	e.metrics.operation(string(h.op.Action), "failed")
	h.log().Warn("operation failed", "err", err, "class", string(class))
	return h.d.Term(msg)
}

// failedTask returns the UPID and log tail of the failed task an error holds, if any.
func failedTask(err error) (upid string, tail []string) {
	var perr *pve.Error
	if errors.As(err, &perr) {
		return perr.UPID, perr.TaskLog
	}
	return "", nil
}

// retry hands a delivery back when the bus could not serve what the operation needs first (its guard, its
// journal, its run), with the same growing delay as a retryable failure: an outage of the bus outlasts a
// few quick redeliveries, and must not use up the operation's deliveries before the bus is back.
func (h *opRun) retry(ctx context.Context, err error) error {
	delay := h.backoff()
	h.log().Warn("operation postponed", "err", err, "retry_in", delay)
	return h.d.NakWithDelay(delay)
}

// backoff is the delay before the next delivery of an operation handed back after this one:
// RetryBackoff, doubling with each delivery up to 64 times it, and at most two minutes.
func (h *opRun) backoff() time.Duration {
	return min(h.e.cfg.RetryBackoff<<min(max(h.attempt, 1)-1, 6), 2*time.Minute)
}

// heartbeat keeps the delivery alive while the operation runs or waits.
func (h *opRun) heartbeat(ctx context.Context) func() {
	every := max(h.e.cfg.AckWait/3, 50*time.Millisecond)
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		clock.Every(hctx, every, func() {
			if err := h.d.InProgress(); err != nil {
				h.log().Debug("heartbeat", "err", err)
			}
		})
	}()
	return func() { cancel(); <-done }
}

// progress publishes a progress result while a task runs, at most every few seconds.
func (h *opRun) progress(ctx context.Context) func(pve.TaskStatus) {
	return func(st pve.TaskStatus) {
		h.beatMu.Lock()
		due := time.Since(h.lastBeat) > 5*time.Second
		if due {
			h.lastBeat = time.Now()
		}
		h.beatMu.Unlock()
		if due {
			h.publish(ctx, plan.Result{Status: plan.StatusProgress, UPID: st.UPID.String(), Message: "task running"})
		}
	}
}

// acquire takes the guest's slot (one operation per guest: this replica's mutex, then the guest guard
// shared by the node's replicas) and, for clones and downloads, a slot of the storage they write to. A
// guard held by another replica is waited for in place for up to one guard TTL (long enough for the guard
// of a killed replica to expire); after that acquire returns *errGuestBusy. onLost is called when the
// guard is later lost.
func (h *opRun) acquire(ctx context.Context, onLost func()) (func(), error) {
	e := h.e
	var releases []func()
	release := func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	if h.op.VMID > 0 {
		e.mu.Lock()
		gm, ok := e.guests[h.op.VMID]
		if !ok {
			gm = &sync.Mutex{}
			e.guests[h.op.VMID] = gm
		}
		e.mu.Unlock()
		if err := lockCtx(ctx, gm); err != nil {
			return nil, err
		}
		releases = append(releases, gm.Unlock)
		// A guest's guard is its node's (only that node's executors may write it): an operation of the
		// cluster's work queue that names a guest (a pool's membership) writes the pool, not the guest's
		// config, and takes none.
		if h.op.Node != bus.ClusterScope {
			g, err := h.guard(ctx)
			if err != nil {
				release()
				return nil, err
			}
			g.keep(ctx, onLost)
			releases = append(releases, g.release)
		}
	}
	if h.op.Storage != "" && (h.op.Action == plan.ActionClone || h.op.Action == plan.ActionDownload) {
		e.mu.Lock()
		sem, ok := e.storages[h.op.Storage]
		if !ok {
			sem = make(chan struct{}, e.cfg.StorageConcurrency)
			e.storages[h.op.Storage] = sem
		}
		e.mu.Unlock()
		select {
		case sem <- struct{}{}:
			releases = append(releases, func() { <-sem })
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		}
	}
	return release, nil
}

// guard takes the guest guard, waiting in place (with backoff) while another replica holds it, for up to
// one guard TTL.
func (h *opRun) guard(ctx context.Context) (*guestGuard, error) {
	e := h.e
	deadline := time.Now().Add(e.cfg.GuardTTL)
	delay := min(50*time.Millisecond, e.cfg.GuardTTL/10)
	announced := false
	for {
		g, holder, err := e.tryGuard(ctx, h.op)
		if err != nil || g != nil {
			return g, err
		}
		busy := &errGuestBusy{vmid: h.op.VMID, holder: *holder}
		if time.Now().After(deadline) {
			return nil, busy
		}
		if !announced {
			announced = true
			h.log().Info("guest busy on another replica; waiting", "holder", holder.String())
			h.publish(ctx, plan.Result{Status: plan.StatusProgress, Message: "waiting: " + busy.Error()})
		}
		if err := clock.Sleep(ctx, delay); err != nil {
			return nil, err
		}
		delay = min(2*delay, time.Second)
	}
}

// lockCtx locks m unless ctx ends first.
func lockCtx(ctx context.Context, m *sync.Mutex) error {
	for !m.TryLock() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// publish sends a result or progress event for the operation on the node's result subject. Final results
// carry a message id so a redelivery reports them once.
func (h *opRun) publish(ctx context.Context, r plan.Result) {
	e := h.e
	r.RunID, r.OpID, r.PlanID = h.op.RunID, h.op.ID, h.op.PlanID
	r.Cluster, r.Node, r.VMID, r.GuestType, r.Ref, r.Action = h.op.Cluster, h.op.Node, h.op.VMID, h.op.GuestType, h.op.Ref, h.op.Action
	r.Attempt, r.Executor, r.At, r.Elapsed = h.attempt, e.cfg.Replica, time.Now().UTC(), time.Since(h.start)
	if r.Cluster != e.cfg.Cluster || r.Node != h.scope {
		// A refused foreign operation is reported on the subject of the queue it came from.
		r.Cluster, r.Node = e.cfg.Cluster, h.scope
	}
	msg, err := wire.ResultToProto(r)
	if err != nil {
		h.log().Error("encode result", "err", err)
		return
	}
	subject, _ := bus.ResultSubject(e.cfg.Cluster, h.scope)
	if !r.Status.Final() {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := e.bus.Publish(pctx, subject, msg); err != nil {
			h.log().Warn("publish progress", "status", string(r.Status), "err", err)
		}
		return
	}
	// A final result is what the planner waits for. While NATS elects new leaders (a server lost) a publish
	// fails for a few seconds; it is tried again, under its message id so it is stored once, for up to
	// finalResultPatience before the delivery is settled. A result still not stored then is found by the
	// planner in the operation journal, later.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalResultPatience)
	defer cancel()
	delay := 100 * time.Millisecond
	for {
		id := h.op.RunID + "." + h.op.ID + ".final"
		if h.refused {
			id = h.op.RunID + "." + h.op.ID + ".refused"
		}
		_, err := e.bus.Publish(pctx, subject, msg, bus.WithMsgID(id))
		if err == nil {
			return
		}
		if pctx.Err() != nil {
			h.log().Warn("publish result", "status", string(r.Status), "err", err)
			return
		}
		h.log().Info("publish result failed; trying again", "status", string(r.Status), "err", err, "retry_in", delay)
		if clock.Sleep(pctx, delay) != nil {
			h.log().Warn("publish result", "status", string(r.Status), "err", err)
			return
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// finalResultPatience bounds the attempts to store one final result.
const finalResultPatience = 30 * time.Second
