package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

// The guest guard makes "one operation at a time per guest" hold across the replicas of a node (inside one
// replica a mutex does it). It is a key of proxops_ops, guard.<cluster>.<node>.<vmid> (bus.GuardKey: the node's
// executors may write no other guards), holding an OperationRecord that names the operation and the replica.
// It is taken by creating the key, renewed by a compare-and-set on its revision every TTL/3 while the
// operation runs, and released by deleting it at the revision last written. A guard not renewed for a TTL
// is expired: another replica takes it over with a compare-and-set, so a replica killed mid-operation holds
// the guest for at most one TTL. Expiry compares the key's server timestamp with the local clock, so the
// hosts' clocks must agree to well within the TTL (NTP).

// guestGuard is a held guard.
type guestGuard struct {
	kv    jetstream.KeyValue
	key   string
	value []byte
	ttl   time.Duration

	mu   sync.Mutex
	rev  uint64
	lost chan struct{} // closed when the guard was taken by someone else

	stop context.CancelFunc
	done chan struct{}
}

// guardHolder describes who holds a guard another operation wants.
type guardHolder struct {
	rec wire.OperationRecord
	age time.Duration
}

func (h guardHolder) String() string {
	return fmt.Sprintf("%s %s.%s on replica %s", h.rec.Action, h.rec.RunID, h.rec.OpID, h.rec.Executor)
}

// errGuestBusy is returned when another operation holds a guest's guard.
type errGuestBusy struct {
	vmid   int
	holder guardHolder
}

func (e *errGuestBusy) Error() string {
	return fmt.Sprintf("guest %d is busy with %s", e.vmid, e.holder)
}

// tryGuard tries once to take the guard of op's guest for this replica. It returns the held guard, or the
// holder when another operation holds it.
func (e *executor) tryGuard(ctx context.Context, op plan.Operation) (*guestGuard, *guardHolder, error) {
	m, err := wire.OperationRecordToProto(wire.OperationRecord{RunID: op.RunID, OpID: op.ID, Cluster: op.Cluster,
		Node: op.Node, VMID: op.VMID, Action: op.Action, Executor: e.cfg.Replica, Message: "guest guard"})
	if err != nil {
		return nil, nil, err
	}
	value, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, nil, fmt.Errorf("guest guard: %w", err)
	}
	key, err := bus.GuardKey(op.Cluster, op.Node, op.VMID)
	if err != nil {
		return nil, nil, err
	}
	g := &guestGuard{kv: e.ops, key: key, value: value, ttl: e.cfg.GuardTTL, lost: make(chan struct{})}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for range 3 {
		rev, err := e.ops.Create(actx, key, value)
		if err == nil {
			g.rev = rev
			return g, nil, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !wrongLastSequence(err) {
			return nil, nil, fmt.Errorf("take guest guard %s: %w", key, err)
		}
		entry, err := e.ops.Get(actx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read guest guard %s: %w", key, err)
		}
		holder := guardHolder{age: time.Since(entry.Created())}
		hm := wire.NewOperationRecord()
		if err := proto.Unmarshal(entry.Value(), hm); err == nil {
			holder.rec, _ = wire.OperationRecordFromProto(hm)
		}
		// An expired guard, or one this replica left behind (a release that did not reach the server), is
		// taken over; replica names are unique among running replicas.
		if holder.age <= e.cfg.GuardTTL && holder.rec.Executor != e.cfg.Replica {
			return nil, &holder, nil
		}
		rev, err = e.ops.Update(actx, key, value, entry.Revision())
		if err == nil {
			g.rev = rev
			return g, nil, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !wrongLastSequence(err) {
			return nil, nil, fmt.Errorf("take over guest guard %s: %w", key, err)
		}
	}
	return nil, nil, fmt.Errorf("take guest guard %s: it keeps changing", key)
}

// keep renews the guard every TTL/3 until release; when renewal finds that someone else wrote the key, or
// renewals fail for a whole TTL, the guard is lost (lost is closed) and onLost is called.
func (g *guestGuard) keep(ctx context.Context, onLost func()) {
	ctx, g.stop = context.WithCancel(ctx)
	g.done = make(chan struct{})
	go func() {
		defer close(g.done)
		t := time.NewTicker(max(g.ttl/3, 10*time.Millisecond))
		defer t.Stop()
		renewed := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			actx, cancel := context.WithTimeout(ctx, max(g.ttl/3, time.Second))
			g.mu.Lock()
			rev, err := g.kv.Update(actx, g.key, g.value, g.rev)
			if err == nil {
				g.rev = rev
			}
			g.mu.Unlock()
			cancel()
			switch {
			case err == nil:
				renewed = time.Now()
				continue
			case ctx.Err() != nil:
				return
			case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || wrongLastSequence(err) ||
				errors.Is(err, jetstream.ErrKeyNotFound) || time.Since(renewed) > g.ttl:
				close(g.lost)
				onLost()
				return
			}
		}
	}()
}

// release stops renewing and deletes the guard if it is still this holder's.
func (g *guestGuard) release() {
	if g.stop != nil {
		g.stop()
		<-g.done
	}
	select {
	case <-g.lost:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g.mu.Lock()
	defer g.mu.Unlock()
	_ = g.kv.Delete(ctx, g.key, jetstream.LastRevision(g.rev))
}

// wrongLastSequence recognises the server's compare-and-set refusal in the forms the client may surface.
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return true
	}
	return strings.Contains(err.Error(), "wrong last sequence")
}
