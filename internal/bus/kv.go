package bus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// A bucket holds values of one protobuf type each; KV entries carry no headers, so the type is the
// bucket's contract rather than checked per value.

// GetProto reads a key into m and returns its revision, or ErrNotFound.
func (b *Bus) GetProto(ctx context.Context, bucket, key string, m proto.Message) (uint64, error) {
	kv, err := b.keyValue(ctx, bucket)
	if err != nil {
		return 0, err
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	e, err := kv.Get(actx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return 0, fmt.Errorf("get %s/%s: %w", bucket, key, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
	if err := proto.Unmarshal(e.Value(), m); err != nil {
		return 0, fmt.Errorf("get %s/%s: unmarshal %s: %w", bucket, key, TypeName(m), err)
	}
	return e.Revision(), nil
}

// GetOpRecord reads the record the executors of a node keep of an operation (proxops_ops) into m: under its
// key (OpKey), or else, for a run opened before records named their node, under LegacyOpKey. It returns the
// key it read, or ErrNotFound when neither holds a record.
func (b *Bus) GetOpRecord(ctx context.Context, cluster, node, run, op string, m proto.Message) (string, error) {
	key, err := OpKey(cluster, node, run, op)
	if err != nil {
		return "", err
	}
	legacy, _ := LegacyOpKey(run, op)
	for _, k := range []string{key, legacy} {
		if _, err := b.GetProto(ctx, BucketOps, k, m); err == nil {
			return k, nil
		} else if !errors.Is(err, ErrNotFound) {
			return "", err
		}
	}
	return "", fmt.Errorf("get %s/%s: %w", BucketOps, key, ErrNotFound)
}

// PutProto writes a key unconditionally and returns the new revision.
func (b *Bus) PutProto(ctx context.Context, bucket, key string, m proto.Message) (uint64, error) {
	return b.writeProto(ctx, bucket, key, m, func(ctx context.Context, kv jetstream.KeyValue, data []byte) (uint64, error) {
		return kv.Put(ctx, key, data)
	})
}

// CreateProto writes a key that must not exist yet (ErrExists otherwise).
func (b *Bus) CreateProto(ctx context.Context, bucket, key string, m proto.Message) (uint64, error) {
	rev, err := b.writeProto(ctx, bucket, key, m, func(ctx context.Context, kv jetstream.KeyValue, data []byte) (uint64, error) {
		return kv.Create(ctx, key, data)
	})
	if err != nil && (errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err)) {
		return 0, fmt.Errorf("create %s/%s: %w", bucket, key, ErrExists)
	}
	return rev, err
}

// UpdateProto writes a key whose current revision is rev (compare-and-set; ErrRevisionMismatch otherwise).
func (b *Bus) UpdateProto(ctx context.Context, bucket, key string, m proto.Message, rev uint64) (uint64, error) {
	rev, err := b.writeProto(ctx, bucket, key, m, func(ctx context.Context, kv jetstream.KeyValue, data []byte) (uint64, error) {
		return kv.Update(ctx, key, data, rev)
	})
	if err != nil && (errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSequence(err)) {
		return 0, fmt.Errorf("update %s/%s at revision %d: %w", bucket, key, rev, ErrRevisionMismatch)
	}
	return rev, err
}

// DeleteKey deletes a key (a no-op when it does not exist).
func (b *Bus) DeleteKey(ctx context.Context, bucket, key string) error {
	kv, err := b.keyValue(ctx, bucket)
	if err != nil {
		return err
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	if err := kv.Delete(actx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete %s/%s: %w", bucket, key, err)
	}
	return nil
}

// Keys lists a bucket's keys in sorted order.
func (b *Bus) Keys(ctx context.Context, bucket string) ([]string, error) {
	kv, err := b.keyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	keys, err := kv.Keys(actx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("keys of %s: %w", bucket, err)
	}
	slices.Sort(keys)
	return keys, nil
}

func (b *Bus) writeProto(ctx context.Context, bucket, key string, m proto.Message,
	write func(context.Context, jetstream.KeyValue, []byte) (uint64, error)) (uint64, error) {
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return 0, fmt.Errorf("put %s/%s: marshal %s: %w", bucket, key, TypeName(m), err)
	}
	return b.writeRaw(ctx, bucket, key, data, write)
}

func (b *Bus) writeRaw(ctx context.Context, bucket, key string, data []byte,
	write func(context.Context, jetstream.KeyValue, []byte) (uint64, error)) (uint64, error) {
	kv, err := b.keyValue(ctx, bucket)
	if err != nil {
		return 0, err
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	rev, err := write(actx, kv, data)
	if err != nil {
		return 0, fmt.Errorf("put %s/%s: %w", bucket, key, err)
	}
	return rev, nil
}

// GetBytes reads a key holding raw bytes (buckets whose values are not protobuf messages) and returns its
// value and revision, or ErrNotFound.
func (b *Bus) GetBytes(ctx context.Context, bucket, key string) ([]byte, uint64, error) {
	kv, err := b.keyValue(ctx, bucket)
	if err != nil {
		return nil, 0, err
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	e, err := kv.Get(actx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, fmt.Errorf("get %s/%s: %w", bucket, key, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
	return e.Value(), e.Revision(), nil
}

// PutBytes writes raw bytes to a key unconditionally and returns the new revision.
func (b *Bus) PutBytes(ctx context.Context, bucket, key string, data []byte) (uint64, error) {
	return b.writeRaw(ctx, bucket, key, data, func(ctx context.Context, kv jetstream.KeyValue, data []byte) (uint64, error) {
		return kv.Put(ctx, key, data)
	})
}

// CreateBytes writes raw bytes to a key that must not exist yet (ErrExists otherwise).
func (b *Bus) CreateBytes(ctx context.Context, bucket, key string, data []byte) (uint64, error) {
	rev, err := b.writeRaw(ctx, bucket, key, data, func(ctx context.Context, kv jetstream.KeyValue, data []byte) (uint64, error) {
		return kv.Create(ctx, key, data)
	})
	if err != nil && (errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err)) {
		return 0, fmt.Errorf("create %s/%s: %w", bucket, key, ErrExists)
	}
	return rev, err
}

// PutObjectIfAbsent stores a protobuf message as a named object unless the name exists; objects named by
// content (a tree hash) are thus written once. It reports whether it wrote.
func (b *Bus) PutObjectIfAbsent(ctx context.Context, bucket, name string, m proto.Message) (bool, error) {
	obs, err := b.objectStore(ctx, bucket)
	if err != nil {
		return false, err
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	if _, err := obs.GetInfo(actx, name); err == nil {
		return false, nil
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return false, fmt.Errorf("put object %s/%s: %w", bucket, name, err)
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return false, fmt.Errorf("put object %s/%s: marshal %s: %w", bucket, name, TypeName(m), err)
	}
	meta := jetstream.ObjectMeta{Name: name, Headers: map[string][]string{
		HeaderType: {TypeName(m)}, HeaderContentType: {ContentTypeProtobuf},
	}}
	if _, err := obs.Put(actx, meta, bytes.NewReader(data)); err != nil {
		return false, fmt.Errorf("put object %s/%s: %w", bucket, name, err)
	}
	return true, nil
}

// ObjectHolds reports whether the named object holds exactly m as PutObjectIfAbsent would write it (same
// type, same bytes), comparing the SHA-256 digest the store keeps of the object with m's, without reading
// the object; false when it is absent or holds anything else.
func (b *Bus) ObjectHolds(ctx context.Context, bucket, name string, m proto.Message) (bool, error) {
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return false, fmt.Errorf("object %s/%s: marshal %s: %w", bucket, name, TypeName(m), err)
	}
	obs, err := b.objectStore(ctx, bucket)
	if err != nil {
		return false, err
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	info, err := obs.GetInfo(actx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("object %s/%s: %w", bucket, name, err)
	}
	if info.Headers.Get(HeaderType) != TypeName(m) {
		return false, nil
	}
	h := sha256.New()
	h.Write(data)
	return info.Digest == jetstream.GetObjectDigestValue(h), nil
}

// GetObject reads a named object into m, refusing an object of another type; ErrNotFound when absent.
func (b *Bus) GetObject(ctx context.Context, bucket, name string, m proto.Message) error {
	obs, err := b.objectStore(ctx, bucket)
	if err != nil {
		return err
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	res, err := obs.Get(actx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("get object %s/%s: %w", bucket, name, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("get object %s/%s: %w", bucket, name, err)
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return fmt.Errorf("get object %s/%s: %w", bucket, name, err)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(res); err != nil {
		return fmt.Errorf("get object %s/%s: %w", bucket, name, err)
	}
	if err := b.decode(ctx, info.Headers, buf.Bytes(), m); err != nil {
		return fmt.Errorf("get object %s/%s: %w", bucket, name, err)
	}
	return nil
}

// Entry is one key of a bucket with its value and revision.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
}

// Entries returns the current entries of a bucket whose keys match filter (a subject-style pattern such as
// "lab.*"), sorted by key, in one pass over the bucket rather than one read per key.
func (b *Bus) Entries(ctx context.Context, bucket, filter string) ([]Entry, error) {
	kv, err := b.keyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	w, err := kv.Watch(actx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("entries of %s %s: %w", bucket, filter, err)
	}
	defer func() { _ = w.Stop() }()
	var out []Entry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("entries of %s %s: watch closed", bucket, filter)
			}
			if e == nil { // the initial values are all delivered
				slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
				return out, nil
			}
			out = append(out, Entry{Key: e.Key(), Value: e.Value(), Revision: e.Revision()})
		case <-actx.Done():
			return nil, fmt.Errorf("entries of %s %s: %w", bucket, filter, actx.Err())
		}
	}
}

// WatchKeys sends every current key of a bucket matching filter, then each key as it is written, deleted or
// expires, until ctx ends (the channel is then closed, also when the watch fails).
func (b *Bus) WatchKeys(ctx context.Context, bucket, filter string) (<-chan string, error) {
	kv, err := b.keyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", bucket, err)
	}
	w, err := kv.Watch(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("watch %s %s: %w", bucket, filter, err)
	}
	return forwardUpdates(ctx, w, 64, func(e jetstream.KeyValueEntry) string { return e.Key() }), nil
}

// forwardUpdates sends each update of w, converted by conv, on a channel of size n until ctx ends or the
// watch closes; the channel is then closed and the watch stopped. The initial values' end marker is
// skipped.
func forwardUpdates[T any](ctx context.Context, w jetstream.KeyWatcher, n int, conv func(jetstream.KeyValueEntry) T) <-chan T {
	out := make(chan T, n)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				select {
				case out <- conv(e):
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}
