package notifier

import (
	"slices"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/repo"
)

func noURL(string) string { return "" }

// A cluster's plan events give, in order: a failed run, a held plan, a recovery when a run succeeds after
// the failure, and corrected drift when a run brings the same commit back; previews of a work tree give
// nothing.
func TestNotificationEventsFollowTheClusterHistory(t *testing.T) {
	info := plan.RunInfo{Cluster: "lab", Commit: "c1", RunID: "r1", EventID: "repo@c1"}
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
		{finished("r1", "repo@c1", plan.OutcomeSucceeded, 3), nil},
		{finished("r2", "repo@c1#drift-42", plan.OutcomeFailed, 0), []string{repo.NotifyRunFailed}},
		{planEvent{rejected: &plan.Rejected{RunInfo: preview, Rejection: plan.Rejection{Cluster: "lab", Reason: plan.RejectParse}}}, nil},
		{planEvent{held: &plan.Held{RunInfo: info, Reason: "would prune 3 of 4 VMs", Prunes: []string{"VM/a", "VM/b", "VM/c"}}}, []string{repo.NotifyPlanHeld}},
		{finished("r3", "repo@c1#drift-43", plan.OutcomeSucceeded, 1), []string{repo.NotifyRecovered, repo.NotifyDriftCorrected}},
		{finished("r4", "repo@c1#drift-44", plan.OutcomeSucceeded, 0), nil},
		{planEvent{rejected: &plan.Rejected{RunInfo: info, Rejection: plan.Rejection{Cluster: "lab", Reason: plan.RejectParse}}}, []string{repo.NotifyPlanRejected}},
		{finished("r5", "repo@c1", plan.OutcomeSucceeded, 2), []string{repo.NotifyRecovered, repo.NotifyDriftCorrected}},
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

// A cluster's gap reports give a security-warning notification for each warning not in the previous
// report: once, again after it went away and came back, and never for a report that only lost warnings.
func TestSecurityWarningsOfGapReportsAreToldOnceUntilTheyComeBack(t *testing.T) {
	unconfined := inventory.SecurityWarning{Setting: inventory.Setting{Kind: "LXC", Name: "build-01", Node: "pve1", VMID: 210, Key: "lxc.apparmor.profile", Value: "unconfined"},
		Why: "the container runs without an AppArmor profile"}
	devices := inventory.SecurityWarning{Setting: inventory.Setting{Kind: "LXC", Name: "build-01", Node: "pve1", VMID: 210, Key: "lxc.cgroup2.devices.allow", Value: "a"},
		Why: "the container may use every host device"}
	report := func(ws ...inventory.SecurityWarning) inventory.GapReport {
		return inventory.GapReport{Cluster: "lab", Security: ws}
	}
	steps := []struct {
		report inventory.GapReport
		fresh  int
	}{
		{report(unconfined), 1},
		{report(unconfined), 0},
		{report(unconfined, devices), 1},
		{report(devices), 0},
		{report(), 0},
		{report(devices, unconfined), 2},
	}
	var told []string
	for i, s := range steps {
		notes, after := foldSecurity(told, s.report, "PROXOPS_GAPS-7", time.Time{}, noURL)
		got := 0
		for _, n := range notes {
			if n.Event != repo.NotifySecurityWarning || n.Cluster != "lab" || n.ID != "PROXOPS_GAPS-7.security-warning" {
				t.Errorf("step %d: notification %+v", i, n)
			}
			got += len(n.Details)
		}
		if got != s.fresh {
			t.Errorf("step %d: %d warnings told, want %d (%+v)", i, got, s.fresh, notes)
		}
		told = after
	}
	notes, _ := foldSecurity(nil, report(unconfined), "x", time.Time{}, noURL)
	want := "LXC/build-01 (vmid 210 on pve1) lxc.apparmor.profile: unconfined (the container runs without an AppArmor profile)"
	if len(notes) != 1 || len(notes[0].Details) != 1 || notes[0].Details[0] != want {
		t.Errorf("notification %+v, want the detail %q", notes, want)
	}
}

// Errors and logs of a delivery name the provider's host, never the path or query that carry its token.
func TestProviderURLsAreRedactedToTheirHost(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.slack.com/services/T0/B0/secret-token": "https://hooks.slack.com/…",
		"https://ntfy.example.org/?auth=secret-token":         "https://ntfy.example.org/…",
		"https://user:secret-token@am.example.org:9093":       "https://am.example.org:9093",
		"https://gotify.example.org/":                         "https://gotify.example.org",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
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
