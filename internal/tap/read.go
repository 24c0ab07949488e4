package tap

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/proxops/proxops/internal/bus"
)

var errCaughtUp = errors.New("caught up")

// History reads every message the sources hold now and returns their entries in the order they were stored
// (stream order within a stream), with, per stream, the next sequence to follow from. A message that cannot
// be decoded is an entry of kind "undecodable" whose text says why, not an error.
func History(ctx context.Context, b *bus.Bus, sources []Source) ([]Entry, map[string]uint64, error) {
	var entries []Entry
	next := map[string]uint64{}
	for _, src := range sources {
		var last uint64
		for _, f := range src.Filters {
			seq, err := b.LastSequence(ctx, src.Stream, f)
			if err != nil {
				return nil, nil, err
			}
			last = max(last, seq)
		}
		next[src.Stream] = last + 1
		if last == 0 {
			continue
		}
		err := b.Follow(ctx, src.Stream, src.Filters, 1, func(m *bus.Message, stored time.Time) error {
			entries = append(entries, readOrExplain(ctx, src.Stream, m, stored))
			if m.Sequence >= last {
				next[src.Stream] = m.Sequence + 1
				return errCaughtUp
			}
			return nil
		})
		if err != nil && !errors.Is(err, errCaughtUp) {
			return nil, nil, err
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
	}
	order := map[string]int{}
	for i, src := range sources {
		order[src.Stream] = i
	}
	slices.SortStableFunc(entries, func(a, b Entry) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		if c := cmp.Compare(order[a.Stream], order[b.Stream]); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	return entries, next, nil
}

// Follow calls fn with every entry the sources store from the given next sequences on (History's), as they
// are stored, until ctx is cancelled (it returns nil then) or fn or a stream fails. Calls of fn never
// overlap.
func Follow(ctx context.Context, b *bus.Bus, sources []Source, next map[string]uint64, fn func(Entry) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, src := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := b.Follow(ctx, src.Stream, src.Filters, next[src.Stream], func(m *bus.Message, stored time.Time) error {
				e := readOrExplain(ctx, src.Stream, m, stored)
				mu.Lock()
				defer mu.Unlock()
				return fn(e)
			})
			if err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func readOrExplain(ctx context.Context, stream string, m *bus.Message, stored time.Time) Entry {
	e, err := Read(ctx, stream, m, stored)
	if err != nil {
		e.Kind, e.Text = "undecodable", err.Error()
		if e.Message == nil {
			e.Message = []byte("null")
		}
	}
	return e
}
