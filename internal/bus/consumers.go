package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ConsumerState is a durable consumer's backlog as the server reports it.
type ConsumerState struct {
	Stream   string
	Consumer string
	// Pending: messages matching the consumer's filter not yet delivered.
	Pending uint64
	// AckPending: messages delivered and not yet acknowledged.
	AckPending int
	// Waiting: pull requests waiting for messages (a live pulling client keeps one open).
	Waiting int
	// Redelivered: messages delivered more than once and not yet acknowledged.
	Redelivered int
	// Delivered is the stream sequence of the last message delivered; AckFloor the one below which every
	// message is acknowledged.
	Delivered uint64
	AckFloor  uint64
	// LastDelivered is when the last message was delivered (zero: never).
	LastDelivered time.Time
}

// DurableConsumers returns the state of every durable consumer of the given streams, sorted by stream and
// consumer. A stream that does not exist has none.
func (b *Bus) DurableConsumers(ctx context.Context, streams ...string) ([]ConsumerState, error) {
	var out []ConsumerState
	for _, name := range streams {
		actx, cancel := b.api(ctx)
		s, err := b.js.Stream(actx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			cancel()
			continue
		}
		if err != nil {
			cancel()
			return nil, fmt.Errorf("consumers of %s: %w", name, err)
		}
		l := s.ListConsumers(actx)
		for ci := range l.Info() {
			if ci.Config.Durable == "" {
				continue
			}
			st := ConsumerState{Stream: name, Consumer: ci.Name, Pending: ci.NumPending, AckPending: ci.NumAckPending,
				Waiting: ci.NumWaiting, Redelivered: ci.NumRedelivered, Delivered: ci.Delivered.Stream, AckFloor: ci.AckFloor.Stream}
			if ci.Delivered.Last != nil {
				st.LastDelivered = *ci.Delivered.Last
			}
			out = append(out, st)
		}
		err = l.Err()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("consumers of %s: %w", name, err)
		}
	}
	slices.SortFunc(out, func(a, b ConsumerState) int {
		return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Consumer, b.Consumer))
	})
	return out, nil
}

// QueueStreams are the streams whose durable consumers carry ProxOps' work: what queue metrics watch.
var QueueStreams = []string{StreamRepo, StreamPlans, StreamOps, StreamResults, StreamInventory}
