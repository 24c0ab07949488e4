package watcher_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/bustest"
	"github.com/proxops/proxops/internal/treestore"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/watcher"
)

// testBus is a real, provisioned NATS JetStream server in the test's process. Every watcher a test starts
// on it connects on its own and talks to it through watcher.BusDeps: trees go to the proxops_trees object
// store, events and health reports to the PROXOPS_REPO stream, deliveries to the proxops_deliveries bucket,
// and reconcile requests come from the stream's durable consumer. A test keeps one testBus across watcher
// restarts, as JetStream keeps what it stored.
//
// Thin wrappers around the real adapters let a test see what the stream cannot show: every publish call,
// duplicates included (the stream deduplicates them by id), how often a tree was written, and what the
// watcher answered to each request. They delegate and record; only a failure set with setFail replaces the
// real publish.
type testBus struct {
	t   testing.TB
	env *bustest.Env
	pub *publishLog
	// trees reads and writes the object store over the test's own connection.
	trees  watcher.TreeStore
	writes *treeWrites
	reqs   *answerLog
}

func newTestBus(t testing.TB) *testBus {
	t.Helper()
	env := bustest.Start(t)
	return &testBus{
		t: t, env: env,
		pub:    &publishLog{notify: make(chan struct{}, 1)},
		trees:  watcher.BusDeps(env.Bus, nil, nil).Trees,
		writes: &treeWrites{n: map[string]int{}},
		reqs:   &answerLog{},
	}
}

// connect opens a connection for one watcher, as its own process would, and returns its dependencies; the
// returned func closes the connection.
func (b *testBus) connect(reg *prometheus.Registry, logger *slog.Logger) (watcher.Deps, func()) {
	b.t.Helper()
	conn, err := b.env.Server.Connect(bus.Options{})
	if err != nil {
		b.t.Fatalf("connect nats: %v", err)
	}
	deps := watcher.BusDeps(conn, reg, logger)
	pub := recordingPublisher{log: b.pub, next: deps.Publisher, health: deps.Health}
	deps.Publisher, deps.Health = pub, pub
	deps.Trees = countingTrees{writes: b.writes, next: deps.Trees}
	deps.Requests = answeringRequests{log: b.reqs, next: deps.Requests}
	return deps, func() { _ = conn.Close() }
}

// readRepoStream decodes every message of one subject of the repository stream, oldest first.
func readRepoStream[T any](b *testBus, subject string, decode func(context.Context, wire.DecodeFunc) (T, error)) []T {
	b.t.Helper()
	var out []T
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err := b.env.Bus.ReadStream(ctx, bus.StreamRepo, subject, 1, func(m *bus.Message) error {
		v, err := decode(ctx, m.Decode)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	if err != nil {
		b.t.Fatalf("read %s: %v", subject, err)
	}
	return out
}

// stored reads every RepoChanged the stream holds, oldest first.
func (b *testBus) stored() []watcher.RepoChanged {
	b.t.Helper()
	return readRepoStream(b, bus.SubjectRepoChanged, wire.DecodeRepoChanged)
}

// storedMatching returns the stored events that satisfy keep.
func (b *testBus) storedMatching(keep func(watcher.RepoChanged) bool) []watcher.RepoChanged {
	b.t.Helper()
	var out []watcher.RepoChanged
	for _, ev := range b.stored() {
		if keep(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// healthReports reads every SourceHealth the stream holds, oldest first.
func (b *testBus) healthReports() []watcher.SourceHealth {
	b.t.Helper()
	return readRepoStream(b, bus.SubjectRepoHealth, wire.DecodeSourceHealth)
}

// getTree reads a snapshot from the object store.
func (b *testBus) getTree(tree string) (watcher.TreeSnapshot, error) {
	return watcher.GetTree(context.Background(), b.env.Bus, tree)
}

// putPreview stores a snapshot as a client does before it asks for it.
func (b *testBus) putPreview(snap watcher.TreeSnapshot) error {
	_, err := treestore.PutPreview(context.Background(), b.env.Bus, snap)
	return err
}

// send publishes a reconcile request on the stream and returns what the watcher that received it answered.
func (b *testBus) send(req watcher.ReconcileRequest) error {
	return b.sendOn(bus.SubjectReconcileRequest, req, req)
}

// sendAs publishes a work-tree apply on an operator user's subject and returns the watcher's answer.
func (b *testBus) sendAs(user string, req watcher.ReconcileRequest) error {
	subject, err := bus.WorktreeApplySubject(user)
	if err != nil {
		return err
	}
	received := req
	received.Operator = user
	return b.sendOn(subject, req, received)
}

// sendOn publishes req on subject and returns the answer to the request the watcher received.
func (b *testBus) sendOn(subject string, req, received watcher.ReconcileRequest) error {
	from := b.reqs.count()
	if _, err := b.env.Bus.Publish(context.Background(), subject, wire.ReconcileRequestToProto(req)); err != nil {
		return fmt.Errorf("publish request: %w", err)
	}
	req = received
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		if err, ok := b.reqs.answerTo(req, from); ok {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("request %q: no watcher answered", req.RequestID)
}

// requestsSettled reports whether the watchers' request consumer has acknowledged or terminated every
// request on the stream: none waits for a delivery or for another one.
func (b *testBus) requestsSettled() bool {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cons, err := b.env.Bus.JetStream().Consumer(ctx, bus.StreamRepo, bus.ConsumerWatcherReconcile)
	if err != nil {
		b.t.Fatalf("request consumer: %v", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		b.t.Fatalf("request consumer: %v", err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0
}

// publishLog records every publish call of the watchers on a testBus that succeeded, and can make them
// fail.
type publishLog struct {
	mu     sync.Mutex
	events []watcher.RepoChanged
	fail   error
	notify chan struct{}
}

// setFail makes every publish fail with err (nil: publish again).
func (p *publishLog) setFail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = err
}

func (p *publishLog) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fail
}

func (p *publishLog) record(ev watcher.RepoChanged) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, ev)
}

// all returns every RepoChanged the watchers published, duplicates included, in call order.
func (p *publishLog) all() []watcher.RepoChanged {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

// matching returns the published events that satisfy keep.
func (p *publishLog) matching(keep func(watcher.RepoChanged) bool) []watcher.RepoChanged {
	var out []watcher.RepoChanged
	for _, ev := range p.all() {
		if keep(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// forCommit returns the published events announcing commit.
func (p *publishLog) forCommit(commit string) []watcher.RepoChanged {
	return p.matching(func(ev watcher.RepoChanged) bool { return ev.Commit == commit })
}

// recordingPublisher publishes through the real adapter and records each call that returned, as the
// watcher saw it return: a call is in the log once the watcher goes on past it.
type recordingPublisher struct {
	log    *publishLog
	next   watcher.Publisher
	health watcher.HealthPublisher
}

func (p recordingPublisher) PublishRepoChanged(ctx context.Context, ev watcher.RepoChanged) error {
	if err := p.log.failure(); err != nil {
		return err
	}
	if err := p.next.PublishRepoChanged(ctx, ev); err != nil {
		return err
	}
	p.log.record(ev)
	select {
	case p.log.notify <- struct{}{}:
	default:
	}
	return nil
}

func (p recordingPublisher) PublishSourceHealth(ctx context.Context, h watcher.SourceHealth) error {
	if err := p.log.failure(); err != nil {
		return err
	}
	return p.health.PublishSourceHealth(ctx, h)
}

// treeWrites counts the snapshots the object store took, by tree.
type treeWrites struct {
	mu sync.Mutex
	n  map[string]int
}

func (w *treeWrites) of(tree string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[tree]
}

// countingTrees counts the writes the real tree store reports.
type countingTrees struct {
	writes *treeWrites
	next   watcher.TreeStore
}

func (s countingTrees) HasTree(ctx context.Context, tree string) (bool, error) {
	return s.next.HasTree(ctx, tree)
}

func (s countingTrees) GetTree(ctx context.Context, tree string) (watcher.TreeSnapshot, error) {
	return s.next.GetTree(ctx, tree)
}

func (s countingTrees) PutTree(ctx context.Context, snap watcher.TreeSnapshot) (bool, error) {
	written, err := s.next.PutTree(ctx, snap)
	if written {
		s.writes.mu.Lock()
		s.writes.n[snap.Tree]++
		s.writes.mu.Unlock()
	}
	return written, err
}

// answerLog keeps what the watchers answered to each request they received.
type answerLog struct {
	mu      sync.Mutex
	answers []answer
}

type answer struct {
	req watcher.ReconcileRequest
	err error
}

func (l *answerLog) add(req watcher.ReconcileRequest, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers = append(l.answers, answer{req: req, err: err})
}

func (l *answerLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.answers)
}

// answerTo returns the first answer to req from the from-th on.
func (l *answerLog) answerTo(req watcher.ReconcileRequest, from int) (error, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.answers[from:] {
		if cmp.Equal(a.req, req, cmpopts.EquateEmpty()) {
			return a.err, true
		}
	}
	return nil, false
}

// answeringRequests consumes requests through the real adapter and logs the watcher's answer to each.
type answeringRequests struct {
	log  *answerLog
	next watcher.RequestSource
}

func (r answeringRequests) ConsumeRequests(ctx context.Context, handle func(context.Context, watcher.ReconcileRequest) error) error {
	return r.next.ConsumeRequests(ctx, func(ctx context.Context, req watcher.ReconcileRequest) error {
		err := handle(ctx, req)
		r.log.add(req, err)
		return err
	})
}

// waitTimeout bounds every wait for an eventual condition.
const waitTimeout = 20 * time.Second
