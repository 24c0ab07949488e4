package watcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/wire"
)

// BusDeps returns the watcher's dependencies on NATS JetStream: the proxops_trees object store as its tree
// store, the PROXOPS_REPO stream as its publisher (RepoChanged and SourceHealth) and request source (durable consumer watcher_reconcile, so
// each request is handled by one watcher), and the proxops_deliveries bucket as its KV. The streams, buckets
// and stores must have been provisioned (bus.Provision).
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
	return t.b.PutObjectIfAbsent(ctx, bus.ObjectTrees, snap.Tree, wire.TreeSnapshotToProto(snap))
}

func (t busTrees) GetTree(ctx context.Context, tree string) (TreeSnapshot, error) {
	return GetTree(ctx, t.b, tree)
}

// GetTree reads a tree snapshot from the proxops_trees object store; the error wraps ErrTreeNotFound when no
// snapshot has that name.
func GetTree(ctx context.Context, b *bus.Bus, tree string) (TreeSnapshot, error) {
	snap, err := wire.DecodeTreeSnapshot(ctx, func(ctx context.Context, into proto.Message) error {
		return b.GetObject(ctx, bus.ObjectTrees, tree, into)
	})
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
	err := r.b.EnsureConsumer(ctx, bus.ConsumerConfig{
		Stream: bus.StreamRepo, Durable: bus.ConsumerWatcherReconcile, Filter: bus.SubjectReconcileRequest,
		Description: "watchers: reconcile requests",
	})
	if err != nil {
		return err
	}
	err = r.b.Consume(ctx, bus.StreamRepo, bus.ConsumerWatcherReconcile, bus.ConsumeOptions{Concurrency: 1},
		func(ctx context.Context, d *bus.Delivery) error {
			req, err := wire.DecodeReconcileRequest(ctx, d.Decode)
			if err != nil {
				return bus.Terminal(fmt.Errorf("%w: %w", ErrInvalidRequest, err))
			}
			if err := handle(ctx, req); err != nil {
				if errors.Is(err, ErrInvalidRequest) {
					return bus.Terminal(err)
				}
				return err
			}
			return nil
		})
	if ctx.Err() != nil {
		return nil
	}
	return err
}
