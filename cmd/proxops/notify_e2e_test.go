package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/testkit"
)

// proxops up runs the notifier when proxops.yaml names providers: a demo that converges tells nothing; a
// change made by hand on PVE that the next reconcile corrects is told once, as drift corrected, to a
// webhook receiver on loopback (proxops notifications listen), before up --once stops.
func TestNotificationOfCorrectedDriftFromUp(t *testing.T) {
	e := newDemoEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := &testkit.SyncBuffer{}
	done := make(chan int, 1)
	go func() {
		cmd := newRootCommand()
		cmd.SetOut(out)
		cmd.SetErr(out)
		cmd.SetArgs([]string{"notifications", "listen", "--listen", "127.0.0.1:0"})
		if err := cmd.ExecuteContext(ctx); err != nil {
			_, _ = out.Write([]byte("error: " + err.Error() + "\n"))
			done <- 1
			return
		}
		done <- 0
	}()
	t.Cleanup(func() { cancel(); <-done })
	listening := regexp.MustCompile(`listening on (http://127\.0\.0\.1:[0-9]+/)`)
	testkit.WaitUntil(t, "the receiver's address", done, out, func() bool { return listening.MatchString(out.String()) })
	url := listening.FindStringSubmatch(out.String())[1]
	e.edit("proxops.yaml", func(s string) string {
		return s + "notifications:\n  external-url: http://127.0.0.1:9494\n  providers:\n    - name: try\n      type: webhook\n      url: " + url + "\n"
	})
	e.commit("tell a webhook receiver")

	e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	if strings.Contains(out.String(), "notification ") {
		t.Fatalf("a converging demo notified:\n%s", out)
	}
	if err := e.sim.SetConfig(101, "memory", "3072"); err != nil {
		t.Fatal(err)
	}
	e.mustRun(0, "up", "--once", "--listen", "127.0.0.1:0")
	testkit.WaitUntil(t, "the drift notification", done, out, func() bool {
		return strings.Contains(out.String(), "notification drift-corrected for cluster demo")
	})
	got := out.String()
	for _, want := range []string{"ProxOps: drift corrected on cluster demo: 3 operations brought back to commit " + e.head()[:12],
		"- VM/web-01 shutdown\n  - VM/web-01 configure\n  - VM/web-01 start", "http://127.0.0.1:9494/status/demo"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in what the receiver printed:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "notification "); n != 1 {
		t.Errorf("%d notifications, want 1:\n%s", n, got)
	}
}
