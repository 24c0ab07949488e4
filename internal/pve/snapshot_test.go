package pve_test

import (
	"context"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

// snapRecords is an ownership inventory of guests and safety snapshots (<vmid>/<name>).
type snapRecords struct {
	guests map[int]string
	snaps  map[string]bool
}

func (r snapRecords) RecordedFingerprint(_ context.Context, vmid int) (string, bool, error) {
	fp, ok := r.guests[vmid]
	return fp, ok, nil
}

func (r snapRecords) ObjectRecorded(_ context.Context, kind, id string) (bool, error) {
	return kind == pve.ObjectKindSnapshot && r.snaps[id], nil
}

func snapOp(action plan.Action, vmid int, name string, params ...string) plan.Operation {
	op := plan.Operation{ID: string(action), Cluster: "lab", Node: "pve1", VMID: vmid, GuestType: inventory.QEMU,
		Ref: "VM/web", Action: action, Params: []plan.KV{{Key: plan.SnapshotNameParam, Value: name}}}
	for i := 0; i+1 < len(params); i += 2 {
		op.Params = append(op.Params, plan.KV{Key: params[i], Value: params[i+1]})
	}
	return op
}

func snapSim(t *testing.T) *simCluster {
	t.Helper()
	spec := baseSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	spec.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM},
		{VMID: 101, Type: "qemu", Node: "pve1", Config: "memory: 512\nname: foreign\nscsi0: local-lvm:vm-101-disk-0,size=1G\n"},
	}
	return newSim(t, spec)
}

// A snapshot, seen by observe, rolled back to and deleted: each operation is done once, a repeat finds it
// done, and observe lists the snapshot of the tagged guest with its description.
func TestSnapshotOperationsRunOnceAndAreObserved(t *testing.T) {
	c := snapSim(t)
	cl := c.client(t)
	ctx := testContext(t)
	name := plan.SnapshotName("71e385f001481cda")
	own := snapRecords{guests: map[int]string{100: seedVMFingerprint}, snaps: map[string]bool{"100/" + name: true}}
	opts := pve.ApplyOptions{Ownership: own, Objects: own}
	take := snapOp(plan.ActionSnapshot, 100, name, "description", "before memory 2048 → 4096 (commit abc1234)")
	if _, err := cl.Apply(ctx, take, opts); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if out, err := cl.Apply(ctx, take, opts); err != nil || !out.AlreadyDone {
		t.Fatalf("snapshot again: %+v %v", out, err)
	}
	n, err := cl.Observe(ctx, pve.ObserveRequest{Cluster: "lab", Node: "pve1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range n.Guests {
		switch g.VMID {
		case 100:
			if len(g.Snapshots) != 1 || g.Snapshots[0].Name != name || !strings.Contains(g.Snapshots[0].Description, "abc1234") || g.Snapshots[0].Time == 0 {
				t.Errorf("observed snapshots of 100: %+v", g.Snapshots)
			}
		case 101:
			if g.Snapshots != nil {
				t.Errorf("snapshots read for an unmanaged guest: %+v", g.Snapshots)
			}
		}
	}
	c.root(t, "POST", "/nodes/pve1/qemu/100/config", "memory", "4096")
	if _, err := cl.Apply(ctx, snapOp(plan.ActionRollback, 100, name), opts); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if raw, _ := c.sim.RawConfig(100); !strings.Contains(raw, "memory: 2048\n") {
		t.Fatalf("after rollback:\n%s", raw)
	}
	del := snapOp(plan.ActionDeleteSnapshot, 100, name)
	if _, err := cl.Apply(ctx, del, opts); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if out, err := cl.Apply(ctx, del, opts); err != nil || !out.AlreadyDone {
		t.Fatalf("delete again: %+v %v", out, err)
	}
}

// ProxOps touches only its own snapshots of its own guests: a name without the prefix, a prefixed name
// without a record (a hand-made look-alike), and an unmanaged guest are refused as not_owned, and the
// hand-made snapshot stays.
func TestSnapshotOperationsRefuseWhatIsNotProxOps(t *testing.T) {
	c := snapSim(t)
	cl := c.client(t)
	ctx := testContext(t)
	c.root(t, "POST", "/nodes/pve1/qemu/100/snapshot", "snapname", "proxops-handmade")
	c.sim.WaitTasks()
	own := snapRecords{guests: map[int]string{100: seedVMFingerprint}, snaps: map[string]bool{"100/proxops-aaa": true, "101/proxops-aaa": true}}
	opts := pve.ApplyOptions{Ownership: own, Objects: own}
	for _, op := range []plan.Operation{
		snapOp(plan.ActionDeleteSnapshot, 100, "before-upgrade"),
		snapOp(plan.ActionDeleteSnapshot, 100, "proxops-handmade"),
		snapOp(plan.ActionRollback, 100, "proxops-handmade"),
		snapOp(plan.ActionSnapshot, 101, "proxops-aaa"),
	} {
		_, err := cl.Apply(ctx, op, opts)
		if reason, ok := pve.RefusalOf(err); !ok || reason != pve.RefusalNotOwned {
			t.Errorf("%s %d %v: want a not_owned refusal, got %v", op.Action, op.VMID, op.Params, err)
		}
	}
	if raw, _ := c.sim.RawConfig(100); !strings.Contains(raw, "[proxops-handmade]") {
		t.Fatalf("the hand-made snapshot is gone:\n%s", raw)
	}
	if raw, _ := c.sim.RawConfig(101); strings.Contains(raw, "[proxops-aaa]") {
		t.Fatalf("snapshot taken of an unmanaged guest:\n%s", raw)
	}
}
