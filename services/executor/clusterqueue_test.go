package executor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/testkit"
)

// The executor also serves its cluster's work queue: an operation there goes through the same signature
// and run checks, and is reported on the cluster queue's result subject and dead-lettered there.
func TestExecutorServesTheClusterQueueWithTheSameChecks(t *testing.T) {
	e, reg := refusedEnv(t)
	e.openRun("run-open")

	stale := e.dispatchTo(bus.ClusterScope, plan.Operation{RunID: "run-closed", ID: "pool-web-create", PlanID: "p",
		Cluster: cluster, Node: bus.ClusterScope, Ref: "Pool/web", Action: plan.ActionCreate})
	r := e.final(stale, 30*time.Second)
	if r.Status != plan.StatusFailed || !strings.Contains(r.Message, "not the run in progress") {
		t.Fatalf("cluster operation of a closed run: %s: %q, want refused", r.Status, r.Message)
	}
	if r.Node != bus.ClusterScope {
		t.Errorf("result reported for %q, want the cluster scope", r.Node)
	}
	dlq, _ := bus.DLQSubject(cluster, bus.ClusterScope)
	testkit.Eventually(t, 20*time.Second, "the cluster queue's dead letter", func() bool {
		m, err := e.bus.LastMessage(testContext(t), bus.StreamDLQ, dlq)
		return err == nil && m.Header.Get(bus.HeaderRefused) == "run_not_open"
	})
	testkit.Eventually(t, 10*time.Second, "the refusal counted", func() bool { return refusedCount(t, reg, "run_not_open") == 1 })

	// A node's operation slipped into the cluster queue, and a cluster operation into the node's queue,
	// are refused where they arrive, before anything is read from PVE.
	nodeOp := e.dispatchTo(bus.ClusterScope, attack("run-open"))
	if r := e.final(nodeOp, 30*time.Second); r.Status != plan.StatusFailed || !strings.Contains(r.Message, "arrived on the work queue of "+cluster+"/"+bus.ClusterScope) {
		t.Fatalf("node operation on the cluster queue: %s: %q", r.Status, r.Message)
	}
	clusterOp := e.dispatchTo("pve1", plan.Operation{RunID: "run-open", ID: "pool-db-create", PlanID: "p",
		Cluster: cluster, Node: bus.ClusterScope, Ref: "Pool/db", Action: plan.ActionCreate})
	if r := e.final(clusterOp, 30*time.Second); r.Status != plan.StatusFailed || !strings.Contains(r.Message, "arrived on the work queue of "+cluster+"/pve1") {
		t.Fatalf("cluster operation on the node's queue: %s: %q", r.Status, r.Message)
	}
	if n := e.sim.Count("GET", "/nodes/{node}/qemu/{vmid}/config"); n != 0 {
		t.Errorf("%d config reads reached PVE for refused operations", n)
	}
}

// Pool operations run on the cluster's work queue: a created pool carries the marker, and a change to it
// waits for its ownership record: with the marker alone it is refused as not owned, before any write.
func TestClusterQueueAppliesPoolOperationsOnlyToOwnedPools(t *testing.T) {
	e, reg := refusedEnv(t)
	e.openRun("run-open")
	pool := func(id string, action plan.Action, params ...string) plan.Operation {
		return plan.Operation{RunID: "run-open", ID: id, PlanID: "p", Cluster: cluster, Node: bus.ClusterScope,
			Ref: "Pool/web", Action: action, Params: kvs(append([]string{"poolid", "web"}, params...)...)}
	}
	e.mustSucceed(e.dispatchTo(bus.ClusterScope, pool("pool-web-create", plan.ActionCreatePool, "comment", "front ends")))
	if n := e.sim.Count("POST", "/pools"); n != 1 {
		t.Fatalf("%d pool creates reached PVE", n)
	}

	configure := pool("pool-web-configure", plan.ActionConfigurePool, "comment", "edge")
	configure.Precondition.Expect = kvs("comment", "front ends [proxops]")
	r := e.final(e.dispatchTo(bus.ClusterScope, configure), 30*time.Second)
	if r.Status != plan.StatusFailed || r.ErrorClass != plan.ErrorTerminal || !strings.Contains(r.Message, "no ownership record") {
		t.Fatalf("configure of an unrecorded pool: %s (%s): %q", r.Status, r.ErrorClass, r.Message)
	}
	testkit.Eventually(t, 10*time.Second, "the refusal counted", func() bool { return refusedCount(t, reg, "not_owned") == 1 })
	if n := e.sim.Count("PUT", "/pools"); n != 0 {
		t.Fatalf("%d pool writes reached PVE for a refused operation", n)
	}

	key, _ := bus.ObjectOwnedKey(cluster, bus.ObjectPool, "web")
	if _, err := e.bus.PutBytes(testContext(t), bus.BucketOwned, key, []byte("web")); err != nil {
		t.Fatal(err)
	}
	configure.ID = "pool-web-configure-recorded"
	e.mustSucceed(e.dispatchTo(bus.ClusterScope, configure))
	if n := e.sim.Count("PUT", "/pools"); n != 1 {
		t.Fatalf("%d pool writes reached PVE, want the configure's one", n)
	}
}
