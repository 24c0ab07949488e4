// Package bus is ProxOps' NATS layer: the subjects, streams, buckets and object stores of the contract (all
// spelled in subjects.go), an embedded JetStream server for single-host use, connections to a deployed
// server, idempotent provisioning, and typed helpers that publish, consume, request and store protobuf
// messages. Messages larger than the server's payload limit travel through the proxops_blobs object store
// without the callers noticing.
//
// The package speaks proto.Message only; converting domain types is internal/wire's job. Every JetStream API
// call gets its own timeout, because API calls hang rather than fail while a cluster has no meta leader and
// a permission the server denies shows up as a timeout too.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/proxops/proxops/internal/defaults"
)

// Defaults.
const (
	DefaultAPITimeout     = 5 * time.Second
	DefaultRequestTimeout = 30 * time.Second
	// blobHeadroom is kept free below the payload limit for headers and protocol overhead.
	blobHeadroom = 16 * 1024
)

// Errors callers can recognise with errors.Is.
var (
	// ErrWrongType: a message's Proxops-Type is not the type the caller expects.
	ErrWrongType = errors.New("unexpected message type")
	// ErrWrongLastSequence: an expected-last-subject-sequence check failed (another writer was first).
	ErrWrongLastSequence = errors.New("wrong last subject sequence")
	// ErrNotFound: no such key, object or message.
	ErrNotFound = errors.New("not found")
	// ErrExists: a key that must be created already exists.
	ErrExists = errors.New("already exists")
	// ErrRevisionMismatch: a compare-and-set found another revision.
	ErrRevisionMismatch = errors.New("revision mismatch")
	// ErrLeaseHeld: a lease is held by another holder.
	ErrLeaseHeld = errors.New("lease held")
	// ErrLeaseLost: a lease expired or was taken over before it was renewed.
	ErrLeaseLost = errors.New("lease lost")
	// ErrBlobMissing: a message refers to a blob that is no longer stored.
	ErrBlobMissing = errors.New("blob missing")
)

// Options tune a Bus.
type Options struct {
	// APITimeout bounds every JetStream API call (default 5 s).
	APITimeout time.Duration
	// RequestTimeout bounds a Request whose context has no deadline (default 30 s).
	RequestTimeout time.Duration
	// BlobThreshold is the body size above which a message travels through proxops_blobs (default: the
	// server's payload limit less room for headers).
	BlobThreshold int
	// Logger receives the bus's own diagnostics (default: discarded).
	Logger *slog.Logger
}

// Bus is a connection to NATS with JetStream and the typed helpers around it.
type Bus struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	opts Options
	log  *slog.Logger
	// followStallCheck is how often a silent follower checks its stream (tests shorten it).
	followStallCheck time.Duration
	own              bool

	mu      sync.Mutex
	kvs     map[string]jetstream.KeyValue
	objects map[string]jetstream.ObjectStore
}

// New wraps an established connection. The caller keeps ownership of nc (Close does not close it).
func New(nc *nats.Conn, opts Options) (*Bus, error) {
	return newBus(nc, opts, false)
}

func newBus(nc *nats.Conn, opts Options, own bool) (*Bus, error) {
	if nc == nil {
		return nil, fmt.Errorf("new bus: no connection")
	}
	defaults.Positive(&opts.APITimeout, DefaultAPITimeout)
	defaults.Positive(&opts.RequestTimeout, DefaultRequestTimeout)
	defaults.Logger(&opts.Logger)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(opts.APITimeout))
	if err != nil {
		return nil, fmt.Errorf("new bus: jetstream: %w", err)
	}
	return &Bus{
		nc: nc, js: js, opts: opts, log: opts.Logger, own: own,
		kvs: map[string]jetstream.KeyValue{}, objects: map[string]jetstream.ObjectStore{},
		followStallCheck: followStallCheck,
	}, nil
}

// Conn returns the underlying connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream returns the underlying JetStream handle, for what the helpers do not cover.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Close drains and closes the connection when the Bus opened it (Connect, Server.Connect); a Bus made with
// New leaves the connection to its owner.
func (b *Bus) Close() error {
	if !b.own || b.nc.IsClosed() {
		return nil
	}
	done := make(chan struct{})
	b.nc.SetClosedHandler(func(*nats.Conn) { close(done) })
	if err := b.nc.Drain(); err != nil {
		b.nc.Close()
		return fmt.Errorf("close bus: %w", err)
	}
	select {
	case <-done:
	case <-time.After(b.opts.APITimeout):
		b.nc.Close()
	}
	return nil
}

// api bounds one JetStream API call.
func (b *Bus) api(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.opts.APITimeout)
}

// blobThreshold is the largest body sent inline.
func (b *Bus) blobThreshold() int {
	if b.opts.BlobThreshold > 0 {
		return b.opts.BlobThreshold
	}
	max := int(b.nc.MaxPayload())
	if max <= 0 {
		max = 1 << 20
	}
	return max - blobHeadroom
}

// keyValue returns a cached handle to a bucket.
func (b *Bus) keyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	b.mu.Lock()
	kv, ok := b.kvs[bucket]
	b.mu.Unlock()
	if ok {
		return kv, nil
	}
	ctx, cancel := b.api(ctx)
	defer cancel()
	kv, err := b.js.KeyValue(ctx, bucket)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("bucket %s: %w (not provisioned)", bucket, ErrNotFound)
		}
		return nil, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	b.mu.Lock()
	b.kvs[bucket] = kv
	b.mu.Unlock()
	return kv, nil
}

// objectStore returns a cached handle to an object store.
func (b *Bus) objectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	b.mu.Lock()
	obs, ok := b.objects[bucket]
	b.mu.Unlock()
	if ok {
		return obs, nil
	}
	ctx, cancel := b.api(ctx)
	defer cancel()
	obs, err := b.js.ObjectStore(ctx, bucket)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("object store %s: %w (not provisioned)", bucket, ErrNotFound)
		}
		return nil, fmt.Errorf("object store %s: %w", bucket, err)
	}
	b.mu.Lock()
	b.objects[bucket] = obs
	b.mu.Unlock()
	return obs, nil
}
