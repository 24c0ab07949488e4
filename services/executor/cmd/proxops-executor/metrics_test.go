package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/wire"
)

func TestExecutorProcessServesThePredecessorsSeriesPerNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	sim, err := pvesim.New(pvesim.DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	pveSrv := httptest.NewServer(sim)
	t.Cleanup(func() { pveSrv.Close(); sim.WaitTasks() })

	info := srv.ClientInfo()
	addr := freeAddr(t)
	runCtx, stop := context.WithCancel(ctx)
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"--cluster", "lab", "--node", "pve1", "--pve-url", pveSrv.URL, "--nats-url", info.URL,
			"--nats-user", info.User, "--metrics-listen", addr}, env(map[string]string{
			"PROXOPS_NATS_PASSWORD":   info.Password,
			"PROXOPS_PVE_TOKEN_VALUE": pvesim.DefaultRootTokenID + "=" + pvesim.DefaultRootTokenSecret,
		}), &stderr)
	}()
	url := "http://" + addr + "/metrics"
	const node = `{cluster="lab",node="pve1"}`
	var body string
	waitUntil(t, "proxops_read_only on /metrics", done, &stderr, func() bool {
		body = get(url)
		return strings.Contains(body, "proxops_read_only"+node+" 0")
	})
	for _, want := range []string{"proxops_build_info{", "go_goroutines ", "proxops_operations_in_flight" + node + " 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "proxops_pve_last_read_age_seconds{") {
		t.Error("a last-read age is reported before the node was ever read")
	}

	observe := func(id string) {
		t.Helper()
		subject, _ := bus.ObserveSubject("lab", "pve1")
		req := wire.ObserveRequestToProto(wire.ObserveRequest{Cluster: "lab", Node: "pve1", RequestID: id})
		inv, err := wire.DecodeNodeInventory(ctx, func(ctx context.Context, into proto.Message) error {
			return admin.Request(ctx, subject, req, into)
		})
		if err != nil || inv.Error != "" {
			t.Fatalf("observe: %v %s", err, inv.Error)
		}
	}
	age := func() float64 {
		for line := range strings.SplitSeq(get(url), "\n") {
			if v, ok := strings.CutPrefix(line, "proxops_pve_last_read_age_seconds"+node+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err == nil {
					return f
				}
			}
		}
		return -1
	}
	observe("first")
	if a := age(); a < 0 {
		t.Fatalf("no proxops_pve_last_read_age_seconds%s after an observe", node)
	}
	if body = get(url); !strings.Contains(body, `proxops_pve_request_duration_seconds_count{cluster="lab",method="GET",node="pve1",result="ok"}`) {
		t.Errorf("the observe's GET requests are not in proxops_pve_request_duration_seconds")
	}
	var before float64
	waitUntil(t, "the last-read age to grow", done, &stderr, func() bool { before = age(); return before >= 0.3 })
	observe("second")
	if after := age(); after < 0 || after >= before {
		t.Errorf("last-read age %v s after a second observe, was %v s: want it reset", after, before)
	}

	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after the context ended; log:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the executor did not stop")
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

// get returns the body of url, or "" when it cannot be read.
func get(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// waitUntil polls cond; it fails when the process exits first or after 30 s.
func waitUntil(t *testing.T, what string, done <-chan int, log *syncBuffer, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		select {
		case code := <-done:
			t.Fatalf("exited with %d while waiting for %s; log:\n%s", code, what, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30 s; log:\n%s", what, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
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
