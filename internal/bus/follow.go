package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// followStallCheck is how often a follower that has received nothing checks whether its stream moved on.
const followStallCheck = 5 * time.Second

// errFollowStalled: the follower received nothing while the stream stored matching messages.
var errFollowStalled = errors.New("follower stalled")

// Follow calls fn with every message of a stream that matches one of filters, from sequence from (0 or 1:
// the beginning) on, in stream order and as they are stored, with the time the stream stored each. It runs
// until ctx is cancelled (then it returns nil) or fn returns an error (which it returns). It reads through
// an ordered ephemeral consumer that the client recreates after a gap, so it needs nothing but read access
// to the stream and leaves no state on the server; a caller that restarts it passes the next sequence it
// wants. The status service follows the plan, result, repository and gap streams this way.
//
// A follower can fall silent for good when the NATS server holding its consumer goes away at the wrong
// moment: the client library neither delivers nor reports an error. Follow therefore watches itself: when
// nothing arrived for two checks in a row (five seconds apart) while the stream holds a matching
// message past the last one delivered, it drops the consumer and follows again from the next sequence.
// Nothing is skipped or delivered twice.
func (b *Bus) Follow(ctx context.Context, stream string, filters []string, from uint64, fn func(m *Message, stored time.Time) error) error {
	if len(filters) == 0 {
		return fmt.Errorf("follow %s: no subject filter", stream)
	}
	for {
		next, err := b.followOnce(ctx, stream, filters, from, fn)
		if !errors.Is(err, errFollowStalled) {
			return err
		}
		b.log.Warn("follower fell silent while the stream moved on; following again", "stream", stream,
			"filters", filters, "from_seq", next)
		from = next
	}
}

// followOnce follows through one ordered consumer. It returns the next sequence it would deliver.
func (b *Bus) followOnce(ctx context.Context, stream string, filters []string, from uint64, fn func(m *Message, stored time.Time) error) (uint64, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Minute}
	if from > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from
	}
	next := max(from, 1)
	actx, cancel := b.api(ctx)
	cons, err := b.js.OrderedConsumer(actx, stream, cfg)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return next, nil
		}
		return next, fmt.Errorf("follow %s: %w", stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		if ctx.Err() != nil {
			return next, nil
		}
		return next, fmt.Errorf("follow %s: %w", stream, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	w := &followWatch{next: next}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go w.run(wctx, b, stream, filters, it.Stop)
	for {
		msg, err := it.Next()
		if ctx.Err() != nil {
			return w.nextSeq(), nil
		}
		if w.isStalled() {
			return w.nextSeq(), errFollowStalled
		}
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return w.nextSeq(), fmt.Errorf("follow %s: stopped: %w", stream, err)
			}
			return w.nextSeq(), fmt.Errorf("follow %s: %w", stream, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return w.nextSeq(), fmt.Errorf("follow %s: %w", stream, err)
		}
		m := &Message{Subject: msg.Subject(), Sequence: meta.Sequence.Stream, Header: msg.Headers(), Data: msg.Data(), bus: b}
		if err := fn(m, meta.Timestamp); err != nil {
			return w.nextSeq(), err
		}
		w.delivered(meta.Sequence.Stream)
	}
}

// followWatch notices a follower that receives nothing while its stream stores matching messages.
type followWatch struct {
	mu      sync.Mutex
	next    uint64
	stalled bool
}

func (w *followWatch) delivered(seq uint64) {
	w.mu.Lock()
	w.next = seq + 1
	w.mu.Unlock()
}

func (w *followWatch) nextSeq() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next
}

func (w *followWatch) isStalled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stalled
}

// run checks every followStallCheck; two checks in a row that find the stream ahead of a follower that has
// not moved stop the follower's iterator.
func (w *followWatch) run(ctx context.Context, b *Bus, stream string, filters []string, stop func()) {
	t := time.NewTicker(b.followStallCheck)
	defer t.Stop()
	var behindAt uint64 // the follower's next sequence when the stream was last found ahead of it; 0: not
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := w.nextSeq()
		ahead := false
		for _, f := range filters {
			if last, err := b.LastSequence(ctx, stream, f); err == nil && last >= next {
				ahead = true
				break
			}
		}
		switch {
		case !ahead:
			behindAt = 0
		case behindAt == next:
			w.mu.Lock()
			w.stalled = true
			w.mu.Unlock()
			stop()
			return
		default:
			behindAt = next
		}
	}
}
