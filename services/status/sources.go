package status

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/wire"
)

// Sources reads the watchers' latest SourceHealth per repository and branch from the PROXOPS_REPO stream,
// sorted by repository and branch: what a client such as proxops status puts in render.StatusView.Sources.
func Sources(ctx context.Context, b *bus.Bus) ([]event.SourceHealth, error) {
	latest := map[[2]string]event.SourceHealth{}
	err := b.ReadStream(ctx, bus.StreamRepo, bus.SubjectRepoHealth, 0, func(m *bus.Message) error {
		h, err := wire.DecodeSourceHealth(ctx, m.Decode)
		if err != nil {
			return nil // unreadable: the service skips it too
		}
		latest[[2]string{h.Repo, h.Branch}] = h
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read repository health: %w", err)
	}
	return sortSources(latest), nil
}

// sortSources lists the latest SourceHealth of every repository and branch, sorted by both.
func sortSources(latest map[[2]string]event.SourceHealth) []event.SourceHealth {
	out := make([]event.SourceHealth, 0, len(latest))
	for _, h := range latest {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b event.SourceHealth) int {
		return cmp.Or(strings.Compare(a.Repo, b.Repo), strings.Compare(a.Branch, b.Branch))
	})
	return out
}
