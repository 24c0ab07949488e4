package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestOptionsComeFromFlagsWithTheEnvironmentAsDefault(t *testing.T) {
	o, err := parseOptions([]string{"--metrics-listen", ""}, envOf(map[string]string{
		"PROXOPS_NATS_URL": "nats://127.0.0.1:4222", "PROXOPS_NATS_PASSWORD": "s3cret",
		"PROXOPS_CONFIG": "/etc/proxops/proxops.yaml", "PROXOPS_LOG_LEVEL": "debug",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.nats.URL != "nats://127.0.0.1:4222" || o.nats.User != "notifier" || o.nats.Password != "s3cret" ||
		o.config != "/etc/proxops/proxops.yaml" || o.metricsListen != "" || o.logLevel.String() != "DEBUG" {
		t.Errorf("options = %+v", o)
	}
}

func TestBadConfigurationExitsWithUsageStatus(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.yaml")
	writeFile(t, empty, "pve:\n  clusters: {}\n")
	badType := filepath.Join(dir, "bad.yaml")
	writeFile(t, badType, "notifications:\n  providers:\n    - name: chat\n      type: pager\n      url: https://chat.example.org/hook\n")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "--nats-url (or PROXOPS_NATS_URL) is required"},
		{[]string{"--nats-url", "nats://127.0.0.1:1"}, "--config (or PROXOPS_CONFIG) is required"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--config", empty}, "notifications.providers is empty"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--config", badType}, "bad.yaml:4:"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
	} {
		var stderr bytes.Buffer
		code := run(tt.args, envOf(nil), func(string) (string, bool) { return "", false }, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("run %v: code %d, stderr %q; want 2 and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}

// The standalone notifier connects as the deployment's notifier user, tells a webhook about a failed run,
// and counts the send on its own /metrics.
func TestStandaloneNotifierTellsAFailedRunAndServesItsMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server, err := bus.StartServer(ctx, bus.ServerConfig{Dir: t.TempDir(), Listen: true,
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

	var mu sync.Mutex
	var bodies []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	config := filepath.Join(t.TempDir(), "proxops.yaml")
	writeFile(t, config, "notifications:\n  providers:\n    - name: hook\n      type: webhook\n      url: "+hook.URL+"/proxops\n")
	metricsAddr := testkit.FreeAddr(t)
	var log testkit.SyncBuffer

	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() {
		env := envOf(map[string]string{"PROXOPS_NATS_URL": server.ClientURL(), "PROXOPS_NATS_PASSWORD": "pw-notifier"})
		done <- runContext(rctx, []string{"--config", config, "--metrics-listen", metricsAddr}, env,
			func(string) (string, bool) { return "", false }, &log)
	}()
	t.Cleanup(func() {
		rcancel()
		if code := <-done; code != 0 {
			t.Errorf("proxops-notifier exited %d; log:\n%s", code, log.String())
		}
	})

	run := plan.FinishedRun{
		RunInfo: plan.RunInfo{Cluster: "lab", RunID: "run-1", Commit: "3f9a1c2e77d0aa11"},
		Finished: plan.Finished{Outcome: plan.OutcomeFailed, Failed: 1, Operations: []plan.OpOutcome{
			{ID: "vm-102-configure", Ref: "VM/db-01", Action: plan.ActionConfigure, State: plan.OpFailed, Message: "VM 102 is locked (backup)"},
		}},
	}
	m, err := wire.FinishedToProto(run)
	if err != nil {
		t.Fatal(err)
	}
	subject, _ := bus.PlanSubject("lab", bus.PlanFinished)
	if _, err := admin.Publish(ctx, subject, m, bus.WithMsgID("run-1.finished")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitUntil(t, "the webhook to get the failed run", done, &log, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(bodies) == 1 && strings.Contains(bodies[0], `"event":"run-failed"`)
	})
	testkit.WaitUntil(t, "/metrics to count the send", done, &log, func() bool {
		return strings.Contains(testkit.Get("http://"+metricsAddr+"/metrics"),
			`proxops_notifications_total{event="run-failed",provider="hook",result="sent",type="webhook"} 1`)
	})
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
