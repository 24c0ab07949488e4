// Package clock holds the waiting that retry and watch loops share: a sleep that a context cuts short, and a
// tick until a context ends.
package clock

import (
	"context"
	"time"
)

// Sleep waits d unless ctx ends first, and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Every calls fn every d, the first time d from now, until ctx ends.
func Every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
