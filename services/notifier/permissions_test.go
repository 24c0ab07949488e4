package notifier_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/services/notifier"
)

// The notifier does its whole job as the NATS user notifier, with only the permissions a deployment gives
// it: it creates its consumers, reads plan events, including one too large to travel inline, and gap
// reports, and keeps its
// memory; and that user can publish nothing on ProxOps' subjects.
func TestNotifierRunsWithOnlyItsNATSPermissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server, err := bus.StartServer(ctx, bus.ServerConfig{Dir: t.TempDir(),
		Users: []bus.User{{Name: "notifier", Password: "pw-notifier", Permissions: bus.NotifierPermissions()}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.Shutdown)
	admin, err := server.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	if _, err := admin.Provision(ctx, bus.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	nb, err := server.ConnectUser("notifier", "pw-notifier", bus.Options{APITimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nb.Close() })

	hook := newReceiver(t, http.StatusServiceUnavailable)
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- notifier.Run(rctx, notifier.Config{Bus: nb, Backoff: 50 * time.Millisecond, Timeout: 5 * time.Second,
			Notifications: repo.NotificationsConfig{Providers: []repo.NotificationProvider{{Name: "hook", Type: "webhook", URL: hook.URL}}}})
	}()
	t.Cleanup(func() {
		rcancel()
		if err := <-done; err != nil {
			t.Errorf("notifier: %v", err)
		}
	})

	big := failedRun("lab", "run-big")
	big.Operations[1].Message = strings.Repeat("a long PVE task log line; ", 45000)
	publishFinished(t, admin, big)
	got := hook.waitRequests(t, 2)
	if !contains(got[1].Body, `"event":"run-failed"`) || !contains(got[1].Body, "a long PVE task log line") {
		t.Fatalf("notification %s", got[1].Body[:200])
	}
	// The failed first attempt, then the recovery, are published for the status service.
	notify, _ := bus.NotifySubject("lab")
	testkit.Eventually(t, 30*time.Second, "the delivery health of lab", func() bool {
		m, err := admin.LastMessage(ctx, bus.StreamNotify, notify)
		return err == nil && m.Sequence >= 2
	})
	testkit.Eventually(t, 30*time.Second, "the notifier's memory of lab", func() bool {
		data, _, err := admin.GetBytes(ctx, bus.BucketNotify, "lab")
		return err == nil && strings.Contains(string(data), `"bad":true`)
	})
	publishGapReport(t, admin, unconfinedReport("lab"))
	got = hook.waitRequests(t, 3)
	if !contains(got[2].Body, `"event":"security-warning"`) {
		t.Fatalf("third request %s, want the gap report's security warning", got[2].Body)
	}
	subject, _ := bus.PlanSubject("lab", bus.PlanFinished)
	m, err := wireFinished(failedRun("lab", "run-forged"))
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	if _, err := nb.Publish(pctx, subject, m); err == nil {
		t.Fatal("the notifier's user published a plan event")
	}
}
