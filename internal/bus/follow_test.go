package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/testkit"
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
	testkit.Eventually(t, 10*time.Second, "followed messages", func() bool {
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

// A follower that receives nothing while its stream stores matching messages is restarted from the next
// sequence: here its handler sits on the first message for several checks while more are stored. Every
// message is delivered once, in order, and the restart is logged.
func TestFollowThatFallsSilentIsRestartedWithoutSkippingOrRepeating(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	var logs lockedLog
	fb, err := env.server.Connect(bus.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fb.Close() })
	bus.SetFollowStallCheck(fb, 50*time.Millisecond)
	result, _ := bus.ResultSubject("lab", "pve1")
	publish := func(v string) {
		if _, err := env.bus.Publish(ctx, result, wrapperspb.String(v)); err != nil {
			t.Fatal(err)
		}
	}
	publish("m1")
	release := make(chan struct{})
	var mu sync.Mutex
	var got []uint64
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- fb.Follow(fctx, bus.StreamResults, []string{bus.FilterResults}, 0, func(m *bus.Message, _ time.Time) error {
			if m.Sequence == 1 {
				<-release
			}
			mu.Lock()
			got = append(got, m.Sequence)
			mu.Unlock()
			return nil
		})
	}()
	publish("m2")
	publish("m3")
	time.Sleep(300 * time.Millisecond) // six checks while the handler holds message 1
	close(release)
	publish("m4")
	testkit.Eventually(t, 10*time.Second, "four messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 4
	})
	publish("m5")
	testkit.Eventually(t, 10*time.Second, "the fifth message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 5
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Follow after cancel: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]uint64{1, 2, 3, 4, 5}, got); diff != "" {
		t.Fatalf("delivered sequences (-want +got):\n%s", diff)
	}
	if !strings.Contains(logs.String(), "follower fell silent") {
		t.Fatalf("no restart logged:\n%s", logs.String())
	}
}

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
