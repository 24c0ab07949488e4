package executor_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
)

const createPath = "/nodes/{node}/qemu"

// failCreateTasks makes every qmcreate task fail with msg; when passing is set, the faults are cleared as
// the second create request arrives, so only the first task fails.
func failCreateTasks(t *testing.T, e *env, msg string, passing bool) {
	t.Helper()
	if err := e.sim.SetFaults(pvesim.Faults{TaskFailureRate: 1, TaskTypes: []string{"qmcreate"}, TaskFailureMessage: msg}); err != nil {
		t.Fatal(err)
	}
	var creates atomic.Int32
	e.sim.Use(func(r pvesim.RequestInfo) *pvesim.Fault {
		if passing && r.Method == "POST" && r.Template == createPath && creates.Add(1) == 2 {
			e.sim.ClearFaults()
		}
		return nil
	})
}

// A create whose task fails for a reason PVE does not explain is tried once more in place: the executor
// reads the vmid again before it sends the second create, says so in a progress result, and succeeds.
func TestACreateWhoseTaskFailedIsTriedOnceMoreAfterReadingPVE(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	failCreateTasks(t, e, "unable to create VM 101 - worker exited unexpectedly", true)
	e.start(e.config())
	op := e.dispatch(createOp(101))
	r := e.mustSucceed(op)
	if r.Attempt != 1 {
		t.Errorf("the retry spent a delivery: attempt %d", r.Attempt)
	}
	if !e.sim.Exists(101) {
		t.Fatal("guest 101 was not created")
	}
	if n := e.creates(); n != 2 {
		t.Fatalf("%d create requests, want 2", n)
	}
	retried := countWhere(e.results(), func(r plan.Result) bool {
		return r.OpID == op.ID && r.Status == plan.StatusProgress && strings.HasPrefix(r.Message, "retrying after a failed task: ") &&
			strings.Contains(r.Message, "worker exited unexpectedly") && r.UPID != ""
	})
	if retried != 1 {
		t.Errorf("%d progress results announce the retry, want 1", retried)
	}
	// Between the two creates the executor looked at the vmid again.
	var first, second = -1, -1
	log := e.sim.Requests()
	for i, req := range log {
		if req.Method == "POST" && req.Template == createPath {
			if first < 0 {
				first = i
			} else {
				second = i
			}
		}
	}
	read := false
	for _, req := range log[first+1 : second] {
		if req.Method == "GET" && req.Template == "/cluster/nextid" && req.Params["vmid"] == "101" {
			read = true
		}
	}
	if !read {
		t.Fatal("the second create was sent without checking that vmid 101 is free")
	}
}

// A task that fails again on its retry is reported failed with its exit status, after two tasks in all.
func TestATaskThatFailsAgainIsReportedAfterOneRetry(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	failCreateTasks(t, e, "storage 'local-lvm' is full", false)
	e.start(e.config())
	r := e.final(e.dispatch(createOp(101)), 30*time.Second)
	if r.Status != plan.StatusFailed || r.ErrorClass != plan.ErrorTerminal || !strings.Contains(r.Message, "storage 'local-lvm' is full") {
		t.Fatalf("result %+v", r)
	}
	if n := e.creates(); n != 2 {
		t.Fatalf("%d create requests, want 2", n)
	}
	if e.sim.Exists(101) {
		t.Fatal("a failed create left guest 101 behind")
	}
}

// With task retries off, the first failed task is the operation's outcome.
func TestTaskRetriesCanBeTurnedOff(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	failCreateTasks(t, e, "worker exited unexpectedly", true)
	cfg := e.config()
	cfg.TaskRetries = -1
	e.start(cfg)
	r := e.final(e.dispatch(createOp(101)), 30*time.Second)
	if r.Status != plan.StatusFailed || !strings.Contains(r.Message, "worker exited unexpectedly") {
		t.Fatalf("result %+v", r)
	}
	if n := e.creates(); n != 1 {
		t.Fatalf("%d create requests, want 1", n)
	}
}

// A task whose failure PVE explains as final (a guest that ignored the shutdown request) is not retried.
func TestAShutdownTheGuestIgnoredIsNotRetried(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM, Running: true}}
	e := newEnv(t, spec)
	if err := e.sim.SetFaults(pvesim.Faults{TaskFailureRate: 1, TaskTypes: []string{"qmshutdown"},
		TaskFailureMessage: "VM quit/powerdown failed - got timeout"}); err != nil {
		t.Fatal(err)
	}
	e.start(e.config())
	r := e.final(e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionShutdown,
		Params: kvs("timeout", "10")}), 30*time.Second)
	if r.Status != plan.StatusFailed || !strings.Contains(r.Message, "quit/powerdown failed") {
		t.Fatalf("result %+v", r)
	}
	if n := e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/status/shutdown"); n != 1 {
		t.Fatalf("%d shutdown requests, want 1", n)
	}
}
