package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Lease is a key of proxops_leases held by one holder. It lives for the bucket's TTL after its last write:
// the holder renews it (Renew, a compare-and-set on its revision) well within the TTL, and anyone may take
// it once it has expired.
type Lease struct {
	bus    *Bus
	key    string
	holder string

	mu  sync.Mutex
	rev uint64
}

// AcquireLease takes the lease key for holder. ErrLeaseHeld (naming the holder) when someone holds it.
func (b *Bus) AcquireLease(ctx context.Context, key, holder string) (*Lease, error) {
	if holder == "" {
		return nil, fmt.Errorf("acquire lease %s: empty holder", key)
	}
	kv, err := b.keyValue(ctx, BucketLeases)
	if err != nil {
		return nil, fmt.Errorf("acquire lease %s: %w", key, err)
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	rev, err := kv.Create(actx, key, []byte(holder))
	if errors.Is(err, jetstream.ErrKeyExists) {
		cur, _, herr := b.LeaseHolder(ctx, key)
		if herr != nil {
			cur = "another holder"
		}
		return nil, fmt.Errorf("acquire lease %s: %w by %s", key, ErrLeaseHeld, cur)
	}
	if err != nil {
		return nil, fmt.Errorf("acquire lease %s: %w", key, err)
	}
	return &Lease{bus: b, key: key, holder: holder, rev: rev}, nil
}

// Key is the lease's key.
func (l *Lease) Key() string { return l.key }

// Holder is who holds the lease.
func (l *Lease) Holder() string { return l.holder }

// Revision is the revision of the lease's last write.
func (l *Lease) Revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// Renew extends the lease by another TTL. ErrLeaseLost when it expired or someone else wrote it meanwhile:
// the holder must then stop acting under it.
func (l *Lease) Renew(ctx context.Context) error {
	kv, err := l.bus.keyValue(ctx, BucketLeases)
	if err != nil {
		return fmt.Errorf("renew lease %s: %w", l.key, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	actx, cancel := l.bus.api(ctx)
	defer cancel()
	rev, err := kv.Update(actx, l.key, []byte(l.holder), l.rev)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSequence(err) {
			return fmt.Errorf("renew lease %s: %w", l.key, ErrLeaseLost)
		}
		return fmt.Errorf("renew lease %s: %w", l.key, err)
	}
	l.rev = rev
	return nil
}

// Release gives the lease up at once (only if still held at the revision this holder last wrote).
func (l *Lease) Release(ctx context.Context) error {
	kv, err := l.bus.keyValue(ctx, BucketLeases)
	if err != nil {
		return fmt.Errorf("release lease %s: %w", l.key, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	actx, cancel := l.bus.api(ctx)
	defer cancel()
	if err := kv.Delete(actx, l.key, jetstream.LastRevision(l.rev)); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSequence(err) {
			return fmt.Errorf("release lease %s: %w", l.key, ErrLeaseLost)
		}
		return fmt.Errorf("release lease %s: %w", l.key, err)
	}
	return nil
}

// LeaseHolder reports who holds a lease now.
func (b *Bus) LeaseHolder(ctx context.Context, key string) (holder string, held bool, err error) {
	kv, err := b.keyValue(ctx, BucketLeases)
	if err != nil {
		return "", false, fmt.Errorf("lease %s: %w", key, err)
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	e, err := kv.Get(actx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("lease %s: %w", key, err)
	}
	return string(e.Value()), true, nil
}

// LeaseEvent is a change of a lease: taken or renewed (Held) or released or expired (not Held).
type LeaseEvent struct {
	Key      string
	Holder   string
	Held     bool
	Revision uint64
}

// WatchLeases streams the current state of every lease and then each change, including expiries, until
// ctx is cancelled (the channel is then closed).
func (b *Bus) WatchLeases(ctx context.Context) (<-chan LeaseEvent, error) {
	kv, err := b.keyValue(ctx, BucketLeases)
	if err != nil {
		return nil, fmt.Errorf("watch leases: %w", err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch leases: %w", err)
	}
	return forwardUpdates(ctx, w, 16, func(e jetstream.KeyValueEntry) LeaseEvent {
		ev := LeaseEvent{Key: e.Key(), Revision: e.Revision()}
		if e.Operation() == jetstream.KeyValuePut {
			ev.Held, ev.Holder = true, string(e.Value())
		}
		return ev
	}), nil
}
