package bus_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/testkit"
)

// A handler that never acknowledges (a replica that hangs or dies on every delivery) lets the deliveries
// run out through the ack wait alone; the server's advisory names the message, which is then read,
// dead-lettered and removed from the work queue.
func TestMaxDeliveriesAdvisoryNamesAMessageNoHandlerSettled(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subject, durable := opConsumer(t, env.bus, bus.ConsumerConfig{AckWait: 300 * time.Millisecond, MaxDeliver: 2})
	dlq, _ := bus.DLQSubject("lab", "pve1")
	advisories := make(chan bus.MaxDeliveries, 4)
	w, err := env.bus.OnMaxDeliveries(ctx, bus.StreamOps, durable, "watchers", func(ctx context.Context, adv bus.MaxDeliveries) {
		m, err := env.bus.StreamMessage(ctx, adv.Stream, adv.StreamSeq)
		if err != nil {
			t.Errorf("read the exhausted message: %v", err)
			return
		}
		if err := m.DeadLetter(ctx, dlq, "no delivery was settled"); err != nil {
			t.Errorf("dead-letter: %v", err)
		}
		advisories <- adv
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	hang := make(chan struct{})
	var deliveries atomic.Int32
	consumeInto(t, env.bus, bus.StreamOps, durable, bus.ConsumeOptions{Concurrency: 4, MaxWait: 200 * time.Millisecond},
		func(ctx context.Context, d *bus.Delivery) error {
			deliveries.Add(1)
			select {
			case <-hang:
			case <-ctx.Done():
			}
			return ctx.Err()
		})
	t.Cleanup(func() { close(hang) })
	ack, err := env.bus.Publish(ctx, subject, wrapperspb.String("never acknowledged"), bus.WithMsgID("run1.op1"))
	if err != nil {
		t.Fatal(err)
	}
	var adv bus.MaxDeliveries
	select {
	case adv = <-advisories:
	case <-ctx.Done():
		t.Fatal("no max-deliveries advisory")
	}
	if adv.Stream != bus.StreamOps || adv.Consumer != durable || adv.StreamSeq != ack.Sequence || adv.Deliveries != 2 {
		t.Fatalf("advisory %+v, want %s/%s #%d after 2 deliveries", adv, bus.StreamOps, durable, ack.Sequence)
	}
	if n := deliveries.Load(); n != 2 {
		t.Fatalf("%d deliveries, want MaxDeliver = 2", n)
	}
	testkit.Eventually(t, 5*time.Second, "the message to move to the DLQ", func() bool {
		return streamMsgs(t, env.bus, bus.StreamOps) == 0 && streamMsgs(t, env.bus, bus.StreamDLQ) == 1
	})
	m, err := env.bus.LastMessage(ctx, bus.StreamDLQ, dlq)
	if err != nil {
		t.Fatal(err)
	}
	var v wrapperspb.StringValue
	if err := m.Decode(ctx, &v); err != nil || v.GetValue() != "never acknowledged" {
		t.Fatalf("dead letter = %q, %v", v.GetValue(), err)
	}
	if r := m.Header.Get(bus.HeaderDeadLetterReason); r != "no delivery was settled" {
		t.Fatalf("reason header = %q", r)
	}
	// Gone from the work queue: nothing more to read there.
	if _, err := env.bus.StreamMessage(ctx, bus.StreamOps, ack.Sequence); err == nil {
		t.Fatal("the dead-lettered message is still on the work queue")
	}
}
