// Package clock holds the waiting that retry loops share: a sleep that a context cuts short.
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
