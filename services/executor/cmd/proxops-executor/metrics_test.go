package main

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
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
	addr := testkit.FreeAddr(t)
	runCtx, stop := context.WithCancel(ctx)
	var stderr testkit.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"--cluster", "lab", "--node", "pve1", "--pve-url", pveSrv.URL, "--nats-url", info.URL,
			"--nats-user", info.User, "--metrics-listen", addr, "--trusted-planner-key", testkit.PlannerKey(t).PublicKey()}, env(map[string]string{
			"PROXOPS_NATS_PASSWORD":   info.Password,
			"PROXOPS_PVE_TOKEN_VALUE": pvesim.DefaultRootTokenID + "=" + pvesim.DefaultRootTokenSecret,
		}), &stderr)
	}()
	url := "http://" + addr + "/metrics"
	const node = `{cluster="lab",node="pve1"}`
	var body string
	testkit.WaitUntil(t, "proxops_read_only on /metrics", done, &stderr, func() bool {
		body = testkit.Get(url)
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
		for line := range strings.SplitSeq(testkit.Get(url), "\n") {
			if v, ok := strings.CutPrefix(line, "proxops_pve_last_read_age_seconds"+node+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err == nil {
					return f
				}
			}
		}
		return -1
	}
	// /metrics is served before the executor answers observes: wait until it says it is ready.
	testkit.WaitUntil(t, "the executor to be ready", done, &stderr, func() bool {
		return strings.Contains(stderr.String(), `"msg":"executor ready"`)
	})
	observe("first")
	if a := age(); a < 0 {
		t.Fatalf("no proxops_pve_last_read_age_seconds%s after an observe", node)
	}
	if body = testkit.Get(url); !strings.Contains(body, `proxops_pve_request_duration_seconds_count{cluster="lab",method="GET",node="pve1",result="ok"}`) {
		t.Errorf("the observe's GET requests are not in proxops_pve_request_duration_seconds")
	}
	var before float64
	testkit.WaitUntil(t, "the last-read age to grow", done, &stderr, func() bool { before = age(); return before >= 0.3 })
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
