package executor_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// taskGauge counts the PVE tasks running at once in the simulator; each task is held for hold before its
// work, so overlapping operations are seen overlapping.
type taskGauge struct {
	running, peak atomic.Int32
	done          atomic.Int32
}

func (g *taskGauge) hook(hold time.Duration) pvesim.TaskHook {
	return func(pvesim.TaskInfo) error {
		n := g.running.Add(1)
		for {
			p := g.peak.Load()
			if n <= p || g.peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(hold)
		g.running.Add(-1)
		g.done.Add(1)
		return nil
	}
}

// executor.concurrency bounds the node, not each replica: two replicas that could each run four
// operations never run more than four on the node together.
func TestConcurrencyBoundsTheNodeAcrossReplicas(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	var g taskGauge
	e.sim.OnTask(g.hook(300 * time.Millisecond))
	for _, name := range []string{"r1", "r2"} {
		cfg := e.config()
		cfg.Replica, cfg.Concurrency = name, 4
		e.start(cfg)
	}
	const n = 16
	var ops []plan.Operation
	for i := range n {
		ops = append(ops, e.dispatch(plan.Operation{Node: "pve1", VMID: 200 + i, GuestType: inventory.QEMU,
			Action: plan.ActionCreate, Values: kvs("name", "vm", "memory", "512", "tags", "proxops"),
			Precondition: plan.Precondition{ExpectAbsent: true}}))
	}
	var wg sync.WaitGroup
	executors := map[string]int{}
	var mu sync.Mutex
	for _, op := range ops {
		wg.Go(func() {
			r := e.final(op, time.Minute)
			mu.Lock()
			defer mu.Unlock()
			executors[r.Executor]++
			if r.Status != plan.StatusSucceeded {
				t.Errorf("%s: %s: %s", op.ID, r.Status, r.Message)
			}
		})
	}
	wg.Wait()
	t.Logf("peak %d", g.peak.Load())
	if got := g.done.Load(); got != n {
		t.Fatalf("%d tasks ran, want %d", got, n)
	}
	if peak := g.peak.Load(); peak > 4 {
		t.Fatalf("%d operations ran at once on the node, want at most executor.concurrency = 4", peak)
	} else if peak < 2 {
		t.Fatalf("at most %d operation ran at once: the node's operations were not run in parallel", peak)
	}
	if executors["r1"] == 0 || executors["r2"] == 0 {
		t.Errorf("operations per replica %v: want both replicas to work", executors)
	}
}

// Replicas that disagree: the node's bound follows the replica started last.
func TestNodeConcurrencyFollowsTheReplicaStartedLast(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	durable, _ := bus.ExecutorConsumer(cluster, "pve1")
	bound := func() int {
		c, err := e.bus.JetStream().Consumer(testContext(t), bus.StreamOps, durable)
		if err != nil {
			t.Fatal(err)
		}
		return c.CachedInfo().Config.MaxAckPending
	}
	for i, conc := range []int{4, 2, 6} {
		cfg := e.config()
		cfg.Replica, cfg.Concurrency = "r"+string(rune('1'+i)), conc
		e.start(cfg)
		testkit.Eventually(t, 20*time.Second, "the node's bound to follow the replica started last", func() bool {
			return bound() == conc
		})
	}
}
