package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Follow calls fn with every message of a stream that matches one of filters, from sequence from (0 or 1:
// the beginning) on, in stream order and as they are stored, with the time the stream stored each. It runs
// until ctx is cancelled (then it returns nil) or fn returns an error (which it returns). It reads through
// an ordered ephemeral consumer that the client recreates after a gap, so it needs nothing but read access
// to the stream and leaves no state on the server; a caller that restarts it passes the next sequence it
// wants. The status service follows the plan, result, repository and gap streams this way.
func (b *Bus) Follow(ctx context.Context, stream string, filters []string, from uint64, fn func(m *Message, stored time.Time) error) error {
	if len(filters) == 0 {
		return fmt.Errorf("follow %s: no subject filter", stream)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Minute}
	if from > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from
	}
	actx, cancel := b.api(ctx)
	cons, err := b.js.OrderedConsumer(actx, stream, cfg)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("follow %s: %w", stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("follow %s: %w", stream, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		msg, err := it.Next()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return fmt.Errorf("follow %s: stopped: %w", stream, err)
			}
			return fmt.Errorf("follow %s: %w", stream, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("follow %s: %w", stream, err)
		}
		m := &Message{Subject: msg.Subject(), Sequence: meta.Sequence.Stream, Header: msg.Headers(), Data: msg.Data(), bus: b}
		if err := fn(m, meta.Timestamp); err != nil {
			return err
		}
	}
}
