package clock_test

import (
	"context"
	"errors"
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
