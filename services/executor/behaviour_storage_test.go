package executor_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
)

// storageGauge counts the clone tasks running at once in the simulator, per target storage and in all. A
// clone task's id is its source guest, so each source clones into one storage only and names it.
type storageGauge struct {
	mu               sync.Mutex
	storageOf        map[string]string
	running, peak    map[string]int
	total, totalPeak int
	done             int
}

func (g *storageGauge) hook(hold time.Duration) pvesim.TaskHook {
	return func(ti pvesim.TaskInfo) error {
		if ti.Type != "qmclone" {
			return nil
		}
		g.mu.Lock()
		st := g.storageOf[ti.ID]
		g.running[st]++
		g.peak[st] = max(g.peak[st], g.running[st])
		g.total++
		g.totalPeak = max(g.totalPeak, g.total)
		g.mu.Unlock()
		time.Sleep(hold)
		g.mu.Lock()
		g.running[st]--
		g.total--
		g.done++
		g.mu.Unlock()
		return nil
	}
}

// executor.storage-concurrency (default 1) bounds the clones writing to one storage: clones into the same
// storage never run at once on PVE, while clones into different storages do.
func TestClonesIntoOneStorageRunOneAtATimeWhileOtherStoragesProceed(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM},
		{VMID: 101, Type: "qemu", Node: "pve1", Config: strings.ReplaceAll(seedVM, "vm-100-", "vm-101-")},
	}
	e := newEnv(t, spec)
	g := &storageGauge{storageOf: map[string]string{"100": "local-lvm", "101": "local"},
		running: map[string]int{}, peak: map[string]int{}}
	e.sim.OnTask(g.hook(300 * time.Millisecond))
	cfg := e.config()
	cfg.Concurrency = 6 // the node bound is not what limits here; StorageConcurrency stays at its default
	e.start(cfg)

	var ops []plan.Operation
	for i := range 3 {
		for _, src := range []struct {
			vmid    int
			storage string
		}{{100, "local-lvm"}, {101, "local"}} {
			vmid := 200 + 10*(src.vmid-100) + i
			ops = append(ops, e.dispatch(plan.Operation{Node: "pve1", VMID: vmid, GuestType: inventory.QEMU,
				Action: plan.ActionClone, SourceVMID: src.vmid, Storage: src.storage,
				Params: kvs("name", fmt.Sprintf("copy-%d", vmid)), Values: kvs("tags", "proxops"),
				Precondition: plan.Precondition{ExpectAbsent: true}}))
		}
	}
	for _, op := range ops {
		e.mustSucceed(op)
		if !e.sim.Exists(op.VMID) {
			t.Errorf("clone %d does not exist after its success", op.VMID)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	t.Logf("peak per storage %v, peak in all %d", g.peak, g.totalPeak)
	if g.done != len(ops) {
		t.Fatalf("%d clone tasks ran, want %d", g.done, len(ops))
	}
	for _, st := range []string{"local", "local-lvm"} {
		if g.peak[st] != 1 {
			t.Errorf("%d clones into %s ran at once, want 1 (storage-concurrency 1)", g.peak[st], st)
		}
	}
	if g.totalPeak < 2 {
		t.Errorf("at most %d clone ran at once: clones into different storages were serialised too", g.totalPeak)
	}
}
