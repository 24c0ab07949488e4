package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxDeliveries is the server's advisory that a message ran out of deliveries on a durable consumer: its
// last delivery was neither acknowledged nor terminated (the ack wait expired, or it was handed back) and
// MaxDeliver allows no other. The consumer then never delivers it again.
type MaxDeliveries struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// Watcher is a running advisory subscription; Stop ends it and waits for the callbacks in flight.
type Watcher struct {
	sub    *nats.Subscription
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Stop unsubscribes and waits for the callbacks in flight.
func (w *Watcher) Stop() {
	w.cancel()
	_ = w.sub.Unsubscribe()
	w.wg.Wait()
}

// OnMaxDeliveries calls fn (each call in its own goroutine) for every max-deliveries advisory of a durable
// consumer, until ctx ends or Stop. Subscribers in the same queue group share the advisories: one of them
// gets each. Advisories are not stored: one announced while no subscriber runs is lost.
func (b *Bus) OnMaxDeliveries(ctx context.Context, stream, durable, queue string, fn func(context.Context, MaxDeliveries)) (*Watcher, error) {
	subject, err := MaxDeliveriesAdvisorySubject(stream, durable)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &Watcher{cancel: cancel}
	w.sub, err = b.nc.QueueSubscribe(subject, queue, func(msg *nats.Msg) {
		var adv MaxDeliveries
		if err := json.Unmarshal(msg.Data, &adv); err != nil || adv.StreamSeq == 0 {
			b.log.Warn("unreadable max-deliveries advisory", "subject", msg.Subject, "err", err)
			return
		}
		if wctx.Err() != nil {
			return
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			fn(wctx, adv)
		}()
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch %s: %w", subject, err)
	}
	if err := b.nc.FlushTimeout(b.opts.APITimeout); err != nil {
		cancel()
		_ = w.sub.Unsubscribe()
		return nil, fmt.Errorf("watch %s: %w", subject, err)
	}
	go func() {
		<-wctx.Done()
		_ = w.sub.Unsubscribe()
	}()
	return w, nil
}

// StreamMessage returns the message stored at seq in a stream, or ErrNotFound when there is none (it was
// acknowledged off a work queue, or removed).
func (b *Bus) StreamMessage(ctx context.Context, stream string, seq uint64) (*Message, error) {
	actx, cancel := b.api(ctx)
	defer cancel()
	s, err := b.js.Stream(actx, stream)
	if err != nil {
		return nil, fmt.Errorf("message %s#%d: %w", stream, seq, err)
	}
	raw, err := s.GetMsg(actx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("message %s#%d: %w", stream, seq, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("message %s#%d: %w", stream, seq, err)
	}
	return &Message{Subject: raw.Subject, Sequence: raw.Sequence, Header: raw.Header, Data: raw.Data, bus: b, stream: stream}, nil
}

// DeadLetter copies a message read with StreamMessage, headers and body unchanged, to a dead-letter subject
// (see DLQSubject) with the reason and origin in headers, exactly as Delivery.DeadLetter does (the same
// message id, so a message dead-lettered both ways is stored once), then removes it from its stream.
func (m *Message) DeadLetter(ctx context.Context, subject, reason string) error {
	if m.stream == "" {
		return fmt.Errorf("dead-letter %s#%d: not read from a stream", m.Subject, m.Sequence)
	}
	if err := m.bus.deadLetter(ctx, m.stream, m.Sequence, m.Header, m.Data, subject, reason, ""); err != nil {
		return err
	}
	return m.Remove(ctx)
}

// Remove deletes a message read with StreamMessage from its stream; one already gone is no error.
func (m *Message) Remove(ctx context.Context) error {
	if m.stream == "" {
		return fmt.Errorf("remove %s#%d: not read from a stream", m.Subject, m.Sequence)
	}
	actx, cancel := m.bus.api(ctx)
	defer cancel()
	s, err := m.bus.js.Stream(actx, m.stream)
	if err == nil {
		err = s.DeleteMsg(actx, m.Sequence)
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("remove %s#%d from %s: %w", m.Subject, m.Sequence, m.stream, err)
	}
	return nil
}
