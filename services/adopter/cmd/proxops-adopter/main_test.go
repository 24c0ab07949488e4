package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
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
	addr := freeAddr(t)
	env := map[string]string{"PROXOPS_NATS_PASSWORD": info.Password}
	runCtx, stop := context.WithCancel(ctx)
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"--nats-url", info.URL, "--nats-user", info.User, "--metrics-listen", addr},
			func(k string) string { return env[k] }, &stderr)
	}()
	body := waitForMetrics(t, "http://"+addr+"/metrics", done, &stderr)
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

// freeAddr returns a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// waitForMetrics polls url until it answers 200 and returns the body; it fails when the process exits first.
func waitForMetrics(t *testing.T, url string, done <-chan int, log *syncBuffer) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case code := <-done:
			t.Fatalf("exited with %d before serving /metrics; log:\n%s", code, log.String())
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				return string(b)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never answered; log:\n%s", url, log.String())
	return ""
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
