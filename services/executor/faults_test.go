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
	"github.com/proxops/proxops/internal/testkit"
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
			return &pvesim.Fault{Status: 596, Message: "Broken pipe"}
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
	// The result is published before the dead letter is written: wait for it.
	dlq, _ := bus.DLQSubject(cluster, "pve1")
	var m *bus.Message
	testkit.Eventually(t, 20*time.Second, "the dead letter", func() bool {
		var err error
		m, err = e.bus.LastMessage(testContext(t), bus.StreamDLQ, dlq)
		return err == nil
	})
	if m.Header.Get(bus.HeaderDeadLetterReason) == "" {
		t.Errorf("dead letter without a reason: %v", m.Header)
	}
	testkit.Eventually(t, 10*time.Second, "work queue drained", func() bool {
		s, err := e.bus.JetStream().Stream(testContext(t), bus.StreamOps)
		return err == nil && s.CachedInfo().State.Msgs == 0
	})
}

// A guest locked by a long PVE job (a backup) is waited on with backoff within one delivery, and the
// operation proceeds once the lock is gone.
func TestLockedGuestIsWaitedOnWithoutSpendingDeliveries(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	cfg := e.config()
	cfg.MaxDeliver = 2
	cfg.LockWait = time.Minute
	e.start(cfg)
	if err := e.sim.LockFor(100, "backup", 4*time.Second); err != nil {
		t.Fatal(err)
	}
	op := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure, Values: kvs("cores", "4")})
	r := e.mustSucceed(op)
	if r.Attempt != 1 {
		t.Fatalf("the lock wait spent deliveries: attempt %d", r.Attempt)
	}
	waits := countWhere(e.results(), func(r plan.Result) bool {
		return r.OpID == op.ID && r.Status == plan.StatusProgress && strings.Contains(r.Message, "locked (backup)")
	})
	refused := 0
	for _, req := range e.sim.Requests() {
		if req.Method == "POST" && req.Template == "/nodes/{node}/qemu/{vmid}/config" && req.Status == 500 {
			refused++
		}
	}
	if waits < 2 || refused < 2 {
		t.Errorf("%d waits reported, %d writes refused while locked: want several", waits, refused)
	}
	if conf, _ := e.sim.Config(100); conf["cores"] != "4" || conf["lock"] != "" {
		t.Fatalf("config %v", conf)
	}
}

// With a lock wait shorter than the job holding the guest, the operation fails naming the lock, without
// spending more deliveries and without a dead letter.
func TestLockOutlastingTheLockWaitFailsNamingTheLock(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	cfg := e.config()
	cfg.LockWait = 400 * time.Millisecond
	e.start(cfg)
	if err := e.sim.LockFor(100, "backup", time.Minute); err != nil {
		t.Fatal(err)
	}
	op := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure, Values: kvs("cores", "4")})
	r := e.final(op, 30*time.Second)
	if r.Status != plan.StatusFailed || r.Attempt != 1 || !strings.Contains(r.Message, "locked (backup)") || !strings.Contains(r.Message, "lock-wait") {
		t.Fatalf("result %+v", r)
	}
	if conf, _ := e.sim.Config(100); conf["cores"] != "2" {
		t.Fatalf("config changed under the lock: %v", conf)
	}
	dlq, _ := bus.DLQSubject(cluster, "pve1")
	if _, err := e.bus.LastMessage(testContext(t), bus.StreamDLQ, dlq); err == nil {
		t.Fatal("a lock wait that ran out was dead-lettered")
	}
}

// A config file lock (flock) held by another PVE worker makes writes fail with "can't lock file … got
// timeout"; the executor waits within the delivery and succeeds once the holder lets go.
func TestConfigFileLockContentionEndsOnceReleased(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	spec.LockTimeouts = map[string]pvesim.Duration{"default": pvesim.Duration(100 * time.Millisecond)}
	e := newEnv(t, spec)
	cfg := e.config()
	cfg.LockWait = time.Minute
	e.start(cfg)
	release, err := e.sim.HoldFlock("qemu", 100)
	if err != nil {
		t.Fatal(err)
	}
	op := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure, Values: kvs("memory", "3072")})
	testkit.Eventually(t, 30*time.Second, "writes refused for the held flock", func() bool {
		n := 0
		for _, r := range e.sim.Requests() {
			if r.Method == "POST" && r.Template == "/nodes/{node}/qemu/{vmid}/config" && r.Status == 500 {
				n++
			}
		}
		return n >= 2
	})
	if conf, _ := e.sim.Config(100); conf["memory"] != "2048" {
		t.Fatalf("written under a held flock: %v", conf)
	}
	release()
	r := e.mustSucceed(op)
	if r.Attempt != 1 {
		t.Fatalf("flock contention spent deliveries: attempt %d", r.Attempt)
	}
	if conf, _ := e.sim.Config(100); conf["memory"] != "3072" {
		t.Fatalf("config %v", conf)
	}
}

// Two replicas of a node (in-process) receive two operations for the same guest: the second waits for the
// first, although they run in different replicas.
func TestOneOperationPerGuestHoldsAcrossReplicas(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmstart": pvesim.Duration(2 * time.Second)}
	e := newEnv(t, spec)
	one := e.config()
	one.Replica, one.Concurrency, one.GuardTTL = "r1", 1, 20*time.Second
	e.start(one)
	start := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionStart})
	testkit.Eventually(t, 30*time.Second, "r1 to start the guest", func() bool {
		return e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/status/start") == 1
	})
	// r1 works on one operation at a time, so r2 is the one that receives the next (r2 raises the node's
	// bound to two operations at once).
	two := e.config()
	two.Replica, two.Concurrency, two.GuardTTL = "r2", 2, 20*time.Second
	e.start(two)
	configure := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: kvs("description", "second")})
	rs := e.mustSucceed(start)
	rc := e.mustSucceed(configure)
	if rs.Executor != "r1" || rc.Executor != "r2" {
		t.Fatalf("executors: start on %s, configure on %s", rs.Executor, rc.Executor)
	}
	waited := countWhere(e.results(), func(r plan.Result) bool {
		return r.OpID == configure.ID && r.Executor == "r2" && strings.Contains(r.Message, "busy with start")
	})
	if waited == 0 {
		t.Error("r2 did not report waiting for the guest")
	}
	for _, req := range e.sim.Requests() {
		if req.Method == "POST" && req.Template == "/nodes/{node}/qemu/{vmid}/config" && req.Time.Before(rs.At) {
			t.Fatalf("the configure reached PVE at %s, before the start finished at %s", req.Time, rs.At)
		}
	}
	// The guard is released: nothing holds the guest any more.
	kv, err := e.bus.JetStream().KeyValue(testContext(t), bus.BucketOps)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the guard to be released", func() bool {
		_, err := kv.Get(testContext(t), "guard."+cluster+".pve1.100")
		return err != nil
	})
}
