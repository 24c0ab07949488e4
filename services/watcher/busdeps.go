package watcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/treestore"
	"github.com/proxops/proxops/internal/wire"
)

// BusDeps returns the watcher's dependencies on NATS JetStream: the proxops_trees object store (and, for
// reading, proxops_previews) as its tree store, the PROXOPS_REPO stream as its publisher (RepoChanged and
// SourceHealth) and request source (durable consumers watcher_reconcile and watcher_worktree, so each request
// is handled by one watcher), and the proxops_deliveries bucket as its KV. The streams, buckets and stores
// must have been provisioned (bus.Provision).
func BusDeps(b *bus.Bus, registry *prometheus.Registry, logger *slog.Logger) Deps {
	return Deps{
		Trees:     busTrees{b},
		Publisher: busPublisher{b},
		KV:        busKV{b},
		Requests:  busRequests{b},
		Health:    busPublisher{b},
		Registry:  registry,
		Logger:    logger,
	}
}

var (
	_ TreeStore       = busTrees{}
	_ Publisher       = busPublisher{}
	_ KV              = busKV{}
	_ RequestSource   = busRequests{}
	_ HealthPublisher = busPublisher{}
)

type busTrees struct{ b *bus.Bus }

func (t busTrees) HasTree(ctx context.Context, tree string) (bool, error) {
	_, err := t.GetTree(ctx, tree)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrTreeNotFound):
		return false, nil
	default:
		return false, err
	}
}

func (t busTrees) PutTree(ctx context.Context, snap TreeSnapshot) (bool, error) {
	return treestore.PutCommitted(ctx, t.b, snap)
}

func (t busTrees) GetTree(ctx context.Context, tree string) (TreeSnapshot, error) {
	return GetTree(ctx, t.b, tree)
}

// GetTree reads a tree snapshot (treestore.Get: proxops_trees, else proxops_previews, checked against its
// name); the error wraps ErrTreeNotFound when no snapshot has that name, event.ErrTreeMismatch when the
// content does not hash to it.
func GetTree(ctx context.Context, b *bus.Bus, tree string) (TreeSnapshot, error) {
	snap, err := treestore.Get(ctx, b, tree)
	if errors.Is(err, bus.ErrNotFound) {
		return TreeSnapshot{}, fmt.Errorf("tree %s: %w", tree, ErrTreeNotFound)
	}
	return snap, err
}

type busPublisher struct{ b *bus.Bus }

func (p busPublisher) PublishRepoChanged(ctx context.Context, ev RepoChanged) error {
	m, err := wire.RepoChangedToProto(ev)
	if err != nil {
		return err
	}
	_, err = p.b.Publish(ctx, bus.SubjectRepoChanged, m, bus.WithMsgID(ev.EventID))
	return err
}

func (p busPublisher) PublishSourceHealth(ctx context.Context, h SourceHealth) error {
	m, err := wire.SourceHealthToProto(h)
	if err != nil {
		return err
	}
	_, err = p.b.Publish(ctx, bus.SubjectRepoHealth, m)
	return err
}

type busKV struct{ b *bus.Bus }

func (k busKV) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, _, err := k.b.GetBytes(ctx, bus.BucketDeliveries, key)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, false, nil
	}
	return v, err == nil, err
}

func (k busKV) Put(ctx context.Context, key string, value []byte) error {
	_, err := k.b.PutBytes(ctx, bus.BucketDeliveries, key, value)
	return err
}

func (k busKV) Create(ctx context.Context, key string, value []byte) (bool, error) {
	_, err := k.b.CreateBytes(ctx, bus.BucketDeliveries, key, value)
	if errors.Is(err, bus.ErrExists) {
		return false, nil
	}
	return err == nil, err
}

type busRequests struct{ b *bus.Bus }

func (r busRequests) ConsumeRequests(ctx context.Context, handle func(context.Context, ReconcileRequest) error) error {
	consumers := []bus.ConsumerConfig{
		{Stream: bus.StreamRepo, Durable: bus.ConsumerWatcherReconcile, Filter: bus.SubjectReconcileRequest,
			Description: "watchers: reconcile requests"},
		{Stream: bus.StreamRepo, Durable: bus.ConsumerWatcherWorktree, Filter: bus.FilterWorktreeApply,
			Description: "watchers: operators' work-tree applies"},
	}
	for _, c := range consumers {
		if err := r.b.EnsureConsumer(ctx, c); err != nil {
			return err
		}
	}
	// Both consumers run until ctx ends; one that stops on an error stops the other.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(consumers))
	var wg sync.WaitGroup
	for i, c := range consumers {
		wg.Go(func() {
			defer cancel()
			errs[i] = r.b.Consume(cctx, c.Stream, c.Durable, bus.ConsumeOptions{Concurrency: 1}, func(ctx context.Context, d *bus.Delivery) error {
				req, err := wire.DecodeReconcileRequest(ctx, d.Decode)
				if err != nil {
					return bus.Terminal(fmt.Errorf("%w: %w", ErrInvalidRequest, err))
				}
				// Who asked for a work-tree apply is the user of the subject, which only that user may
				// publish on; an ordinary request never carries an operator.
				req.Operator = ""
				if c.Durable == bus.ConsumerWatcherWorktree {
					if req.Operator, err = bus.WorktreeApplyUser(d.Subject()); err != nil {
						return bus.Terminal(fmt.Errorf("%w: %w", ErrInvalidRequest, err))
					}
				}
				if err := handle(ctx, req); err != nil {
					if errors.Is(err, ErrInvalidRequest) {
						return bus.Terminal(err)
					}
					return err
				}
				return nil
			})
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return errors.Join(errs...)
}
