package wire_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/event"
	repov1 "github.com/proxops/proxops/internal/gen/proxops/repo/v1"
	"github.com/proxops/proxops/internal/wire"
)

func TestSourceHealthRoundTrips(t *testing.T) {
	for _, h := range []event.SourceHealth{
		{Repo: "https://git.example/infra.git", Branch: "main", Stale: true, LastError: "fetch: repository not found",
			Commit: "abc", LastSuccess: time.Unix(1700000000, 0).UTC(), Failures: 3, At: time.Unix(1700000100, 5).UTC()},
		{Repo: "/srv/infra", Branch: "main", Commit: "def", LastSuccess: time.Unix(1700000200, 0).UTC(), At: time.Unix(1700000200, 0).UTC()},
		{Repo: "/srv/infra", Branch: "main", Stale: true, LastError: "never read", Failures: 1},
	} {
		m, err := wire.SourceHealthToProto(h)
		if err != nil {
			t.Fatal(err)
		}
		var back repov1.SourceHealth
		roundTrip(t, m, &back)
		got, err := wire.SourceHealthFromProto(&back)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(h, got); diff != "" {
			t.Errorf("SourceHealth (-sent +received):\n%s", diff)
		}
	}
	if _, err := wire.SourceHealthFromProto(&repov1.SourceHealth{Repo: "r", ConsecutiveFailures: -1}); err == nil ||
		!strings.Contains(err.Error(), "consecutive_failures") {
		t.Errorf("negative failure count: %v", err)
	}
}
