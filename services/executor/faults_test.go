package executor_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
)

// Operations for another node or cluster, or for a repository endpoint that is not the executor's, are
// refused with a terminal result and never reach PVE.
func TestForeignOperationsAreRefused(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	e.start(e.config())
	e.sim.ResetLog()
	foreign := []plan.Operation{
		{Cluster: cluster, Node: "pve2", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionStart},
		{Cluster: "other", Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionStart},
	}
	for _, op := range foreign {
		op.RunID, op.ID = "run-foreign", "op-"+op.Cluster+"-"+op.Node
		op = e.dispatchTo("pve1", op)
		r := e.final(op, 20*time.Second)
		if r.Status != plan.StatusFailed || r.ErrorClass != plan.ErrorTerminal || !strings.Contains(r.Message, "refused") {
			t.Errorf("%s/%s: %+v", op.Cluster, op.Node, r)
		}
	}
	for _, req := range e.sim.Requests() {
		if req.Method != "GET" {
			t.Errorf("a refused operation reached PVE: %s %s", req.Method, req.Path)
		}
	}
	if e.sim.Running(100) {
		t.Fatal("guest 100 was started")
	}
}

func TestAnEndpointMismatchWithTheRepositoryIsRefused(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	cfg := e.config()
	cfg.OwnEndpoint = true
	cfg.RepoBaseURL = "https://pve.attacker.example:8006"
	e.start(cfg)
	op := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionStart})
	r := e.final(op, 20*time.Second)
	if r.Status != plan.StatusFailed || !strings.Contains(r.Message, "base-url") {
		t.Fatalf("result %+v", r)
	}
	if e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/status/start") != 0 {
		t.Fatal("the operation reached PVE")
	}
}

// An operation that keeps failing retryably is copied to PROXOPS_DLQ once it exhausts its deliveries,
// removed from the work queue, and still produces a failed result.
func TestExhaustedOperationGoesToTheDeadLetterStream(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	var writes atomic.Int32
	e.sim.Use(func(r pvesim.RequestInfo) *pvesim.Fault {
		if r.Method == "POST" && r.Template == "/nodes/{node}/qemu/{vmid}/config" {
			writes.Add(1)
			return &pvesim.Fault{Status: 500, Message: "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"}
		}
		return nil
	})
	cfg := e.config()
	cfg.MaxDeliver = 3
	e.start(cfg)
	op := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure, Values: kvs("cores", "4")})
	r := e.final(op, 30*time.Second)
	if r.Status != plan.StatusFailed || r.ErrorClass != plan.ErrorRetryable || r.Attempt != 3 {
		t.Fatalf("final result %+v", r)
	}
	if n := writes.Load(); n != 3 {
		t.Errorf("%d config writes, want one per delivery (3)", n)
	}
	dlq, _ := bus.DLQSubject(cluster, "pve1")
	m, err := e.bus.LastMessage(testContext(t), bus.StreamDLQ, dlq)
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	if m.Header.Get(bus.HeaderDeadLetterReason) == "" {
		t.Errorf("dead letter without a reason: %v", m.Header)
	}
	eventually(t, 10*time.Second, "work queue drained", func() bool {
		s, err := e.bus.JetStream().Stream(testContext(t), bus.StreamOps)
		return err == nil && s.CachedInfo().State.Msgs == 0
	})
}

// A guest locked by a long PVE job is waited on within one delivery, and the operation completes once the
// lock is gone.
func TestLockedGuestIsWaitedOnWithoutSpendingDeliveries(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM + "lock: backup\n"}}
	e := newEnv(t, spec)
	cfg := e.config()
	cfg.MaxDeliver = 2
	cfg.LockWait = time.Minute
	e.start(cfg)
	op := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure, Values: kvs("cores", "4")})
	eventually(t, 20*time.Second, "several attempts on the locked guest", func() bool {
		return countWhere(e.results(), func(r plan.Result) bool {
			return r.OpID == op.ID && r.Status == plan.StatusProgress && strings.Contains(r.Message, "locked (backup)")
		}) >= 3
	})
	if err := e.sim.DeleteConfig(100, "lock"); err != nil {
		t.Fatal(err)
	}
	r := e.mustSucceed(op)
	if r.Attempt != 1 {
		t.Fatalf("the lock wait spent deliveries: attempt %d", r.Attempt)
	}
	if conf, _ := e.sim.Config(100); conf["cores"] != "4" {
		t.Fatalf("config %v", conf)
	}
}

// With the simulator injecting lock timeouts and 5xx answers, operations still succeed within their retry
// budget, and no create is sent twice.
func TestOperationsSucceedThroughInjectedFaults(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	var n atomic.Int32
	e.sim.Use(func(r pvesim.RequestInfo) *pvesim.Fault {
		i := n.Add(1)
		switch {
		case r.Method == "POST" && r.Template == "/nodes/{node}/qemu" && i%3 == 0:
			return &pvesim.Fault{Status: 500, Message: "can't lock file '/var/lock/qemu-server/lock-" + r.Params["vmid"] + ".conf' - got timeout"}
		case r.Method == "GET" && i%4 == 0:
			return &pvesim.Fault{Status: 503, Message: "Service Unavailable"}
		case r.Method == "GET" && i%7 == 0:
			return &pvesim.Fault{Status: 596, Message: "Connection timed out"}
		}
		return nil
	})
	cfg := e.config()
	cfg.MaxDeliver = 8
	e.start(cfg)
	var ops []plan.Operation
	for i := range 8 {
		ops = append(ops, e.dispatch(plan.Operation{Node: "pve1", VMID: 200 + i, GuestType: inventory.QEMU, Action: plan.ActionCreate,
			Values: kvs("memory", "512"), Precondition: plan.Precondition{ExpectAbsent: true}}))
	}
	for _, op := range ops {
		e.mustSucceed(op)
		if !e.sim.Exists(op.VMID) {
			t.Errorf("guest %d missing", op.VMID)
		}
	}
	created := map[string]int{}
	for _, r := range e.sim.Requests() {
		if r.Method == "POST" && r.Template == "/nodes/{node}/qemu" && r.Status == 200 {
			created[r.Params["vmid"]]++
		}
	}
	for vmid, c := range created {
		if c != 1 {
			t.Errorf("guest %s created %d times", vmid, c)
		}
	}
}
