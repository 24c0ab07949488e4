package bus_test

import (
	"errors"
	"testing"

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
