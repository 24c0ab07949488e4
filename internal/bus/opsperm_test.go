package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
)

// A node's executors, with the deployment's users, keep their own operation records and guest guards in
// proxops_ops and read any record there, but cannot write another node's records or guards, nor a record
// under the layout of runs opened before records named their node.
func TestExecutorCredentialsCannotWriteAnotherNodesOperationRecords(t *testing.T) {
	users := deployUsers(t)
	env := startEnv(t, bus.ServerConfig{Users: users}, bus.ProvisionConfig{})
	ctx := testContext(t)
	admin := env.bus

	own, _ := bus.OpKey("lab", "pve1", "r1", "vm-100-configure")
	ownGuard, _ := bus.GuardKey("lab", "pve1", 100)
	other, _ := bus.OpKey("lab", "pve2", "r1", "vm-200-configure")
	otherGuard, _ := bus.GuardKey("lab", "pve2", 200)
	legacy, _ := bus.LegacyOpKey("r0", "vm-200-configure")
	for _, k := range []string{other, legacy} {
		if _, err := admin.PutProto(ctx, bus.BucketOps, k, wrapperspb.String("pve2's record")); err != nil {
			t.Fatal(err)
		}
	}

	exec1 := connectAs(t, env.server, "executor_lab_pve1")
	if _, err := exec1.PutProto(ctx, bus.BucketOps, own, wrapperspb.String("intent")); err != nil {
		t.Fatalf("executor writes its own node's record: %v", err)
	}
	if _, err := exec1.CreateProto(ctx, bus.BucketOps, ownGuard, wrapperspb.String("guard")); err != nil {
		t.Fatalf("executor takes its own node's guard: %v", err)
	}
	if err := exec1.DeleteKey(ctx, bus.BucketOps, ownGuard); err != nil {
		t.Fatalf("executor releases its own node's guard: %v", err)
	}
	var got wrapperspb.StringValue
	if _, err := exec1.GetProto(ctx, bus.BucketOps, other, &got); err != nil || got.GetValue() != "pve2's record" {
		t.Fatalf("executor reads another node's record: %q, %v", got.GetValue(), err)
	}

	denied := connectDenied(t, env.server, "executor_lab_pve1")
	for what, write := range map[string]func() error{
		"another node's record": func() error {
			_, err := denied.PutProto(ctx, bus.BucketOps, other, wrapperspb.String("forged"))
			return err
		},
		"another node's guard": func() error {
			_, err := denied.CreateProto(ctx, bus.BucketOps, otherGuard, wrapperspb.String("forged"))
			return err
		},
		"a record of the legacy layout": func() error {
			_, err := denied.PutProto(ctx, bus.BucketOps, legacy, wrapperspb.String("forged"))
			return err
		},
		"a delete of another node's record": func() error { return denied.DeleteKey(ctx, bus.BucketOps, other) },
	} {
		if err := write(); err == nil {
			t.Errorf("executor of pve1 wrote %s", what)
		}
	}
	for _, k := range []string{other, legacy} {
		if _, err := admin.GetProto(ctx, bus.BucketOps, k, &got); err != nil || got.GetValue() != "pve2's record" {
			t.Errorf("record %s after the denied writes: %q, %v", k, got.GetValue(), err)
		}
	}
	if _, err := admin.GetProto(ctx, bus.BucketOps, otherGuard, &got); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("guard %s exists after a denied create: %v", otherGuard, err)
	}

	// The planner finds a record under its key, and one of a run opened before the layout named the node.
	planner := connectAs(t, env.server, "planner")
	if _, err := planner.GetOpRecord(ctx, "lab", "pve1", "r1", "vm-100-configure", &got); err != nil || got.GetValue() != "intent" {
		t.Fatalf("planner reads pve1's record: %q, %v", got.GetValue(), err)
	}
	if key, err := planner.GetOpRecord(ctx, "lab", "pve2", "r0", "vm-200-configure", &got); err != nil || key != legacy {
		t.Fatalf("planner reads a record of the old layout: key %q, %v", key, err)
	}
	if _, err := planner.GetOpRecord(ctx, "lab", "pve3", "r9", "nothing", &got); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("a missing record: %v, want not found", err)
	}
}

// The cluster's work queue belongs to no node: the executors of every node of the cluster share its durable
// consumer, take its operations and report them on the cluster's result subject with records under the
// cluster scope; a client that is no executor of the cluster cannot take them.
func TestEveryExecutorOfTheClusterServesItsClusterQueue(t *testing.T) {
	users := deployUsers(t)
	env := startEnv(t, bus.ServerConfig{Users: users}, bus.ProvisionConfig{})
	ctx := testContext(t)

	subject, _ := bus.OpSubject("lab", bus.ClusterScope)
	durable, _ := bus.ExecutorConsumer("lab", bus.ClusterScope)
	cfg := bus.ConsumerConfig{Stream: bus.StreamOps, Durable: durable, Filter: subject, MaxAckPending: 1}
	exec1 := connectAs(t, env.server, "executor_lab_pve1")
	exec2 := connectAs(t, env.server, "executor_lab_pve2")
	for name, b := range map[string]*bus.Bus{"pve1": exec1, "pve2": exec2} {
		if err := b.EnsureConsumer(ctx, cfg); err != nil {
			t.Fatalf("executor of %s ensures the cluster queue's consumer: %v", name, err)
		}
	}
	planner := connectAs(t, env.server, "planner")
	if _, err := planner.Publish(ctx, subject, wrapperspb.String("create pool web"), bus.WithMsgID("r1.pool-web-create")); err != nil {
		t.Fatalf("planner dispatches to the cluster queue: %v", err)
	}
	if _, err := connectDenied(t, env.server, "cli").Publish(ctx, subject, wrapperspb.String("forged")); err == nil {
		t.Fatal("the cli dispatched to the cluster queue")
	}
	if err := connectDenied(t, env.server, "adopter").Consume(ctx, bus.StreamOps, durable, bus.ConsumeOptions{MaxWait: 500 * time.Millisecond},
		func(context.Context, *bus.Delivery) error { return nil }); err == nil {
		t.Fatal("the adopter consumed the cluster queue")
	}

	got := make(chan string, 1)
	consumeInto(t, exec2, bus.StreamOps, durable, bus.ConsumeOptions{MaxWait: time.Second}, func(ctx context.Context, d *bus.Delivery) error {
		var v wrapperspb.StringValue
		if err := d.Decode(ctx, &v); err != nil {
			return bus.Terminal(err)
		}
		got <- v.GetValue()
		return nil
	})
	select {
	case v := <-got:
		if v != "create pool web" {
			t.Fatalf("executor of pve2 took %q", v)
		}
	case <-ctx.Done():
		t.Fatal("no executor took the cluster queue's operation")
	}
	result, _ := bus.ResultSubject("lab", bus.ClusterScope)
	if _, err := exec2.Publish(ctx, result, wrapperspb.String("succeeded")); err != nil {
		t.Fatalf("executor publishes the cluster queue's result: %v", err)
	}
	record, _ := bus.OpKey("lab", bus.ClusterScope, "r1", "pool-web-create")
	if _, err := exec2.PutProto(ctx, bus.BucketOps, record, wrapperspb.String("intent")); err != nil {
		t.Fatalf("executor keeps the cluster queue's operation record: %v", err)
	}
	owned, _ := bus.ObjectOwnedKey("lab", bus.ObjectPool, "web")
	if _, err := planner.PutProto(ctx, bus.BucketOwned, owned, wrapperspb.String("pool web")); err != nil {
		t.Fatalf("planner records the pool: %v", err)
	}
	var rec wrapperspb.StringValue
	if _, err := exec1.GetProto(ctx, bus.BucketOwned, owned, &rec); err != nil || rec.GetValue() != "pool web" {
		t.Fatalf("executor reads the pool's ownership record: %q, %v", rec.GetValue(), err)
	}
	if _, err := connectDenied(t, env.server, "executor_lab_pve1").PutProto(ctx, bus.BucketOwned, owned, wrapperspb.String("forged")); err == nil {
		t.Fatal("an executor wrote an ownership record")
	}
}
