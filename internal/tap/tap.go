// Package tap turns the messages ProxOps publishes into readable entries: what kind of event a message is,
// which cluster it concerns, a one-line text and the message as JSON. `proxops events` prints them; the
// notifier reads the same streams.
package tap

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/wire"
)

// Source is one stream the tap reads, with the subjects it follows there.
type Source struct {
	Stream string
	// Filters are the subjects read, for every cluster or for one.
	Filters []string
}

// Sources lists what the tap reads, in a fixed order: repository events, plan events, operation results,
// gap reports and status changes. With a cluster, the per-cluster streams are filtered to it (repository
// events are filtered after decoding, by the clusters they name).
func Sources(cluster string) ([]Source, error) {
	plans, results, gaps, status := bus.FilterPlans, bus.FilterResults, bus.FilterGaps, bus.FilterStatus
	confirms := bus.FilterConfirms
	if cluster != "" {
		var err error
		if plans, err = bus.PlanFilter(cluster); err != nil {
			return nil, err
		}
		results, _ = bus.ResultFilter(cluster)
		gaps, _ = bus.GapSubject(cluster)
		status, _ = bus.StatusSubject(cluster)
		confirms, _ = bus.ConfirmSubject(cluster)
	}
	return []Source{
		{Stream: bus.StreamRepo, Filters: []string{bus.SubjectRepoChanged, bus.SubjectRepoHealth, bus.SubjectReconcileRequest, bus.FilterWorktreeApply}},
		{Stream: bus.StreamPlans, Filters: []string{plans, confirms}},
		{Stream: bus.StreamResults, Filters: []string{results}},
		{Stream: bus.StreamGaps, Filters: []string{gaps}},
		{Stream: bus.StreamStatus, Filters: []string{status}},
	}, nil
}

// Entry is one message as the tap shows it.
type Entry struct {
	// Time is when the stream stored the message.
	Time      time.Time `json:"time"`
	Stream    string    `json:"stream"`
	Seq       uint64    `json:"seq"`
	Subject   string    `json:"subject"`
	Type      string    `json:"type"`
	ContentID string    `json:"content_id,omitempty"`
	Cluster   string    `json:"cluster,omitempty"`
	// Kind names the event: repo.changed, repo.health, reconcile.request, plan.planned, plan.rejected,
	// plan.held, plan.finished, plan.confirmed, result.<status>, gaps, status.
	Kind    string          `json:"kind"`
	Text    string          `json:"text"`
	Message json.RawMessage `json:"message"`
	// Progress: an operation's heartbeat while its PVE task runs (many, at wall-clock pace).
	Progress bool `json:"-"`
	// clusters a repository event names (empty: every cluster).
	clusters []string
}

// Concerns reports whether the entry concerns a cluster ("" concerns every entry).
func (e Entry) Concerns(cluster string) bool {
	if cluster == "" || e.Cluster == cluster {
		return true
	}
	if e.Cluster != "" {
		return false
	}
	if e.Kind == "repo.changed" || e.Kind == "reconcile.request" {
		if len(e.clusters) == 0 {
			return true
		}
		for _, c := range e.clusters {
			if c == cluster {
				return true
			}
		}
		return false
	}
	// Repository health concerns every cluster the repository declares.
	return true
}

// Read decodes a stream message into an entry.
func Read(ctx context.Context, stream string, m *bus.Message, stored time.Time) (Entry, error) {
	e := Entry{Time: stored.UTC(), Stream: stream, Seq: m.Sequence, Subject: m.Subject, Type: m.Type(), ContentID: m.ContentID()}
	pm, err := wire.NewMessage(e.Type)
	if err != nil {
		return e, fmt.Errorf("%s#%d: %w", stream, m.Sequence, err)
	}
	if err := m.Decode(ctx, pm); err != nil {
		return e, err
	}
	if e.Message, err = wire.MessageJSON(pm); err != nil {
		return e, err
	}
	if err := describe(ctx, &e, m); err != nil {
		return e, fmt.Errorf("%s#%d: %w", stream, m.Sequence, err)
	}
	return e, nil
}

// worktreeApplier is the operator user of a work-tree apply subject, or "" for any other subject.
func worktreeApplier(subject string) string {
	user, err := bus.WorktreeApplyUser(subject)
	if err != nil {
		return ""
	}
	return user
}

// describe sets the entry's kind, cluster and text from the message's domain value.
func describe(ctx context.Context, e *Entry, m *bus.Message) error {
	dec := m.Decode
	switch {
	case e.Subject == bus.SubjectRepoChanged:
		ev, err := wire.DecodeRepoChanged(ctx, dec)
		if err != nil {
			return err
		}
		e.Kind, e.clusters = "repo.changed", ev.Clusters
		scope := "every cluster"
		if len(ev.Clusters) > 0 {
			scope = strings.Join(ev.Clusters, ", ")
		}
		mode := ""
		if ev.DryRun {
			mode = " (dry run)"
		}
		switch {
		case ev.Rollback != nil:
			mode += fmt.Sprintf(" (rollback of %s to %s asked by %s)", ev.Rollback.Guest, snapshotOrNewest(ev.Rollback.Snapshot), cmp.Or(ev.RequestedBy, "nobody (a preview)"))
		case ev.RequestedBy != "":
			mode += fmt.Sprintf(" (work tree %s applied by %s)", ev.Tree, ev.RequestedBy)
		}
		e.Text = fmt.Sprintf("%s commit %s%s (%s) for %s%s", ev.Repo, short(ev.Commit), quoted(ev.Subject), ev.Trigger, scope, mode)
	case e.Subject == bus.SubjectRepoHealth:
		h, err := wire.DecodeSourceHealth(ctx, dec)
		if err != nil {
			return err
		}
		e.Kind = "repo.health"
		if h.Stale {
			e.Text = fmt.Sprintf("%s %s cannot be read (%d failures): %s; planning goes on with %s", h.Repo, h.Branch, h.Failures, h.LastError, short(h.Commit))
		} else {
			e.Text = fmt.Sprintf("%s %s readable again at %s", h.Repo, h.Branch, short(h.Commit))
		}
	case e.Subject == bus.SubjectReconcileRequest:
		r, err := wire.DecodeReconcileRequest(ctx, dec)
		if err != nil {
			return err
		}
		e.Kind, e.clusters = "reconcile.request", r.Clusters
		scope := "every cluster"
		if len(r.Clusters) > 0 {
			scope = strings.Join(r.Clusters, ", ")
		}
		e.Text = fmt.Sprintf("reconcile %s requested by %s", scope, r.RequestedBy)
		if r.Rollback != nil {
			e.Text = fmt.Sprintf("preview of a rollback of %s/%s to %s requested by %s", scope, r.Rollback.Guest, snapshotOrNewest(r.Rollback.Snapshot), r.RequestedBy)
		}
	case worktreeApplier(e.Subject) != "":
		r, err := wire.DecodeReconcileRequest(ctx, dec)
		if err != nil {
			return err
		}
		user := worktreeApplier(e.Subject)
		e.Kind, e.clusters = "apply.worktree", r.Clusters
		scope := "every cluster"
		if len(r.Clusters) > 0 {
			scope = strings.Join(r.Clusters, ", ")
		}
		e.Text = fmt.Sprintf("work tree %s for %s: apply requested by operator %s", r.Tree, scope, user)
		if r.Rollback != nil {
			e.Kind = "apply.rollback"
			e.Text = fmt.Sprintf("rollback of %s/%s to %s requested by operator %s", scope, r.Rollback.Guest, snapshotOrNewest(r.Rollback.Snapshot), user)
		}
	case strings.HasPrefix(e.Type, "proxops.plan.v1.") && e.Stream == bus.StreamPlans:
		return describePlanEvent(ctx, e, dec)
	case e.Stream == bus.StreamResults:
		r, err := wire.DecodeResult(ctx, dec)
		if err != nil {
			return err
		}
		e.Kind, e.Cluster, e.Progress = "result."+string(r.Status), r.Cluster, r.Status == "progress"
		e.Text = fmt.Sprintf("%s %s on %s: %s", r.Ref, r.Action, r.Node, r.Status)
		if r.AlreadyDone {
			e.Text += " (already done)"
		}
		if r.Message != "" {
			e.Text += ": " + r.Message
		}
	case e.Stream == bus.StreamGaps:
		g, err := wire.DecodeGapReport(ctx, dec)
		if err != nil {
			return err
		}
		e.Kind, e.Cluster = "gaps", g.Cluster
		guests := map[int]bool{}
		for _, gap := range g.Gaps {
			guests[gap.VMID] = true
		}
		e.Text = fmt.Sprintf("%d unmodelled live keys on %d guests", len(g.Gaps), len(guests))
	case e.Stream == bus.StreamStatus:
		s, err := wire.DecodeClusterStatus(ctx, dec)
		if err != nil {
			return err
		}
		e.Kind, e.Cluster = "status", s.Cluster
		e.Text = string(s.Phase)
		if s.Reason != "" {
			e.Text += ": " + s.Reason
		}
		if s.LastCommitApplied != "" {
			e.Text += "; applied " + short(s.LastCommitApplied)
		}
	default:
		e.Kind = e.Type
		e.Text = e.Type
	}
	return nil
}

func describePlanEvent(ctx context.Context, e *Entry, dec wire.DecodeFunc) error {
	switch e.Type {
	case "proxops.plan.v1.Plan":
		p, err := wire.DecodePlanned(ctx, dec)
		if err != nil {
			return err
		}
		e.Kind, e.Cluster = "plan.planned", p.Cluster
		e.Text = fmt.Sprintf("plan %s of commit %s: %d operations, %d findings%s", short(p.PlanID), short(p.Commit),
			len(p.Plan.Operations), len(p.Plan.Findings), mode(p.DryRun, p.Suspended))
	case "proxops.plan.v1.PlanRejected":
		r, err := wire.DecodeRejected(ctx, dec)
		if err != nil {
			return err
		}
		e.Kind, e.Cluster = "plan.rejected", r.Cluster
		e.Text = fmt.Sprintf("commit %s rejected (%s)", short(r.Commit), r.Rejection.Reason)
		for _, d := range r.Rejection.Diagnostics {
			e.Text += "; " + d.String()
		}
	case "proxops.plan.v1.PlanHeld":
		h, err := wire.DecodeHeld(ctx, dec)
		if err != nil {
			return err
		}
		e.Kind, e.Cluster = "plan.held", h.Cluster
		e.Text = fmt.Sprintf("plan %s of commit %s held: %s (%s); confirm with proxops confirm", short(h.PlanID), short(h.Commit), h.Reason, strings.Join(h.Prunes, ", "))
	case "proxops.plan.v1.PlanFinished":
		f, err := wire.DecodeFinished(ctx, dec)
		if err != nil {
			return err
		}
		e.Kind, e.Cluster = "plan.finished", f.Cluster
		e.Text = fmt.Sprintf("run of plan %s, commit %s: %s (%d succeeded, %d failed, %d skipped, %d superseded)", short(f.PlanID),
			short(f.Commit), f.Outcome, f.Succeeded, f.Failed, f.Skipped, f.Superseded)
	case "proxops.plan.v1.PlanConfirmation":
		c, err := wire.DecodeConfirmation(ctx, dec)
		if err != nil {
			return err
		}
		e.Kind, e.Cluster = "plan.confirmed", c.Cluster
		e.Text = fmt.Sprintf("plan %s confirmed by %s", short(c.PlanID), c.ConfirmedBy)
	default:
		e.Kind = e.Type
		e.Text = e.Type
	}
	return nil
}

func mode(dry, suspended bool) string {
	switch {
	case suspended:
		return " (cluster suspended: nothing applied)"
	case dry:
		return " (dry run)"
	}
	return ""
}

// short abbreviates a commit or id for text; an empty one reads "(none)".
func short(id string) string {
	if id == "" {
		return "(none)"
	}
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func quoted(subject string) string {
	if subject == "" {
		return ""
	}
	return fmt.Sprintf(" %q", subject)
}

// snapshotOrNewest names a rollback's snapshot, or says it is the newest of ProxOps' own.
func snapshotOrNewest(name string) string {
	if name == "" {
		return "the newest ProxOps snapshot"
	}
	return name
}
