package wire

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/event"
	repov1 "github.com/proxops/proxops/internal/gen/proxops/repo/v1"
)

// SourceHealthToProto converts a SourceHealth into a proxops.repo.v1.SourceHealth.
func SourceHealthToProto(h event.SourceHealth) (proto.Message, error) {
	failures, err := int32Of("consecutive_failures", h.Failures)
	if err != nil {
		return nil, fmt.Errorf("source health %s: %w", h.Repo, err)
	}
	return &repov1.SourceHealth{Repo: h.Repo, Branch: h.Branch, Stale: h.Stale, LastError: h.LastError, Commit: h.Commit,
		LastSuccess: timeToProto(h.LastSuccess), ConsecutiveFailures: failures, At: timeToProto(h.At)}, nil
}

// SourceHealthFromProto converts a proxops.repo.v1.SourceHealth.
func SourceHealthFromProto(m proto.Message) (event.SourceHealth, error) {
	p, err := as[*repov1.SourceHealth](m)
	if err != nil {
		return event.SourceHealth{}, fmt.Errorf("source health: %w", err)
	}
	last, err := timeFromProto(p.GetLastSuccess())
	if err != nil {
		return event.SourceHealth{}, fmt.Errorf("source health %s: last_success: %w", p.GetRepo(), err)
	}
	at, err := timeFromProto(p.GetAt())
	if err != nil {
		return event.SourceHealth{}, fmt.Errorf("source health %s: at: %w", p.GetRepo(), err)
	}
	if p.GetConsecutiveFailures() < 0 {
		return event.SourceHealth{}, fmt.Errorf("source health %s: consecutive_failures: %d is negative", p.GetRepo(), p.GetConsecutiveFailures())
	}
	return event.SourceHealth{Repo: p.GetRepo(), Branch: p.GetBranch(), Stale: p.GetStale(), LastError: p.GetLastError(),
		Commit: p.GetCommit(), LastSuccess: last, Failures: int(p.GetConsecutiveFailures()), At: at}, nil
}

// DecodeSourceHealth decodes a received proxops.repo.v1.SourceHealth.
func DecodeSourceHealth(ctx context.Context, decode DecodeFunc) (event.SourceHealth, error) {
	return decodeAs(ctx, decode, &repov1.SourceHealth{}, func(p *repov1.SourceHealth) (event.SourceHealth, error) {
		return SourceHealthFromProto(p)
	})
}
