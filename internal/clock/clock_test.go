package clock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/clock"
)

func TestSleepWaitsTheWholeDurationWhileTheContextLasts(t *testing.T) {
	start := time.Now()
	if err := clock.Sleep(context.Background(), 20*time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Errorf("Sleep returned after %s, want at least 20ms", waited)
	}
}

func TestSleepEndsWithTheContextAndReturnsItsError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := clock.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled context = %v, want context.Canceled", err)
	}
}

func TestEveryCallsAgainUntilTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int32
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		clock.Every(ctx, time.Millisecond, func() {
			if calls.Add(1) == 3 {
				cancel()
			}
		})
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	if n := calls.Load(); n < 3 {
		t.Errorf("Every returned after %d calls, want it to go on until its context ended at the third", n)
	}
}
