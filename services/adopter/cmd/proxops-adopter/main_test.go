package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/testkit"
)

func TestConfigureDefaultsTheMetricsEndpointToLoopback(t *testing.T) {
	env := func(k string) string { return map[string]string{"PROXOPS_NATS_URL": "nats://127.0.0.1:4222"}[k] }
	_, listen, _, err := configure(nil, env)
	if err != nil || listen != DefaultMetricsListen || !strings.HasPrefix(listen, "127.0.0.1:") {
		t.Fatalf("default metrics address %q, %v; want %s", listen, err, DefaultMetricsListen)
	}
	_, listen, _, err = configure([]string{"--metrics-listen", ""}, env)
	if err != nil || listen != "" {
		t.Fatalf("--metrics-listen \"\": %q, %v; want off", listen, err)
	}
	if _, _, _, err := configure(nil, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "NATS") {
		t.Fatalf("no NATS server: %v", err)
	}
}

func TestAdopterProcessServesItsMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: t.TempDir(), Listen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	admin, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	if _, err := admin.Provision(ctx, bus.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	info := srv.ClientInfo()
	addr := testkit.FreeAddr(t)
	env := map[string]string{"PROXOPS_NATS_PASSWORD": info.Password}
	runCtx, stop := context.WithCancel(ctx)
	var stderr testkit.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"--nats-url", info.URL, "--nats-user", info.User, "--metrics-listen", addr},
			func(k string) string { return env[k] }, &stderr)
	}()
	var body string
	testkit.WaitUntil(t, "/metrics", done, &stderr, func() bool {
		body = testkit.Get("http://" + addr + "/metrics")
		return strings.Contains(body, "# TYPE")
	})
	for _, want := range []string{"proxops_build_info{", "go_goroutines ", "process_start_time_seconds "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after the context ended; log:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the adopter did not stop")
	}
}
