package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
)

// TestRequestToAHandlerThatNeverAnswersTimesOut serves a subject with a handler that takes the request and
// never answers. The request ends with context.DeadlineExceeded once the 200 ms bound passes, whether the
// bound is the bus's RequestTimeout (a context without a deadline) or the caller's context deadline; it
// does not fall back to the 30 s default nor look like a missing server.
func TestRequestToAHandlerThatNeverAnswersTimesOut(t *testing.T) {
	t.Parallel()
	const bound = 200 * time.Millisecond
	cases := []struct {
		name string
		opts bus.Options
		ctx  func(parent context.Context) (context.Context, context.CancelFunc)
	}{
		{
			name: "request timeout of the bus",
			opts: bus.Options{RequestTimeout: bound},
			ctx:  context.WithCancel,
		},
		{
			name: "deadline of the context",
			opts: bus.Options{},
			ctx: func(parent context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(parent, bound)
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
			subject, err := bus.ObserveSubject("lab", "pve1")
			if err != nil {
				t.Fatal(err)
			}
			taken := make(chan string, 1)
			svc, err := env.bus.Serve(testContext(t), subject, bus.QueueExecutors, bus.ServeOptions{}, func(ctx context.Context, r *bus.Request) (proto.Message, error) {
				var req wrapperspb.StringValue
				if err := r.Decode(ctx, &req); err != nil {
					return nil, err
				}
				taken <- req.GetValue()
				<-ctx.Done() // never answers; the service's Stop ends the wait
				return nil, ctx.Err()
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(svc.Stop)

			client, err := env.server.Connect(c.opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close() })
			// No deadline from the test itself: the only bound is the one under test.
			ctx, cancel := c.ctx(context.Background())
			defer cancel()
			start := time.Now()
			var resp wrapperspb.StringValue
			err = client.Request(ctx, subject, wrapperspb.String("pve1"), &resp)
			waited := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("request: %v, want context.DeadlineExceeded", err)
			}
			if errors.Is(err, nats.ErrNoResponders) {
				t.Fatalf("request: %v, want a timeout, not a missing server", err)
			}
			select {
			case got := <-taken:
				if got != "pve1" {
					t.Fatalf("handler took %q, want pve1", got)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the request never reached the handler")
			}
			if waited < bound {
				t.Errorf("request gave up after %s, before its %s bound", waited, bound)
			}
			// Far below the 30 s default, with room for a loaded machine.
			if waited > 10*time.Second {
				t.Errorf("request gave up only after %s, want about %s", waited, bound)
			}
		})
	}
}
