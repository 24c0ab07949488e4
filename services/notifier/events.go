package notifier

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/wire"
)

// Notification is one thing to tell people, with everything a provider needs to say it.
type Notification struct {
	// ID is the stable delivery id: the same event gives the same id on every delivery and redelivery, so a
	// receiver can drop duplicates. It is <the plan event's message id>.<event>.
	ID string `json:"delivery_id"`
	// Event is one of repo.NotificationEvents.
	Event   string `json:"event"`
	Cluster string `json:"cluster"`
	Repo    string `json:"repo,omitempty"`
	Commit  string `json:"commit,omitempty"`
	PlanID  string `json:"plan_id,omitempty"`
	RunID   string `json:"run_id,omitempty"`
	// Severity is critical, warning or info.
	Severity string `json:"severity"`
	// Title is one line: what happened, to what, from which commit.
	Title string `json:"title"`
	// Details are the lines that explain it: diagnostics, failed operations, prunes, warnings.
	Details []string `json:"details,omitempty"`
	// URL links the cluster's status page when an external URL is configured.
	URL string `json:"url,omitempty"`
	// At is when the event was stored on the bus.
	At time.Time `json:"at"`
}

// Text is the notification as plain text: the title, the details one per line, and the link.
func (n Notification) Text() string {
	var b strings.Builder
	b.WriteString(n.Title)
	for _, d := range n.Details {
		b.WriteString("\n- ")
		b.WriteString(d)
	}
	if n.URL != "" {
		b.WriteString("\n")
		b.WriteString(n.URL)
	}
	return b.String()
}

// clusterState is the notifier's memory of a cluster (KV proxops_notify), to tell a recovery and a new
// warning from what was already said.
type clusterState struct {
	// Seq is the PROXOPS_PLANS sequence last folded in; Prev the state before it, so a redelivered event
	// gives the same notifications as its first delivery.
	Seq  uint64        `json:"seq"`
	Prev *clusterState `json:"prev,omitempty"`
	// Bad: the last run failed or the last plan was rejected.
	Bad bool `json:"bad"`
	// Commit is the last commit applied successfully.
	Commit string `json:"commit,omitempty"`
}

// planEvent is a decoded plan event.
type planEvent struct {
	rejected *plan.Rejected
	held     *plan.Held
	finished *plan.FinishedRun
}

// decodePlanEvent decodes the plan events that can give a notification; any other (a published plan, which
// tells nothing by itself) is left empty without being read.
func decodePlanEvent(ctx context.Context, d *bus.Delivery) (planEvent, error) {
	var (
		e   planEvent
		err error
	)
	switch d.Type() {
	case "proxops.plan.v1.PlanRejected":
		var r plan.Rejected
		r, err = wire.DecodeRejected(ctx, d.Decode)
		e.rejected = &r
	case "proxops.plan.v1.PlanHeld":
		var h plan.Held
		h, err = wire.DecodeHeld(ctx, d.Decode)
		e.held = &h
	case "proxops.plan.v1.PlanFinished":
		var f plan.FinishedRun
		f, err = wire.DecodeFinished(ctx, d.Decode)
		e.finished = &f
	}
	return e, err
}

func preview(info plan.RunInfo) bool { return info.DryRun && info.RequestID != "" }

// fold computes what an event says given the cluster's state before it, and the state after it. It is a
// pure function of its inputs: a redelivery gives the same notifications.
func fold(before clusterState, e planEvent, id string, at time.Time, statusURL func(cluster string) string) ([]Notification, clusterState) {
	after := before
	after.Prev = nil
	var out []Notification
	add := func(info plan.RunInfo, event, severity, title string, details []string) {
		out = append(out, Notification{ID: id + "." + event, Event: event, Cluster: info.Cluster, Repo: info.Repo,
			Commit: info.Commit, PlanID: info.PlanID, RunID: info.RunID, Severity: severity, Title: title,
			Details: details, URL: statusURL(info.Cluster), At: at})
	}
	switch {
	case e.rejected != nil && !preview(e.rejected.RunInfo):
		r := e.rejected
		var details []string
		for _, d := range r.Rejection.Diagnostics {
			details = append(details, d.String())
		}
		add(r.RunInfo, repo.NotifyPlanRejected, "critical",
			fmt.Sprintf("ProxOps: commit %s rejected for cluster %s (%s); nothing was applied", short(r.Commit), r.Cluster, r.Rejection.Reason), details)
		after.Bad = true
	case e.held != nil:
		h := e.held
		add(h.RunInfo, repo.NotifyPlanHeld, "warning",
			fmt.Sprintf("ProxOps: plan %s of commit %s for cluster %s is held for confirmation: %s", short(h.PlanID), short(h.Commit), h.Cluster, h.Reason),
			append([]string{"confirm it by publishing a PlanConfirmation of plan " + h.PlanID + " on proxops.v1.confirm." + h.Cluster + ", or run proxops apply --yes"}, prefixed("would delete ", h.Prunes)...))
	case e.finished != nil:
		f := e.finished
		switch f.Outcome {
		case plan.OutcomeFailed:
			var details []string
			for _, o := range f.Operations {
				if o.State == plan.OpFailed {
					details = append(details, fmt.Sprintf("%s %s failed: %s", o.Ref, o.Action, o.Message))
				}
			}
			add(f.RunInfo, repo.NotifyRunFailed, "critical",
				fmt.Sprintf("ProxOps: run on cluster %s failed (commit %s): %d of %d operations failed, %d skipped", f.Cluster, short(f.Commit),
					f.Failed, f.Succeeded+f.Failed+f.Skipped+f.Superseded, f.Skipped), details)
			after.Bad = true
		case plan.OutcomeSucceeded:
			if before.Bad {
				add(f.RunInfo, repo.NotifyRecovered, "info",
					fmt.Sprintf("ProxOps: cluster %s recovered: commit %s applied", f.Cluster, short(f.Commit)), nil)
			}
			drift := strings.Contains(f.EventID, "#drift-") || before.Commit != "" && before.Commit == f.Commit
			var details []string
			for _, o := range f.Operations {
				// A safety snapshot or its removal brings nothing back to the commit.
				if o.State == plan.OpSucceeded && o.Action != plan.ActionSnapshot && o.Action != plan.ActionDeleteSnapshot {
					details = append(details, fmt.Sprintf("%s %s", o.Ref, o.Action))
				}
			}
			if drift && len(details) > 0 {
				add(f.RunInfo, repo.NotifyDriftCorrected, "warning",
					fmt.Sprintf("ProxOps: drift corrected on cluster %s: %d %s brought back to commit %s", f.Cluster, len(details),
						plural(len(details), "operation"), short(f.Commit)), details)
			}
			after.Bad = false
			after.Commit = f.Commit
		case plan.OutcomeSuperseded, plan.OutcomeNotApplied:
			// A newer commit took over, or nothing was applied: nothing to tell yet.
		}
	}
	return out, after
}

func prefixed(p string, items []string) []string {
	out := make([]string, 0, len(items))
	for _, i := range items {
		out = append(out, p+i)
	}
	return out
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// short abbreviates a commit or id for a title.
func short(id string) string {
	if id == "" {
		return "(work tree)"
	}
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
