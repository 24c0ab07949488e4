package executor_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/executor"
)

const cluster = "lab"

// env is a real NATS server (listening on loopback, so other processes can join) and the simulator.
type env struct {
	t *testing.T
	// runID is the run newEnv opened for the cluster: dispatch gives it to operations that name none.
	runID  string
	server *bus.Server
	bus    *bus.Bus
	sim    *pvesim.Sim
	srv    *httptest.Server
}

func newEnv(t *testing.T, spec pvesim.Spec) *env {
	t.Helper()
	ctx := testContext(t)
	server, err := bus.StartServer(ctx, bus.ServerConfig{Dir: t.TempDir(), Listen: true})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(server.Shutdown)
	b, err := server.Connect(bus.Options{})
	if err != nil {
		t.Fatalf("connect nats: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if _, err := b.Provision(ctx, bus.ProvisionConfig{}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if spec.TaskDurations == nil {
		spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond)}
	}
	spec.Seed = 11
	sim, err := pvesim.New(spec)
	if err != nil {
		t.Fatalf("simulator: %v", err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	e := &env{t: t, server: server, bus: b, sim: sim, srv: srv}
	e.openRun("run-test")
	for _, g := range spec.Guests {
		if conf, ok := sim.Config(g.VMID); ok && pveformat.Owned(conf["tags"]) {
			e.own(g.VMID)
		}
	}
	return e
}

// own records a guest of the simulator in the ownership inventory with its identity as it is now, as a
// planner records the guests it creates, clones or claims: an executor writes only to the guests recorded so.
func (e *env) own(vmid int) {
	e.t.Helper()
	if fp := e.fingerprint(vmid); fp != "" {
		e.record(vmid, fp)
		return
	}
	e.t.Fatalf("guest %d has no identity to record", vmid)
}

// fingerprint is a simulator guest's identity fingerprint (inventory.Fingerprint).
func (e *env) fingerprint(vmid int) string {
	e.t.Helper()
	conf, ok := e.sim.Config(vmid)
	_, kind, _ := e.sim.NodeOf(vmid)
	if !ok {
		e.t.Fatalf("guest %d does not exist", vmid)
	}
	g := inventory.Guest{VMID: vmid, Type: inventory.GuestType(kind)}
	for k, v := range conf {
		g.Config = append(g.Config, inventory.Entry{Key: k, Value: v, HasValue: true})
	}
	return inventory.Fingerprint(g)
}

// record writes an ownership record of vmid with the given fingerprint.
func (e *env) record(vmid int, fingerprint string) {
	e.t.Helper()
	m, err := wire.OwnedGuestToProto(wire.OwnedGuest{Cluster: cluster, Owned: plan.Owned{VMID: vmid, Ref: fmt.Sprintf("VM/guest-%d", vmid),
		Node: "pve1", Fingerprint: fingerprint}, RunID: e.runID, RecordedAt: time.Now().UTC()})
	if err != nil {
		e.t.Fatal(err)
	}
	key, _ := bus.OwnedKey(cluster, vmid)
	if _, err := e.bus.PutProto(testContext(e.t), bus.BucketOwned, key, m); err != nil {
		e.t.Fatalf("record guest %d: %v", vmid, err)
	}
}

// openRun records runID as the cluster's run in progress, as a planner does before it dispatches: the
// executor runs operations of that run only.
func (e *env) openRun(runID string) {
	e.t.Helper()
	m, err := wire.ClusterControlToProto(wire.ClusterControl{Cluster: cluster, RunID: runID})
	if err != nil {
		e.t.Fatal(err)
	}
	key, _ := bus.ClusterKey(cluster)
	if _, err := e.bus.PutProto(testContext(e.t), bus.BucketClusters, key, m); err != nil {
		e.t.Fatalf("open run %s: %v", runID, err)
	}
	e.runID = runID
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// config is an in-process executor of node pve1 on this environment.
func (e *env) config() executor.Config {
	return executor.Config{
		Cluster: cluster, Node: "pve1", Replica: "test", Bus: e.bus,
		PVE: pve.Config{BaseURL: e.srv.URL, TokenID: pvesim.DefaultRootTokenID, TokenSecret: pvesim.DefaultRootTokenSecret,
			TaskPollMin: 2 * time.Millisecond, TaskPollMax: 20 * time.Millisecond, ReadBackoff: time.Millisecond},
		AckWait: 2 * time.Second, RetryBackoff: 20 * time.Millisecond, ShutdownGrace: time.Second,
		TrustedPlannerKeys: []string{testkit.PlannerKey(e.t).PublicKey()},
		Logger:             slog.New(slog.DiscardHandler),
	}
}

// start runs an executor until the test ends and waits until it consumes operations.
func (e *env) start(cfg executor.Config) {
	e.t.Helper()
	ready := make(chan struct{})
	onReady := cfg.OnReady
	cfg.OnReady = func() {
		if onReady != nil {
			onReady()
		}
		close(ready)
	}
	done := e.run(cfg)
	// Ready once this replica consumes (the node's consumer may exist already, set up by another replica).
	select {
	case <-ready:
	case err := <-done:
		e.t.Fatalf("executor stopped: %v", err)
	case <-time.After(20 * time.Second):
		e.t.Fatal("executor not consuming after 20s")
	}
}

// run runs an executor until the test ends; the channel gets Run's error if it stops before.
func (e *env) run(cfg executor.Config) <-chan error {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- executor.Run(ctx, cfg) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("executor: %v", err)
			}
		case <-time.After(30 * time.Second):
			e.t.Error("executor did not stop")
		}
	})
	return done
}

var seq struct {
	mu sync.Mutex
	n  int
}

// dispatch publishes an operation on its node's work queue with a fresh run and op id.
func (e *env) dispatch(op plan.Operation) plan.Operation {
	e.t.Helper()
	seq.mu.Lock()
	seq.n++
	n := seq.n
	seq.mu.Unlock()
	if op.RunID == "" {
		op.RunID = e.runID
	}
	if op.ID == "" {
		op.ID = fmt.Sprintf("op-%d", n)
	}
	if op.Cluster == "" {
		op.Cluster = cluster
	}
	subjectNode := op.Node
	if subjectNode == "" {
		subjectNode = "pve1"
	}
	return e.dispatchTo(subjectNode, op)
}

func (e *env) dispatchTo(node string, op plan.Operation) plan.Operation {
	e.t.Helper()
	m, err := wire.SignOperation(op, testkit.PlannerKey(e.t).Sign)
	if err != nil {
		e.t.Fatal(err)
	}
	subject, err := bus.OpSubject(cluster, node)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.bus.Publish(testContext(e.t), subject, m, bus.WithMsgID(op.RunID+"."+op.ID)); err != nil {
		e.t.Fatalf("publish operation: %v", err)
	}
	return op
}

// results reads every result and progress event of the cluster.
func (e *env) results() []plan.Result {
	e.t.Helper()
	filter, _ := bus.ResultFilter(cluster)
	var out []plan.Result
	err := e.bus.ReadStream(testContext(e.t), bus.StreamResults, filter, 0, func(m *bus.Message) error {
		r, err := wire.DecodeResult(testContext(e.t), m.Decode)
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		e.t.Fatalf("read results: %v", err)
	}
	return out
}

// final waits for the final result of an operation.
func (e *env) final(op plan.Operation, timeout time.Duration) plan.Result {
	e.t.Helper()
	var got plan.Result
	testkit.Eventually(e.t, timeout, "final result of "+op.ID, func() bool {
		for _, r := range e.results() {
			if r.RunID == op.RunID && r.OpID == op.ID && r.Status.Final() {
				got = r
				return true
			}
		}
		return false
	})
	return got
}

func (e *env) mustSucceed(op plan.Operation) plan.Result {
	e.t.Helper()
	r := e.final(op, 30*time.Second)
	if r.Status != plan.StatusSucceeded {
		e.t.Fatalf("%s %s: %s (%s): %s", op.ID, op.Action, r.Status, r.ErrorClass, r.Message)
	}
	return r
}

func kvs(pairs ...string) []plan.KV {
	var out []plan.KV
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, plan.KV{Key: pairs[i], Value: pairs[i+1]})
	}
	return out
}

func countWhere(rs []plan.Result, f func(plan.Result) bool) int {
	return len(slices.DeleteFunc(slices.Clone(rs), func(r plan.Result) bool { return !f(r) }))
}
