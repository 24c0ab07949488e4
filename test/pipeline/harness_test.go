package pipeline_test

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
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

const (
	cluster = "lab"
	// leaseTTL is short so a takeover after a planner dies is quick.
	leaseTTL = 2 * time.Second
)

// env is a real NATS server (listening on loopback, so processes can join), provisioned, and the PVE
// simulator behind a loopback HTTP server.
type env struct {
	t      testing.TB
	server *bus.Server
	bus    *bus.Bus
	sim    *pvesim.Sim
	srv    *httptest.Server
	seq    int
}

func newEnv(t testing.TB, spec pvesim.Spec) *env {
	t.Helper()
	return newEnvUsers(t, spec, nil)
}

// newEnvUsers is newEnv with per-service NATS users (a deployment's permissions).
func newEnvUsers(t testing.TB, spec pvesim.Spec, users []bus.User) *env {
	t.Helper()
	ctx := testContext(t)
	server, err := bus.StartServer(ctx, bus.ServerConfig{Dir: t.TempDir(), Listen: true, Users: users})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(server.Shutdown)
	b, err := server.Connect(bus.Options{})
	if err != nil {
		t.Fatalf("connect nats: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if _, err := b.Provision(ctx, bus.ProvisionConfig{LeaseTTL: leaseTTL}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if spec.TaskDurations == nil {
		spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond)}
	}
	spec.Seed = 5
	sim, err := pvesim.New(spec)
	if err != nil {
		t.Fatalf("simulator: %v", err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	return &env{t: t, server: server, bus: b, sim: sim, srv: srv}
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// connect opens another in-process connection, as a separate service would have.
func (e *env) connect() *bus.Bus {
	e.t.Helper()
	b, err := e.server.Connect(bus.Options{})
	if err != nil {
		e.t.Fatalf("connect: %v", err)
	}
	e.t.Cleanup(func() { _ = b.Close() })
	return b
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("PROXOPS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// plannerConfig is an in-process planner with short timings.
func (e *env) plannerConfig(name string) planner.Config {
	return planner.Config{Name: name, Bus: e.connect(), Keys: &secrets.AgeKeys{}, LeaseTTL: leaseTTL, Signer: testkit.PlannerKey(e.t),
		ObserveTimeout: 10 * time.Second, SweepInterval: 300 * time.Millisecond, Tick: 50 * time.Millisecond,
		StaleResult: 3 * time.Second, Logger: testLogger(e.t).With("planner", name)}
}

// startPlanner runs a planner until the returned stop is called or the test ends.
func (e *env) startPlanner(cfg planner.Config) (stop func()) {
	e.t.Helper()
	return e.run("planner "+cfg.Name, func(ctx context.Context) error { return planner.Run(ctx, cfg) })
}

// startExecutors runs one executor per node of the test cluster.
func (e *env) startExecutors(nodes ...string) {
	e.t.Helper()
	e.startExecutorsOf(cluster, nodes...)
}

// startExecutorOn runs the test cluster's executor of a node on a given connection.
func (e *env) startExecutorOn(b *bus.Bus, n string) {
	e.t.Helper()
	e.startExecutor(cluster, n, b)
}

// startExecutorsOf runs one executor per node of a cluster.
func (e *env) startExecutorsOf(cluster string, nodes ...string) {
	e.t.Helper()
	for _, n := range nodes {
		e.startExecutor(cluster, n, e.connect())
	}
}

// startExecutor runs a cluster's executor of a node on a connection; opts adjust its configuration.
func (e *env) startExecutor(cluster, n string, b *bus.Bus, opts ...func(*executor.Config)) {
	e.t.Helper()
	cfg := executor.Config{
		Cluster: cluster, Node: n, Replica: "exec-" + n, Bus: b,
		PVE: pve.Config{BaseURL: e.srv.URL, TokenID: pvesim.DefaultRootTokenID, TokenSecret: pvesim.DefaultRootTokenSecret,
			TaskPollMin: 2 * time.Millisecond, TaskPollMax: 20 * time.Millisecond, ReadBackoff: time.Millisecond},
		AckWait: 5 * time.Second, RetryBackoff: 20 * time.Millisecond, ShutdownGrace: time.Second,
		TrustedPlannerKeys: []string{testkit.PlannerKey(e.t).PublicKey()},
		Logger:             testLogger(e.t).With("executor", n),
	}
	for _, o := range opts {
		o(&cfg)
	}
	e.run("executor "+n, func(ctx context.Context) error { return executor.Run(ctx, cfg) })
	durable, _ := bus.ExecutorConsumer(cluster, n)
	testkit.Eventually(e.t, 20*time.Second, "executor consumer of "+n, func() bool {
		_, err := e.bus.JetStream().Consumer(testContext(e.t), bus.StreamOps, durable)
		return err == nil
	})
}

func (e *env) run(what string, fn func(context.Context) error) (stop func()) {
	return testkit.RunService(e.t, what, fn)
}

// repoFiles is a repository as path → content; baseURL is filled into the cluster config.
type repoFiles map[string]string

// lab is the cluster configuration of the test cluster, on every simulated node.
func (e *env) lab(extra string) string {
	return fmt.Sprintf("pve:\n  clusters:\n    lab:\n      base-url: %s\n      nodes: [pve1, pve2, pve3]\n%s", e.srv.URL, extra)
}

// readRepo reads a repository from a directory.
func readRepo(t testing.TB, dir string) repoFiles {
	t.Helper()
	files := repoFiles{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// startAsServiceUsers starts the executors of pve1, pve2 and pve3 and a planner named name, each connected
// as its own deployment user of the env's server (password "pw-<user>"), with API calls bounded by
// apiTimeout: a call the user may not make shows up as that timeout.
func (e *env) startAsServiceUsers(name string, apiTimeout time.Duration) {
	e.t.Helper()
	as := func(user string) *bus.Bus {
		b, err := e.server.ConnectUser(user, "pw-"+user, bus.Options{APITimeout: apiTimeout})
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { _ = b.Close() })
		return b
	}
	for _, n := range []string{"pve1", "pve2", "pve3"} {
		user, _ := bus.ExecutorUser(cluster, n)
		e.startExecutorOn(as(user), n)
	}
	cfg := e.plannerConfig(name)
	cfg.Bus = as(string(bus.RolePlanner))
	e.startPlanner(cfg)
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

// announce publishes a RepoChanged for a repository, as the watcher would.
func (e *env) announce(files repoFiles, dryRun bool, opts ...func(*event.RepoChanged)) event.RepoChanged {
	e.t.Helper()
	e.seq++
	tree := e.snapshot(files)
	ev := event.RepoChanged{Repo: "/srv/ops", Branch: "main", Commit: fmt.Sprintf("%040d", e.seq), Tree: tree,
		Trigger: event.TriggerManual, EventID: fmt.Sprintf("/srv/ops@%d#manual-%d", e.seq, e.seq), DryRun: dryRun,
		RequestID: fmt.Sprintf("req-%d", e.seq)}
	for _, o := range opts {
		o(&ev)
	}
	m, err := wire.RepoChangedToProto(ev)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.bus.Publish(testContext(e.t), bus.SubjectRepoChanged, m, bus.WithMsgID(ev.EventID)); err != nil {
		e.t.Fatalf("publish repo changed: %v", err)
	}
	return ev
}

// outcome is what the planners published for one event of the test cluster.
type outcome struct {
	planned  []plan.Planned
	held     []plan.Held
	finished []plan.FinishedRun
	rejected []plan.Rejected
}

func (o outcome) done() bool { return len(o.finished) > 0 || len(o.rejected) > 0 }

func (o outcome) last() plan.FinishedRun { return o.finished[len(o.finished)-1] }

// events reads the test cluster's plan events of an event id.
func (e *env) events(eventID string) outcome {
	e.t.Helper()
	return e.eventsOf(cluster, eventID)
}

// eventsOf reads a cluster's plan events of an event id.
func (e *env) eventsOf(cluster, eventID string) outcome {
	e.t.Helper()
	filter, _ := bus.PlanFilter(cluster)
	var o outcome
	ctx := testContext(e.t)
	err := e.bus.ReadStream(ctx, bus.StreamPlans, filter, 0, func(m *bus.Message) error {
		switch {
		case strings.HasSuffix(m.Subject, ".planned"):
			v, err := wire.DecodePlanned(ctx, m.Decode)
			if err == nil && v.EventID == eventID {
				o.planned = append(o.planned, v)
			}
			return err
		case strings.HasSuffix(m.Subject, ".held"):
			v, err := wire.DecodeHeld(ctx, m.Decode)
			if err == nil && slices.ContainsFunc(o.planned, func(p plan.Planned) bool { return p.RunID == v.RunID }) {
				o.held = append(o.held, v)
			}
			return err
		case strings.HasSuffix(m.Subject, ".finished"):
			v, err := wire.DecodeFinished(ctx, m.Decode)
			if err == nil && v.EventID == eventID {
				o.finished = append(o.finished, v)
			}
			return err
		case strings.HasSuffix(m.Subject, ".rejected"):
			v, err := wire.DecodeRejected(ctx, m.Decode)
			if err == nil && v.EventID == eventID {
				o.rejected = append(o.rejected, v)
			}
			return err
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("read plan events: %v", err)
	}
	return o
}

// wait waits until the event's plan of the test cluster is finished or rejected.
func (e *env) wait(ev event.RepoChanged, timeout time.Duration) outcome {
	e.t.Helper()
	return e.waitOf(cluster, ev, timeout)
}

// waitOf waits until the event's plan of a cluster is finished or rejected.
func (e *env) waitOf(cluster string, ev event.RepoChanged, timeout time.Duration) outcome {
	e.t.Helper()
	var o outcome
	testkit.Eventually(e.t, timeout, "the plan of "+cluster+" for "+ev.EventID+" to finish", func() bool {
		o = e.eventsOf(cluster, ev.EventID)
		return o.done()
	})
	return o
}

// apply announces a repository and waits for its run to finish; it fails the test unless the run succeeded.
func (e *env) apply(files repoFiles) outcome {
	e.t.Helper()
	ev := e.announce(files, false)
	o := e.wait(ev, time.Minute)
	if len(o.rejected) > 0 {
		e.t.Fatalf("plan rejected: %s", o.rejected[0].Rejection.Diagnostics)
	}
	if f := o.last(); f.Outcome != plan.OutcomeSucceeded {
		e.t.Fatalf("run %s: %s: %+v", f.RunID, f.Outcome, f.Operations)
	}
	return o
}

// owned reads the ownership inventory of the test cluster, by vmid.
func (e *env) owned() map[int]wire.OwnedGuest {
	e.t.Helper()
	return testkit.Owned(e.t, testContext(e.t), e.bus, cluster)
}

// writes counts the requests that change PVE.
func (e *env) writes() int {
	n := 0
	for _, r := range e.sim.Requests() {
		if r.Method != "GET" {
			n++
		}
	}
	return n
}

// creates counts guest creations and clones.
func (e *env) creates() int {
	n := 0
	for k, v := range e.sim.Counts() {
		if k == "POST /nodes/{node}/qemu" || k == "POST /nodes/{node}/lxc" || strings.HasSuffix(k, "/clone") {
			n += v
		}
	}
	return n
}

func vm(name string, vmid int, node string) string {
	return fmt.Sprintf(`apiVersion: proxops/v1alpha1
kind: VM
metadata: {name: %s}
spec:
  node: %s
  vmid: %d
  memory: 512MiB
  cpu: {type: host, cores: 1}
  disks:
    - {storage: local-lvm, size: 4GiB}
  networks:
    - {bridge: vmbr0}
`, name, node, vmid)
}

// vms is a repository of the test cluster with the given VMs (name → vmid), all on pve1..pve3 in turn.
func (e *env) vms(specs map[string]int) repoFiles {
	files := repoFiles{"clusters/lab/config.yaml": e.lab("")}
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	var list []string
	for i, n := range names {
		files["vm/lab/"+n+".yaml"] = vm(n, specs[n], fmt.Sprintf("pve%d", i%3+1))
		list = append(list, "  - ../../vm/lab/"+n+".yaml")
	}
	files["clusters/lab/resources.yaml"] = "resources:\n" + strings.Join(list, "\n") + "\n"
	if len(list) == 0 {
		files["clusters/lab/resources.yaml"] = "resources: []\n"
	}
	return files
}

// handClone clones a guest by hand through the PVE API, as an operator would (the clone keeps its tags).
func (e *env) handClone(node string, vmid, newID int) {
	e.t.Helper()
	e.post(fmt.Sprintf("/nodes/%s/qemu/%d/clone", node, vmid), url.Values{"newid": {strconv.Itoa(newID)}, "full": {"1"}, "name": {"hand-clone"}})
	testkit.Eventually(e.t, 30*time.Second, "the hand-made clone", func() bool {
		cfg, ok := e.sim.Config(newID)
		return ok && cfg["lock"] == ""
	})
}

// handMove migrates a running VM to another node as someone would by hand, outside ProxOps.
func (e *env) handMove(node string, vmid int, target string) {
	e.t.Helper()
	e.post(fmt.Sprintf("/nodes/%s/qemu/%d/migrate", node, vmid), url.Values{"target": {target}, "online": {"1"}})
	testkit.Eventually(e.t, 30*time.Second, "the hand move", func() bool {
		n, _, ok := e.sim.NodeOf(vmid)
		cfg, _ := e.sim.Config(vmid)
		return ok && n == target && cfg["lock"] == ""
	})
}

// post sends a write to the simulator as root, outside ProxOps.
func (e *env) post(path string, form url.Values) {
	e.t.Helper()
	e.send(http.MethodPost, path, form)
}

// send sends a request to the simulator as root, outside ProxOps.
func (e *env) send(method, path string, form url.Values) {
	e.t.Helper()
	if err := e.sim.AdminRequest(method, path, form); err != nil {
		e.t.Fatal(err)
	}
}

// chain makes each named VM of a repository depend on the one before it (proxops/depends-on).
func chain(files repoFiles, names ...string) {
	for i := 1; i < len(names); i++ {
		p := "vm/lab/" + names[i] + ".yaml"
		files[p] = strings.Replace(files[p], "metadata: {name: "+names[i]+"}",
			"metadata:\n  name: "+names[i]+"\n  annotations: {proxops/depends-on: \"VM:"+names[i-1]+"\"}", 1)
	}
}
