package notifier

import (
	"slices"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/repo"
)

func noURL(string) string { return "" }

// A cluster's plan events give, in order: a new security warning once, a failed run, a held plan, a
// recovery when a run succeeds after the failure, and corrected drift when a run brings the same commit
// back; previews of a work tree give nothing.
func TestNotificationEventsFollowTheClusterHistory(t *testing.T) {
	info := plan.RunInfo{Cluster: "lab", Commit: "c1", RunID: "r1", EventID: "repo@c1"}
	warn := plan.Finding{Kind: plan.FindingWarning, Ref: "VM/web-01", Field: "spec.args", Message: "raw QEMU arguments bypass the sandbox"}
	planned := func(run string, fs ...plan.Finding) planEvent {
		i := info
		i.RunID = run
		return planEvent{planned: &plan.Planned{RunInfo: i, Plan: plan.Plan{Findings: fs}}}
	}
	finished := func(run, eventID string, outcome plan.Outcome, ok int) planEvent {
		i := info
		i.RunID, i.EventID = run, eventID
		ops := []plan.OpOutcome{}
		for range ok {
			ops = append(ops, plan.OpOutcome{Ref: "VM/web-01", Action: plan.ActionConfigure, State: plan.OpSucceeded})
		}
		return planEvent{finished: &plan.FinishedRun{RunInfo: i, Finished: plan.Finished{Outcome: outcome, Succeeded: ok, Operations: ops}}}
	}
	preview := info
	preview.DryRun, preview.RequestID = true, "req-1"
	steps := []struct {
		event planEvent
		want  []string
	}{
		{planned("r1", warn), []string{repo.NotifySecurityWarning}},
		{finished("r1", "repo@c1", plan.OutcomeSucceeded, 3), nil},
		{planned("r2", warn), nil},
		{finished("r2", "repo@c1#drift-42", plan.OutcomeFailed, 0), []string{repo.NotifyRunFailed}},
		{planEvent{rejected: &plan.Rejected{RunInfo: preview, Rejection: plan.Rejection{Cluster: "lab", Reason: plan.RejectParse}}}, nil},
		{planEvent{held: &plan.Held{RunInfo: info, Reason: "would prune 3 of 4 VMs", Prunes: []string{"VM/a", "VM/b", "VM/c"}}}, []string{repo.NotifyPlanHeld}},
		{finished("r3", "repo@c1#drift-43", plan.OutcomeSucceeded, 1), []string{repo.NotifyRecovered, repo.NotifyDriftCorrected}},
		{finished("r4", "repo@c1#drift-44", plan.OutcomeSucceeded, 0), nil},
		{planned("r5"), nil},
		{planned("r6", warn), []string{repo.NotifySecurityWarning}},
	}
	var st clusterState
	for i, s := range steps {
		notes, after := fold(st, s.event, "id", time.Time{}, noURL)
		var got []string
		for _, n := range notes {
			got = append(got, n.Event)
		}
		if !slices.Equal(got, s.want) {
			t.Errorf("step %d: events %v, want %v (%+v)", i, got, s.want, notes)
		}
		again, _ := fold(st, s.event, "id", time.Time{}, noURL)
		if len(again) != len(notes) {
			t.Errorf("step %d: folding the same event again gave %d notifications, then %d", i, len(notes), len(again))
		}
		st = after
	}
}

// Providers receive what their filters and the cluster's override let through, within their rate limit.
func TestNotificationFiltersOverridesAndRateLimit(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	n := &notifier{cfg: Config{Now: func() time.Time { return now }, Notifications: repo.NotificationsConfig{
		Overrides: map[string]*repo.NotificationOverride{"quiet": {Mute: true}, "lab": {Providers: []string{"chat"}, Events: []string{repo.NotifyRunFailed}}},
	}}, rate: map[string][]time.Time{}}
	chat := &provider{cfg: repo.NotificationProvider{Name: "chat", RateLimit: 2}}
	prodOnly := &provider{cfg: repo.NotificationProvider{Name: "pager", Clusters: []string{"prod"}, Events: []string{repo.NotifyPlanRejected}}}
	cases := []struct {
		p           *provider
		cluster, ev string
		want        bool
	}{
		{chat, "prod", repo.NotifyRecovered, true},
		{chat, "quiet", repo.NotifyRunFailed, false},
		{chat, "lab", repo.NotifyRunFailed, true},
		{chat, "lab", repo.NotifyPlanHeld, false},
		{prodOnly, "prod", repo.NotifyPlanRejected, true},
		{prodOnly, "prod", repo.NotifyRunFailed, false},
		{prodOnly, "staging", repo.NotifyPlanRejected, false},
		{prodOnly, "lab", repo.NotifyRunFailed, false},
	}
	for _, c := range cases {
		if got := n.wants(c.p, Notification{Cluster: c.cluster, Event: c.ev}); got != c.want {
			t.Errorf("%s gets %s of %s: %v, want %v", c.p.cfg.Name, c.ev, c.cluster, got, c.want)
		}
	}
	first, second, third := n.allow(chat), n.allow(chat), n.allow(chat)
	if !first || !second || third {
		t.Fatalf("a rate limit of 2 per minute: %v, %v, %v; want the third message of the minute refused", first, second, third)
	}
	now = now.Add(time.Minute)
	if !n.allow(chat) {
		t.Fatal("the rate limit still refuses a minute later")
	}
}
