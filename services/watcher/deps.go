package watcher

import (
	"context"
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// TreeStore holds manifest tree snapshots by name, the hash of their content (event.TreeName): the
// snapshots of the commits the watcher fetched (proxops_trees) and those clients stored (proxops_previews).
type TreeStore interface {
	// HasTree reports whether a snapshot of that name is stored.
	HasTree(ctx context.Context, tree string) (bool, error)
	// PutTree stores the snapshot of a fetched commit under snap.Tree unless a snapshot of that name is
	// already stored; it reports whether it wrote. A name always holds the same content.
	PutTree(ctx context.Context, snap TreeSnapshot) (written bool, err error)
	// GetTree returns the snapshot of that name, checked against its name: an error wrapping
	// ErrTreeNotFound when none is stored, event.ErrTreeMismatch when its content does not hash to it.
	GetTree(ctx context.Context, tree string) (TreeSnapshot, error)
}

// ErrTreeNotFound is wrapped by a TreeStore's GetTree when no snapshot has that name.
var ErrTreeNotFound = errors.New("tree snapshot not found")

// Publisher publishes repository events (the proxops.v1.repo.changed subject).
type Publisher interface {
	// PublishRepoChanged publishes ev with ev.EventID as its dedup id (Nats-Msg-Id), and returns once the
	// event is stored.
	PublishRepoChanged(ctx context.Context, ev RepoChanged) error
}

// HealthPublisher publishes whether the repository can be read (the proxops.v1.repo.health subject), for
// the status service to flag the desired state as stale.
type HealthPublisher interface {
	// PublishSourceHealth publishes h and returns once it is stored.
	PublishSourceHealth(ctx context.Context, h SourceHealth) error
}

// KV is a small durable key-value store (a JetStream KV bucket). The watcher keeps in it the last commit it
// announced and the pushed commits it has seen by webhook, so a restart neither forgets nor replays them.
// Keys use only [-/_=.a-zA-Z0-9]. The remembered deliveries (one small key per pushed commit) may expire
// after a few weeks (a bucket TTL): a forgotten delivery replayed later causes at most one fetch.
type KV interface {
	// Get returns the value of key and whether it exists.
	Get(ctx context.Context, key string) (value []byte, found bool, err error)
	// Put sets key to value.
	Put(ctx context.Context, key string, value []byte) error
	// Create sets key to value only if key does not exist; it reports whether it did.
	Create(ctx context.Context, key string, value []byte) (created bool, err error)
}

// RequestSource delivers ReconcileRequests: those of the proxops.v1.reconcile.request subject, and the
// work-tree applies of proxops.v1.apply.worktree.<user>, with Operator set to the user of the subject.
type RequestSource interface {
	// ConsumeRequests calls handle for each request until ctx ends, then returns nil. A request is done when
	// handle returns nil; an error wrapping ErrInvalidRequest will never succeed (terminate it), any other
	// error is transient (deliver it again later).
	ConsumeRequests(ctx context.Context, handle func(context.Context, ReconcileRequest) error) error
}

// ErrInvalidRequest is wrapped by the errors of ReconcileRequests that can never succeed.
var ErrInvalidRequest = errors.New("invalid reconcile request")

// Deps are what the watcher talks to besides git. Trees, Publisher and KV are required.
type Deps struct {
	Trees     TreeStore
	Publisher Publisher
	KV        KV
	// Requests is optional: without it, no ReconcileRequest is handled.
	Requests RequestSource
	// Health is optional: without it, the repository's health is only on /healthz and /metrics.
	Health HealthPublisher
	// Registry receives the watcher's metrics and is served on /metrics; nil means a private registry.
	Registry *prometheus.Registry
	// Logger is nil for no logs.
	Logger *slog.Logger
}
