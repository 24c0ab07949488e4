package executor_test

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
)

// An operation whose every delivery hangs before anything is done, heartbeats included (a replica that
// dies or freezes on it each time), runs out of deliveries through the ack wait alone. It is still reported
// failed, once, recorded failed in its journal, dead-lettered and removed from the work queue: the plan
// waiting for it ends.
func TestOperationOutOfDeliveriesWithNoneSettledIsFailedAndDeadLettered(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	hang := make(chan struct{})
	var received atomic.Int32
	for _, name := range []string{"r1", "r2"} {
		cfg := e.config()
		cfg.Replica, cfg.MaxDeliver, cfg.AckWait = name, 2, 500*time.Millisecond
		cfg.Fault = func(point string) {
			if point == "received" {
				received.Add(1)
				<-hang
			}
		}
		e.start(cfg)
	}
	t.Cleanup(func() { close(hang) })
	op := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: kvs("cores", "4")})
	r := e.final(op, 30*time.Second)
	if r.Status != plan.StatusFailed || r.ErrorClass != plan.ErrorRetryable || !strings.Contains(r.Message, "gave up after 2 deliveries") {
		t.Fatalf("final result %s (%s): %s", r.Status, r.ErrorClass, r.Message)
	}
	dlq, _ := bus.DLQSubject(cluster, "pve1")
	var m *bus.Message
	testkit.Eventually(t, 20*time.Second, "the dead letter", func() bool {
		var err error
		m, err = e.bus.LastMessage(testContext(t), bus.StreamDLQ, dlq)
		return err == nil
	})
	if reason := m.Header.Get(bus.HeaderDeadLetterReason); !strings.Contains(reason, "gave up after 2 deliveries") {
		t.Errorf("dead letter reason %q", reason)
	}
	dead, err := wire.DecodeOperation(testContext(t), m.Decode)
	if err != nil || dead.RunID != op.RunID || dead.ID != op.ID {
		t.Fatalf("dead letter holds %s.%s (%v), want %s.%s", dead.RunID, dead.ID, err, op.RunID, op.ID)
	}
	testkit.Eventually(t, 10*time.Second, "work queue drained", func() bool {
		s, err := e.bus.JetStream().Stream(testContext(t), bus.StreamOps)
		return err == nil && s.CachedInfo().State.Msgs == 0
	})
	if n := received.Load(); n != 2 {
		t.Errorf("%d deliveries reached a replica, want MaxDeliver = 2", n)
	}
	finals := countWhere(e.results(), func(x plan.Result) bool { return x.OpID == op.ID && x.Status.Final() })
	if finals != 1 {
		t.Errorf("%d final results, want exactly one", finals)
	}
	if s, err := e.bus.JetStream().Stream(testContext(t), bus.StreamDLQ); err != nil || s.CachedInfo().State.Msgs != 1 {
		t.Errorf("dead letters: %v, want exactly one", err)
	}
	rec := wire.NewOperationRecord()
	key, _ := bus.OpKey(cluster, op.Node, op.RunID, op.ID)
	if _, err := e.bus.GetProto(testContext(t), bus.BucketOps, key, rec); err != nil {
		t.Fatalf("operation record: %v", err)
	}
	if got, err := wire.OperationRecordFromProto(rec); err != nil || got.Status != plan.StatusFailed {
		t.Errorf("operation record %+v (%v), want failed", got, err)
	}
	if n := e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/config"); n != 0 {
		t.Errorf("%d config writes reached PVE from hung deliveries", n)
	}
}

// An operation handed back because the bus cannot serve its guard (a stream without a leader, an outage)
// waits longer after each delivery, so that a bus outage of more than a few seconds does not use up its
// deliveries; once the bus is back it runs.
func TestAnOperationTheBusCannotServeWaitsLongerEachDelivery(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	var mu sync.Mutex
	var at []time.Time
	cfg := e.config()
	cfg.RetryBackoff = 100 * time.Millisecond
	cfg.Fault = func(point string) {
		if point == "received" {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
		}
	}
	e.start(cfg)
	if err := e.bus.JetStream().DeleteStream(testContext(t), "KV_"+bus.BucketOps); err != nil {
		t.Fatal(err)
	}
	op := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: kvs("cores", "4")})
	deliveries := func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(at)
	}
	testkit.Eventually(t, 30*time.Second, "five deliveries", func() bool { return len(deliveries()) >= 5 })
	got := deliveries()
	for i := 1; i < 5; i++ {
		want := cfg.RetryBackoff << (i - 1)
		if gap := got[i].Sub(got[i-1]); gap < want {
			t.Errorf("delivery %d came %s after the one before, want at least %s", i+1, gap, want)
		}
	}
	if _, err := e.bus.Provision(testContext(t), bus.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	if r := e.final(op, 60*time.Second); r.Status != plan.StatusSucceeded {
		t.Fatalf("final result %s: %s", r.Status, r.Message)
	}
}
