// Package reliability_test holds the fault tests and pipeline benchmarks of ProxOps (quality.md R1, R2, R4,
// P3, P7): the real services over a real NATS JetStream, against the PVE simulator, with processes killed,
// NATS servers stopped and PVE misbehaving. docs/reliability.md says what each proves and how to run the
// long versions.
package reliability_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/treestore"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/executor"
	"github.com/proxops/proxops/services/planner"
)

// cluster is the PVE cluster every test drives.
const cluster = "lab"

// env is one system under test: a NATS JetStream (an embedded server, or a cluster of server processes), the
// test's own connection to it, and the PVE simulator behind a loopback HTTP server.
type env struct {
	t testing.TB
	// server is the embedded server, nil when the test runs a cluster of server processes.
	server *bus.Server
	bus    *bus.Bus
	sim    *pvesim.Sim
	srv    *httptest.Server
	nodes  []string
	seq    int
	// starts holds, per announced event id, the plan stream's last sequence before the announcement.
	starts map[string]uint64
}

// envConfig configures newEnv.
type envConfig struct {
	// Nodes of the simulated cluster (default pve1..pve3).
	Nodes []string
	// Spec is the simulator's spec; its Nodes are replaced by Nodes.
	Spec pvesim.Spec
	// SyncAlways fsyncs every JetStream write.
	SyncAlways bool
	// Listen opens the embedded server's loopback listener (for processes).
	Listen bool
	// LeaseTTL of the plan leases (default 2 s).
	LeaseTTL time.Duration
}

func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("pve%d", i+1)
	}
	return out
}

// newSim starts the simulator with nodes and a spec, served on loopback.
func newSim(t testing.TB, nodes []string, spec pvesim.Spec) (*pvesim.Sim, *httptest.Server) {
	t.Helper()
	spec.Nodes = nil
	for _, n := range nodes {
		spec.Nodes = append(spec.Nodes, pvesim.NodeSpec{Name: n})
	}
	if spec.TaskDurations == nil {
		spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond)}
	}
	if spec.Seed == 0 {
		spec.Seed = 7
	}
	sim, err := pvesim.New(spec)
	if err != nil {
		t.Fatalf("simulator: %v", err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	return sim, srv
}

// newEnv starts an embedded, provisioned NATS server on a temporary store and the simulator.
func newEnv(t testing.TB, cfg envConfig) *env {
	t.Helper()
	if cfg.Nodes == nil {
		cfg.Nodes = nodeNames(3)
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	ctx := testContext(t)
	server, err := bus.StartServer(ctx, bus.ServerConfig{Dir: t.TempDir(), SyncAlways: cfg.SyncAlways, Listen: cfg.Listen})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(server.Shutdown)
	b, err := server.Connect(bus.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("connect nats: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if _, err := b.Provision(ctx, bus.ProvisionConfig{LeaseTTL: cfg.LeaseTTL}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	sim, srv := newSim(t, cfg.Nodes, cfg.Spec)
	return &env{t: t, server: server, bus: b, sim: sim, srv: srv, nodes: cfg.Nodes}
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("PROXOPS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// connect opens another in-process connection, as a separate service would have.
func (e *env) connect() *bus.Bus {
	e.t.Helper()
	// A logger gives the connection an error handler: without one the client prints its asynchronous
	// errors (a watcher's consumer gone at shutdown) to stderr.
	b, err := e.server.Connect(bus.Options{Logger: testLogger(e.t)})
	if err != nil {
		e.t.Fatalf("connect: %v", err)
	}
	e.t.Cleanup(func() { _ = b.Close() })
	return b
}

// startPlanner runs an in-process planner with short timings until the returned stop or the test's end.
func (e *env) startPlanner(name string) (stop func()) {
	e.t.Helper()
	cfg := planner.Config{Name: name, Bus: e.connect(), Keys: &secrets.AgeKeys{}, LeaseTTL: 2 * time.Second, Signer: testkit.PlannerKey(e.t),
		ObserveTimeout: time.Minute, SweepInterval: 300 * time.Millisecond, Tick: 50 * time.Millisecond,
		StaleResult: 3 * time.Second, Logger: testLogger(e.t).With("planner", name)}
	return e.run("planner "+name, func(ctx context.Context) error { return planner.Run(ctx, cfg) })
}

// executorConfig is an in-process executor of a node with short timings.
func (e *env) executorConfig(node, replica string) executor.Config {
	return executor.Config{Cluster: cluster, Node: node, Replica: replica, Bus: e.connect(),
		PVE: pve.Config{BaseURL: e.srv.URL, TokenID: pvesim.DefaultRootTokenID, TokenSecret: pvesim.DefaultRootTokenSecret,
			TaskPollMin: 2 * time.Millisecond, TaskPollMax: 20 * time.Millisecond, ReadBackoff: 5 * time.Millisecond},
		AckWait: 5 * time.Second, RetryBackoff: 20 * time.Millisecond, ShutdownGrace: time.Second,
		TrustedPlannerKeys: []string{testkit.PlannerKey(e.t).PublicKey()},
		Logger:             testLogger(e.t).With("executor", replica)}
}

// startExecutor runs an in-process executor until the returned stop or the test's end, once it serves.
func (e *env) startExecutor(cfg executor.Config) (stop func()) {
	e.t.Helper()
	ready := make(chan struct{})
	cfg.OnReady = func() { close(ready) }
	stop = e.run("executor "+cfg.Replica, func(ctx context.Context) error { return executor.Run(ctx, cfg) })
	select {
	case <-ready:
	case <-time.After(time.Minute):
		e.t.Fatalf("executor %s not serving after a minute", cfg.Replica)
	}
	return stop
}

// startExecutors runs one in-process executor per node of the env, each changed by tune when given.
func (e *env) startExecutors(tune func(*executor.Config)) (stop func()) {
	e.t.Helper()
	var stops []func()
	for _, n := range e.nodes {
		cfg := e.executorConfig(n, "exec-"+n)
		if tune != nil {
			tune(&cfg)
		}
		stops = append(stops, e.startExecutor(cfg))
	}
	return func() {
		var wg sync.WaitGroup
		for _, s := range stops {
			wg.Go(s)
		}
		wg.Wait()
	}
}

func (e *env) run(what string, fn func(context.Context) error) (stop func()) {
	return testkit.RunService(e.t, what, fn)
}

// repoFiles is a repository as path → content.
type repoFiles map[string]string

// clusterConfig is the test cluster's config.yaml on the env's nodes, with extra keys of the cluster.
func (e *env) clusterConfig(extra string) string {
	return fmt.Sprintf("pve:\n  clusters:\n    %s:\n      base-url: %s\n      nodes: [%s]\n%s", cluster, e.srv.URL,
		strings.Join(e.nodes, ", "), extra)
}

// manifests is a repository of the test cluster: its config and the given manifests (path → content),
// all listed in resources.yaml.
func (e *env) manifests(extra string, files map[string]string) repoFiles {
	out := repoFiles{"clusters/" + cluster + "/config.yaml": e.clusterConfig(extra)}
	paths := make([]string, 0, len(files))
	for p, c := range files {
		out[p] = c
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var list []string
	for _, p := range paths {
		list = append(list, "  - ../../"+p)
	}
	if len(list) == 0 {
		out["clusters/"+cluster+"/resources.yaml"] = "resources: []\n"
	} else {
		out["clusters/"+cluster+"/resources.yaml"] = "resources:\n" + strings.Join(list, "\n") + "\n"
	}
	return out
}

// vmManifest is a small VM of the test cluster.
func vmManifest(name string, vmid int, node string, memoryMiB int) string {
	return fmt.Sprintf(`apiVersion: proxops/v1alpha1
kind: VM
metadata: {name: %s}
spec:
  node: %s
  vmid: %d
  memory: %dMiB
  cpu: {type: host, cores: 1}
  disks:
    - {storage: local-lvm, size: 4GiB}
  networks:
    - {bridge: vmbr0}
`, name, node, vmid, memoryMiB)
}

// snapshot stores a repository as a tree snapshot and returns its tree name.
func (e *env) snapshot(files repoFiles) string {
	e.t.Helper()
	snap := testkit.Snapshot(files)
	if _, err := treestore.PutCommitted(testContext(e.t), e.bus, snap); err != nil {
		e.t.Fatalf("store tree: %v", err)
	}
	return snap.Tree
}

// announce publishes a RepoChanged for a repository, as the watcher would: an apply, or a dry run (diff).
func (e *env) announce(files repoFiles, dryRun bool) event.RepoChanged {
	e.t.Helper()
	e.seq++
	tree := e.snapshot(files)
	ev := event.RepoChanged{Repo: "/srv/ops", Branch: "main", Commit: fmt.Sprintf("%040d", e.seq), Tree: tree,
		Trigger: event.TriggerManual, EventID: fmt.Sprintf("/srv/ops@%d#manual-%d-%d", e.seq, e.seq, time.Now().UnixNano()),
		DryRun: dryRun, RequestID: fmt.Sprintf("req-%d", e.seq)}
	m, err := wire.RepoChangedToProto(ev)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx := testContext(e.t)
	filter, _ := bus.PlanFilter(cluster)
	var from uint64
	for attempt := 0; ; attempt++ {
		if from, err = e.bus.LastSequence(ctx, bus.StreamPlans, filter); err == nil {
			_, err = e.bus.Publish(ctx, bus.SubjectRepoChanged, m, bus.WithMsgID(ev.EventID))
		}
		if err == nil || attempt >= 20 {
			break
		}
		time.Sleep(250 * time.Millisecond) // a NATS server may be electing leaders
	}
	if err != nil {
		e.t.Fatalf("publish repo changed: %v", err)
	}
	if e.starts == nil {
		e.starts = map[string]uint64{}
	}
	e.starts[ev.EventID] = from
	return ev
}

// outcome is what the planners published for one repository event, with the times the stream stored the
// first plan and the last end of a run.
type outcome struct {
	planned    []plan.Planned
	held       []plan.Held
	finished   []plan.FinishedRun
	rejected   []plan.Rejected
	plannedAt  time.Time
	finishedAt time.Time
}

func (o outcome) done() bool { return len(o.finished) > 0 || len(o.rejected) > 0 }

func (o outcome) last() plan.FinishedRun { return o.finished[len(o.finished)-1] }

// await follows the test cluster's plan events from an announced event on, until cond holds for what was
// published for it. It reads each event once, so waiting costs the system under test next to nothing.
func (e *env) await(ev event.RepoChanged, timeout time.Duration, what string, cond func(outcome) bool) outcome {
	e.t.Helper()
	filter, _ := bus.PlanFilter(cluster)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var o outcome
	err := e.bus.Follow(ctx, bus.StreamPlans, []string{filter}, e.starts[ev.EventID]+1, func(m *bus.Message, stored time.Time) error {
		switch {
		case strings.HasSuffix(m.Subject, ".planned"):
			v, err := wire.DecodePlanned(ctx, m.Decode)
			if err == nil && (v.EventID == ev.EventID || v.Answers(ev.RequestID)) {
				o.planned = append(o.planned, v)
				if o.plannedAt.IsZero() {
					o.plannedAt = stored
				}
			}
		case strings.HasSuffix(m.Subject, ".held"):
			v, err := wire.DecodeHeld(ctx, m.Decode)
			if err == nil && slices.ContainsFunc(o.planned, func(p plan.Planned) bool { return p.RunID == v.RunID }) {
				o.held = append(o.held, v)
			}
		case strings.HasSuffix(m.Subject, ".finished"):
			v, err := wire.DecodeFinished(ctx, m.Decode)
			if err == nil && (v.EventID == ev.EventID || v.Answers(ev.RequestID)) {
				o.finished = append(o.finished, v)
				o.finishedAt = stored
			}
		case strings.HasSuffix(m.Subject, ".rejected"):
			v, err := wire.DecodeRejected(ctx, m.Decode)
			if err == nil && (v.EventID == ev.EventID || v.Answers(ev.RequestID)) {
				o.rejected = append(o.rejected, v)
			}
		}
		if cond(o) {
			cancel()
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("follow plan events: %v", err)
	}
	if !cond(o) {
		e.t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
	return o
}

// wait waits until the event's plan is finished or rejected.
func (e *env) wait(ev event.RepoChanged, timeout time.Duration) outcome {
	e.t.Helper()
	return e.await(ev, timeout, "the plan for "+ev.EventID+" to finish", outcome.done)
}

// diff announces a dry run of a repository and returns its plan.
func (e *env) diff(files repoFiles) plan.Plan {
	e.t.Helper()
	o := e.wait(e.announce(files, true), 2*time.Minute)
	if len(o.rejected) > 0 {
		e.t.Fatalf("diff rejected: %s", o.rejected[0].Rejection.Diagnostics)
	}
	return o.planned[0].Plan
}

// owned reads the ownership inventory of the test cluster, by vmid.
func (e *env) owned() map[int]wire.OwnedGuest {
	e.t.Helper()
	return testkit.Owned(e.t, testContext(e.t), e.bus, cluster)
}

// liveFingerprint is the identity fingerprint of a live guest, as ProxOps computes it.
func (e *env) liveFingerprint(vmid int) string {
	_, kind, ok := e.sim.NodeOf(vmid)
	if !ok {
		return ""
	}
	cfg, _ := e.sim.Config(vmid)
	g := inventory.Guest{VMID: vmid, Type: inventory.GuestType(kind)}
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		g.Config = append(g.Config, inventory.Entry{Key: k, Value: cfg[k], HasValue: true})
	}
	return inventory.Fingerprint(g)
}

// guestWrites are the requests that create or remove a guest: POST create and clone, DELETE guest.
func isCreate(r pvesim.RequestLogEntry) bool {
	return r.Method == "POST" && (r.Template == "/nodes/{node}/qemu" || r.Template == "/nodes/{node}/lxc")
}

func isClone(r pvesim.RequestLogEntry) bool {
	return r.Method == "POST" && (r.Template == "/nodes/{node}/qemu/{vmid}/clone" || r.Template == "/nodes/{node}/lxc/{vmid}/clone")
}

func isGuestDelete(r pvesim.RequestLogEntry) bool {
	return r.Method == "DELETE" && (r.Template == "/nodes/{node}/qemu/{vmid}" || r.Template == "/nodes/{node}/lxc/{vmid}")
}

func isDownload(r pvesim.RequestLogEntry) bool {
	return r.Method == "POST" && r.Template == "/nodes/{node}/storage/{storage}/download-url"
}

// madeVMID is the vmid a create or clone request makes.
func madeVMID(r pvesim.RequestLogEntry) string {
	if isClone(r) {
		return r.Params["newid"]
	}
	return r.Params["vmid"]
}
