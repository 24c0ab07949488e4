package executor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/wire"
)

const seedVM = `cores: 2
memory: 2048
name: web
net0: virtio=BC:24:11:00:00:01,bridge=vmbr0
scsi0: local-lvm:vm-100-disk-0,size=8G
smbios1: uuid=6f1b2c3d-0000-4000-8000-000000000100
tags: proxops
`

func TestExecutorAppliesAGuestsLifecycleAndReportsResults(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	reg := prometheus.NewRegistry()
	cfg := e.config()
	cfg.Registry = reg
	e.start(cfg)

	create := e.dispatch(plan.Operation{Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Action: plan.ActionCreate,
		Values:       kvs("name", "web-01", "memory", "1024", "scsi0", "local-lvm:4", "tags", "proxops"),
		Precondition: plan.Precondition{ExpectAbsent: true}})
	r := e.mustSucceed(create)
	if !strings.HasPrefix(r.Fingerprint, "uuid=") || r.UPID == "" || r.Executor != "test" || r.Attempt != 1 {
		t.Fatalf("create result %+v", r)
	}
	// As the planner does once the create succeeded, before it dispatches anything that depends on it.
	e.record(101, r.Fingerprint)
	e.mustSucceed(e.dispatch(plan.Operation{Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: kvs("memory", "2048")}))
	e.mustSucceed(e.dispatch(plan.Operation{Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Action: plan.ActionStart}))
	if conf, _ := e.sim.Config(101); conf["memory"] != "2048" || !e.sim.Running(101) {
		t.Fatalf("guest after configure and start: %v running=%v", conf, e.sim.Running(101))
	}
	e.mustSucceed(e.dispatch(plan.Operation{Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Action: plan.ActionShutdown,
		Params: kvs("timeout", "10")}))
	e.mustSucceed(e.dispatch(plan.Operation{Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Action: plan.ActionDelete,
		Precondition: plan.Precondition{Fingerprint: r.Fingerprint, ExpectTag: true}}))
	if e.sim.Exists(101) {
		t.Fatal("guest 101 still exists after delete")
	}
	// The create was journaled with its task.
	var m = wire.NewOperationRecord()
	key, _ := bus.OpKey(cluster, create.Node, create.RunID, create.ID)
	if _, err := e.bus.GetProto(testContext(t), bus.BucketOps, key, m); err != nil {
		t.Fatal(err)
	}
	rec, err := wire.OperationRecordFromProto(m)
	if err != nil || rec.TaskType != "qmcreate" || rec.UPID != r.UPID || rec.Status != plan.StatusSucceeded {
		t.Fatalf("operation record %+v (%v)", rec, err)
	}
	// Metrics: operations by action and result, PVE requests by template.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		seen[f.GetName()] = true
	}
	for _, name := range []string{"proxops_executor_operations_total", "proxops_executor_pve_request_duration_seconds", "proxops_executor_task_duration_seconds"} {
		if !seen[name] {
			t.Errorf("metric %s missing", name)
		}
	}
}

func TestObserveIsServedAndItsInventoryPublished(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	e.start(e.config())
	subject, _ := bus.ObserveSubject(cluster, "pve1")
	m := wire.ObserveRequestToProto(wire.ObserveRequest{Cluster: cluster, Node: "pve1", RequestID: "r1", ContentStorages: []string{"local"}})
	var inv wire.NodeInventory
	reply, err := requestInventory(t, e, subject, m)
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	inv = reply
	if inv.Error != "" || inv.RequestID != "r1" || len(inv.Node.Guests) != 1 || inv.Node.Guests[0].Digest == "" {
		t.Fatalf("inventory %+v", inv)
	}
	if len(inv.ClusterNodes) != 0 {
		t.Fatalf("cluster nodes listed without being asked: %v", inv.ClusterNodes)
	}
	// Asked for them, the executor reports the nodes of the PVE cluster too.
	withNodes := wire.ObserveRequestToProto(wire.ObserveRequest{Cluster: cluster, Node: "pve1", RequestID: "r3", ListNodes: true})
	if inv, err = requestInventory(t, e, subject, withNodes); err != nil || strings.Join(inv.ClusterNodes, ",") != "pve1,pve2,pve3" {
		t.Fatalf("cluster nodes %v (%v)", inv.ClusterNodes, err)
	}
	invSubject, _ := bus.InventorySubject(cluster, "pve1")
	if _, err := e.bus.LastMessage(testContext(t), bus.StreamInventory, invSubject); err != nil {
		t.Fatalf("inventory not published: %v", err)
	}
	// Another node's observe is refused.
	other := wire.ObserveRequestToProto(wire.ObserveRequest{Cluster: cluster, Node: "pve2", RequestID: "r2"})
	if _, err := requestInventory(t, e, subject, other); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("foreign observe: %v", err)
	}
}

func requestInventory(t *testing.T, e *env, subject string, req proto.Message) (wire.NodeInventory, error) {
	t.Helper()
	return wire.DecodeNodeInventory(testContext(t), func(ctx context.Context, into proto.Message) error {
		return e.bus.Request(ctx, subject, req, into)
	})
}

// An observe-only executor answers observes and leaves operations queued: nothing is written to PVE.
func TestObserveOnlyExecutorAppliesNothing(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	cfg := e.config()
	cfg.ObserveOnly = true
	ready := make(chan struct{})
	cfg.OnReady = func() { close(ready) }
	e.run(cfg)
	select {
	case <-ready:
	case <-testContext(t).Done():
		t.Fatal("observe-only executor never ready")
	}
	subject, _ := bus.ObserveSubject(cluster, "pve1")
	inv, err := requestInventory(t, e, subject, wire.ObserveRequestToProto(wire.ObserveRequest{Cluster: cluster, Node: "pve1", RequestID: "r"}))
	if err != nil || inv.Error != "" {
		t.Fatalf("observe: %v %s", err, inv.Error)
	}
	e.dispatch(plan.Operation{Node: "pve1", VMID: 150, GuestType: inventory.QEMU, Action: plan.ActionCreate,
		Values: kvs("memory", "512"), Precondition: plan.Precondition{ExpectAbsent: true}})
	time.Sleep(500 * time.Millisecond)
	if e.sim.Exists(150) || len(e.results()) != 0 {
		t.Fatal("an observe-only executor applied an operation")
	}
	durable, _ := bus.ExecutorConsumer(cluster, "pve1")
	if _, err := e.bus.JetStream().Consumer(testContext(t), bus.StreamOps, durable); err == nil {
		t.Fatal("an observe-only executor created the node's consumer")
	}
}
