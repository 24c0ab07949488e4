package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
)

func TestFollowDeliversStoredAndNewMessagesInOrderFromASequence(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	planned, _ := bus.PlanSubject("lab", bus.PlanPlanned)
	confirm, _ := bus.ConfirmSubject("lab")
	publish := func(subject, v string) uint64 {
		ack, err := env.bus.Publish(ctx, subject, wrapperspb.String(v))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	publish(planned, "p0")
	second := publish(planned, "p1")
	publish(confirm, "c2")

	var mu sync.Mutex
	var got []string
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- env.bus.Follow(fctx, bus.StreamPlans, []string{bus.FilterPlans, bus.FilterConfirms}, second,
			func(m *bus.Message, stored time.Time) error {
				var v wrapperspb.StringValue
				if err := m.Decode(ctx, &v); err != nil {
					return err
				}
				if time.Since(stored) > time.Minute || stored.IsZero() {
					return fmt.Errorf("stored at %v", stored)
				}
				mu.Lock()
				got = append(got, fmt.Sprintf("%d:%s", m.Sequence, v.GetValue()))
				mu.Unlock()
				return nil
			})
	}()
	publish(planned, "p3")
	want := []string{"2:p1", "3:c2", "4:p3"}
	eventually(t, 10*time.Second, "followed messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= len(want)
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Follow after cancel: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("followed (-want +got):\n%s", diff)
	}
}

func TestFollowReturnsTheHandlersError(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	gap, _ := bus.GapSubject("lab")
	if _, err := env.bus.Publish(ctx, gap, wrapperspb.String("x")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := env.bus.Follow(ctx, bus.StreamGaps, []string{bus.FilterGaps}, 0, func(*bus.Message, time.Time) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if err := env.bus.Follow(ctx, bus.StreamGaps, nil, 0, nil); err == nil {
		t.Error("Follow without a filter succeeded")
	}
}
