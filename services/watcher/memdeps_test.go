package watcher_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/services/watcher"
)

// memTrees is an in-memory tree store that counts the writes of each tree.
type memTrees struct {
	mu     sync.Mutex
	trees  map[string]watcher.TreeSnapshot
	writes map[string]int
}

func newMemTrees() *memTrees {
	return &memTrees{trees: map[string]watcher.TreeSnapshot{}, writes: map[string]int{}}
}

func (s *memTrees) HasTree(_ context.Context, tree string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.trees[tree]
	return ok, nil
}

func (s *memTrees) PutTree(_ context.Context, snap watcher.TreeSnapshot) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.trees[snap.Tree]; ok {
		return false, nil
	}
	s.trees[snap.Tree] = snap
	s.writes[snap.Tree]++
	return true, nil
}

func (s *memTrees) GetTree(_ context.Context, tree string) (watcher.TreeSnapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, ok := s.trees[tree]
	if !ok {
		return watcher.TreeSnapshot{}, fmt.Errorf("tree %s: %w", tree, watcher.ErrTreeNotFound)
	}
	return snap, nil
}

func (s *memTrees) writesOf(tree string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[tree]
}

// memPublisher records every publish call, duplicates included, so a test sees what the bus would have had
// to deduplicate.
type memPublisher struct {
	mu     sync.Mutex
	events []watcher.RepoChanged
	health []watcher.SourceHealth
	fail   error
	notify chan struct{}
}

func (p *memPublisher) PublishSourceHealth(_ context.Context, h watcher.SourceHealth) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	p.health = append(p.health, h)
	return nil
}

// healthReports returns the published SourceHealth reports, oldest first.
func (p *memPublisher) healthReports() []watcher.SourceHealth {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.health)
}

func newMemPublisher() *memPublisher { return &memPublisher{notify: make(chan struct{}, 1)} }

func (p *memPublisher) PublishRepoChanged(_ context.Context, ev watcher.RepoChanged) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	p.events = append(p.events, ev)
	select {
	case p.notify <- struct{}{}:
	default:
	}
	return nil
}

func (p *memPublisher) setFail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = err
}

func (p *memPublisher) all() []watcher.RepoChanged {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

// matching returns the published events that satisfy keep.
func (p *memPublisher) matching(keep func(watcher.RepoChanged) bool) []watcher.RepoChanged {
	var out []watcher.RepoChanged
	for _, ev := range p.all() {
		if keep(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// forCommit returns the events announcing commit.
func (p *memPublisher) forCommit(commit string) []watcher.RepoChanged {
	return p.matching(func(ev watcher.RepoChanged) bool { return ev.Commit == commit })
}

// memKV is an in-memory KV; a test keeps it across watcher restarts as JetStream would.
type memKV struct {
	mu sync.Mutex
	m  map[string][]byte
}

func newMemKV() *memKV { return &memKV{m: map[string][]byte{}} }

func (k *memKV) Get(_ context.Context, key string) ([]byte, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.m[key]
	return slices.Clone(v), ok, nil
}

func (k *memKV) Put(_ context.Context, key string, value []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[key] = slices.Clone(value)
	return nil
}

func (k *memKV) Create(_ context.Context, key string, value []byte) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.m[key]; ok {
		return false, nil
	}
	k.m[key] = slices.Clone(value)
	return true, nil
}

// memRequests is a request source fed by the test; send returns what the handler answered.
type memRequests struct {
	ch chan memRequest
}

type memRequest struct {
	req   watcher.ReconcileRequest
	reply chan error
}

func newMemRequests() *memRequests { return &memRequests{ch: make(chan memRequest)} }

func (s *memRequests) ConsumeRequests(ctx context.Context, handle func(context.Context, watcher.ReconcileRequest) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case r := <-s.ch:
			r.reply <- handle(ctx, r.req)
		}
	}
}

func (s *memRequests) send(t testing.TB, req watcher.ReconcileRequest) error {
	t.Helper()
	r := memRequest{req: req, reply: make(chan error, 1)}
	select {
	case s.ch <- r:
	case <-time.After(waitTimeout):
		t.Fatal("request source: the watcher does not consume requests")
	}
	select {
	case err := <-r.reply:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("request source: no answer")
	}
	return errors.New("unreachable")
}

// waitTimeout bounds every wait for an eventual condition.
const waitTimeout = 20 * time.Second

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
