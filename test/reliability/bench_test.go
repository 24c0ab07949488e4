package reliability_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/executor"
)

// guestsRepo is a repository of n small VMs spread over the env's nodes, vmids from 1000.
func (e *env) guestsRepo(n int) repoFiles {
	files := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("g-%04d", i)
		files["vm/lab/"+name+".yaml"] = vmManifest(name, 1000+i, e.nodes[i%len(e.nodes)], 512)
	}
	return e.manifests("", files)
}

// timedDiff runs one diff (a dry run) and returns the time from the repository event to its Plan being
// stored; it fails unless the plan is empty. It follows the plan stream rather than polling it, so the
// measurement costs the system under test nothing.
func (e *env) timedDiff(repo repoFiles) time.Duration {
	e.t.Helper()
	filter, _ := bus.PlanFilter(cluster)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	from, err := e.bus.LastSequence(ctx, bus.StreamPlans, filter)
	if err != nil {
		e.t.Fatal(err)
	}
	e.seq++
	tree := e.snapshot(repo)
	ev := event.RepoChanged{Repo: "/srv/ops", Branch: "main", Commit: fmt.Sprintf("%040d", e.seq), Tree: tree,
		Trigger: event.TriggerManual, EventID: fmt.Sprintf("/srv/ops@%d#manual-%d-%d", e.seq, e.seq, time.Now().UnixNano()),
		DryRun: true, RequestID: fmt.Sprintf("req-%d", e.seq)}
	m, err := wire.RepoChangedToProto(ev)
	if err != nil {
		e.t.Fatal(err)
	}
	start := time.Now()
	if _, err := e.bus.Publish(ctx, bus.SubjectRepoChanged, m, bus.WithMsgID(ev.EventID)); err != nil {
		e.t.Fatal(err)
	}
	var planned *plan.Planned
	var rejected *plan.Rejected
	var at time.Time
	fctx, stop := context.WithCancel(ctx)
	err = e.bus.Follow(fctx, bus.StreamPlans, []string{filter}, from+1, func(m *bus.Message, stored time.Time) error {
		switch {
		case strings.HasSuffix(m.Subject, ".planned"):
			if v, err := wire.DecodePlanned(ctx, m.Decode); err == nil && v.EventID == ev.EventID {
				planned, at = &v, stored
				stop()
			}
		case strings.HasSuffix(m.Subject, ".rejected"):
			if v, err := wire.DecodeRejected(ctx, m.Decode); err == nil && v.EventID == ev.EventID {
				rejected = &v
				stop()
			}
		}
		return nil
	})
	stop()
	switch {
	case err != nil:
		e.t.Fatalf("follow plans: %v", err)
	case rejected != nil:
		e.t.Fatalf("diff rejected: %s", rejected.Rejection.Diagnostics)
	case planned == nil:
		e.t.Fatalf("no plan for %s", ev.EventID)
	case !planned.Plan.Empty():
		e.t.Fatalf("the converged diff has %d operations", len(planned.Plan.Operations))
	}
	return at.Sub(start)
}

// chainFloor is the latency floor of one observe round from the requests it sent: per node, the listings
// are sequential and the per-guest pending reads run concurrency at a time; nodes are observed in
// parallel. It returns the longest chain of sequential requests.
func chainFloor(log []pvesim.RequestLogEntry, concurrency int) int {
	lists, pending := map[string]int{}, map[string]int{}
	for _, r := range log {
		node := r.Params["node"]
		if r.Method != "GET" || node == "" {
			continue
		}
		if strings.HasSuffix(r.Template, "/pending") {
			pending[node]++
		} else {
			lists[node]++
		}
	}
	longest := 0
	for node, n := range lists {
		longest = max(longest, n+(pending[node]+concurrency-1)/concurrency)
	}
	return longest
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkConvergedDiff1000GuestsAt10msLatency is P3: a converged diff of 1,000 guests on 4 nodes through
// the pipeline (watcher event, planner, one executor per node observing over NATS) against the simulator
// answering every request after 10 ms. wall-ms is the median diff at the executors' default observe
// concurrency; floor-ms is the longest chain of sequential requests at that concurrency times 10 ms;
// c1-ms is the same diff with observe concurrency 1 (nodes still in parallel), seq-ms the same diff with PVE
// serving one request at a time (the fully sequential client), all measured in the same run. Targets:
// wall/floor ≤ 1.5, c1/wall and seq/wall ≥ 20.
func BenchmarkConvergedDiff1000GuestsAt10msLatency(b *testing.B) {
	const latency = 10 * time.Millisecond
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	e := newEnv(b, envConfig{Nodes: nodeNames(4), Spec: spec})
	stop := e.startExecutors(func(c *executor.Config) { c.Concurrency = 16 })
	e.startPlanner("bench")
	repo := e.guestsRepo(1000)
	o := e.wait(e.announce(repo, false), 10*time.Minute)
	if f := o.last(); f.Outcome != plan.OutcomeSucceeded || f.Succeeded != 1000 {
		b.Fatalf("creating the guests: %s, %d succeeded", f.Outcome, f.Succeeded)
	}
	if err := e.sim.SetFaults(pvesim.Faults{Latency: pvesim.Duration(latency)}); err != nil {
		b.Fatal(err)
	}
	measure := func(n int) (time.Duration, []pvesim.RequestLogEntry) {
		e.timedDiff(repo) // warm: the parsed tree is cached after the first plan of it
		var walls []time.Duration
		var log []pvesim.RequestLogEntry
		for range n {
			e.sim.ResetLog()
			walls = append(walls, e.timedDiff(repo))
			log = e.sim.Requests()
		}
		return median(walls), log
	}
	runs := max(b.N, 3)
	b.ResetTimer()
	wall, log := measure(runs)
	b.StopTimer()
	const defaultConcurrency = 8 // pve.Config's default ObserveConcurrency
	floor := time.Duration(chainFloor(log, defaultConcurrency)) * latency

	stop()
	stop = e.startExecutors(func(c *executor.Config) { c.Concurrency = 16; c.PVE.ObserveConcurrency = 1 })
	c1, c1log := measure(1)
	if got, want := chainFloor(c1log, 1), chainFloor(log, 1); got != want {
		b.Fatalf("the concurrency-1 diff sent other requests: chain %d, want %d", got, want)
	}
	stop()
	e.startExecutors(func(c *executor.Config) { c.Concurrency = 16 })
	if err := e.sim.SetFaults(pvesim.Faults{Latency: pvesim.Duration(latency), MaxConcurrent: 1}); err != nil {
		b.Fatal(err)
	}
	seq, _ := measure(1)

	b.ReportMetric(float64(wall.Microseconds())/1000, "wall-ms")
	b.ReportMetric(float64(floor.Microseconds())/1000, "floor-ms")
	b.ReportMetric(wall.Seconds()/floor.Seconds(), "wall/floor")
	b.ReportMetric(float64(c1.Microseconds())/1000, "c1-ms")
	b.ReportMetric(c1.Seconds()/wall.Seconds(), "c1/wall")
	b.ReportMetric(float64(seq.Microseconds())/1000, "seq-ms")
	b.ReportMetric(seq.Seconds()/wall.Seconds(), "seq/wall")
}

// fsyncRate measures this disk's synced small writes per second in dir: the floor SyncAlways works against.
func fsyncRate(b *testing.B, dir string) float64 {
	b.Helper()
	f, err := os.Create(filepath.Join(dir, "fsync-probe"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, 512)
	const n = 300
	start := time.Now()
	for range n {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return n / time.Since(start).Seconds()
}

// storeWrites is the number of records JetStream has written to its streams: every message appended (plan
// events, operations, results, inventories, KV and object store entries, delete markers) plus every message
// removed from a work queue by an acknowledgement (a tombstone record). With SyncAlways each is an fsync.
func storeWrites(b *testing.B, bs *bus.Bus) uint64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var total uint64
	lister := bs.JetStream().ListStreams(ctx)
	for info := range lister.Info() {
		total += info.State.LastSeq
		if info.Config.Retention == jetstream.WorkQueuePolicy {
			total += info.State.LastSeq - info.State.Msgs
		}
	}
	if err := lister.Err(); err != nil {
		b.Fatal(err)
	}
	return total
}

// BenchmarkPipelineThroughput is P7: operations dispatched by the planner, applied by the executors (one per
// node of 4, 16 at once each) against a simulator without latency or task time, and acknowledged with
// their results, with and without SyncAlways. ops/s runs from the Plan to the run's end (stream
// timestamps); writes/op are the JetStream records written per operation over the whole apply; the fsync
// floor, measured on the same disk in the same run, is fsyncs/s ÷ writes/op. Targets: SyncAlways ≥ 0.5× the
// floor; without it ≥ 1,000 operations/s.
func BenchmarkPipelineThroughput(b *testing.B) {
	const ops = 1000
	for _, mode := range []struct {
		name string
		sync bool
	}{{"sync-always", true}, {"default-sync", false}} {
		b.Run(mode.name, func(b *testing.B) {
			b.StopTimer()
			var rates, writes, floors, syncs, cpus []float64
			for range b.N {
				// A fresh system each time: the simulator's cost per create grows with the guests it holds.
				sc := newScope(b)
				spec := pvesim.DefaultSpec()
				spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
				e := newEnv(sc, envConfig{Nodes: nodeNames(4), Spec: spec, SyncAlways: mode.sync})
				fsyncs := fsyncRate(b, b.TempDir())
				e.startExecutors(func(c *executor.Config) { c.Concurrency = 16 })
				e.startPlanner("bench")
				repo := e.guestsRepo(ops)
				before := storeWrites(b, e.bus)
				cpu := processCPU(b)
				b.StartTimer()
				elapsed := e.timedApply(repo, ops)
				b.StopTimer()
				cpus = append(cpus, (processCPU(b)-cpu).Seconds()*1000/ops)
				w := float64(storeWrites(b, e.bus)-before) / ops
				rates = append(rates, ops/elapsed.Seconds())
				writes = append(writes, w)
				floors = append(floors, fsyncs/w)
				syncs = append(syncs, fsyncs)
				sc.close()
			}
			rate, w, floor := medianF(rates), medianF(writes), medianF(floors)
			b.ReportMetric(rate, "ops/s")
			b.ReportMetric(w, "writes/op")
			b.ReportMetric(medianF(syncs), "fsyncs/s")
			b.ReportMetric(floor, "floor-ops/s")
			b.ReportMetric(rate/floor, "ops/floor")
			b.ReportMetric(medianF(cpus), "cpu-ms/op")
		})
	}
}

// processCPU is the CPU time this process has used so far, user and system: the benchmark runs the whole
// pipeline (NATS server, planner, executors, simulator) in its process, so its CPU per operation holds
// when other work shares the machine and the wall time does not.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scope is a testing.TB whose cleanups run when close is called: one system per benchmark iteration,
// stopped before the next starts.
type scope struct {
	testing.TB
	cleanups []func()
}

func newScope(tb testing.TB) *scope { return &scope{TB: tb} }

func (s *scope) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

func (s *scope) close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
}

func medianF(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// timedApply applies a repository of ops creates and returns the time from its Plan to its run's end, by
// the stream's timestamps.
func (e *env) timedApply(repo repoFiles, ops int) time.Duration {
	e.t.Helper()
	ev := e.announce(repo, false)
	o := e.wait(ev, 10*time.Minute)
	if f := o.last(); f.Outcome != plan.OutcomeSucceeded || f.Succeeded != ops {
		for _, op := range f.Operations {
			if op.State == plan.OpFailed {
				e.t.Fatalf("apply: %s, %d succeeded; %s: %s", f.Outcome, f.Succeeded, op.ID, op.Message)
			}
		}
		e.t.Fatalf("apply: %s, %d succeeded", f.Outcome, f.Succeeded)
	}
	if o.plannedAt.IsZero() || o.finishedAt.IsZero() {
		e.t.Fatalf("plan event times: planned %v, finished %v", o.plannedAt, o.finishedAt)
	}
	return o.finishedAt.Sub(o.plannedAt)
}
