package pve_test

import (
	"context"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

func haMigrateOp(vmid int, from, to string) plan.Operation {
	return plan.Operation{Node: from, VMID: vmid, GuestType: inventory.QEMU, Action: plan.ActionHAMigrate,
		Params: kvs("target", to)}
}

// An HA-managed guest moves through HA: one request to the HA manager, never a direct migration, and the
// operation ends only once HA has the guest on the target. Delivered again, it finds the guest there and
// asks nothing.
func TestHAMigrateAsksHAOnceAndWaitsForTheGuestOnTheTarget(t *testing.T) {
	spec := baseSpec()
	spec.HADelay = pvesim.Duration(150 * time.Millisecond)
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM, Running: true, HA: true}}
	c := newSim(t, spec)
	cl := c.client(t)
	before, _, err := cl.ReadGuest(testContext(t), "pve1", inventory.QEMU, 100)
	if err != nil {
		t.Fatal(err)
	}
	own := fingerprints{100: inventory.Fingerprint(before)}
	op := haMigrateOp(100, "pve1", "pve2")
	out := mustApply(t, cl, op, pve.ApplyOptions{Ownership: own})
	if out.AlreadyDone || out.Fingerprint != own[100] {
		t.Fatalf("outcome %+v, want the recorded identity %s", out, own[100])
	}
	if _, ok, err := cl.ReadGuest(testContext(t), "pve2", inventory.QEMU, 100); err != nil || !ok || !c.sim.Running(100) {
		t.Fatalf("on pve2: %v %v running=%v", ok, err, c.sim.Running(100))
	}
	out = mustApply(t, cl, op, pve.ApplyOptions{Ownership: own})
	if !out.AlreadyDone {
		t.Fatalf("redelivery: %+v", out)
	}
	if n := c.count("POST", "/cluster/ha/resources/{sid}/migrate"); n != 1 {
		t.Fatalf("%d HA migrations requested, want 1", n)
	}
	if n := c.count("POST", "/nodes/{node}/qemu/{vmid}/migrate"); n != 0 {
		t.Fatalf("%d direct migrations sent, want none", n)
	}
}

// A delivery that finds HA already migrating the guest (an earlier delivery asked, then its executor died)
// waits for that migration instead of asking again.
func TestRedeliveredHAMigrateWaitsForHAsMigration(t *testing.T) {
	spec := baseSpec()
	spec.HADelay = pvesim.Duration(200 * time.Millisecond)
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM, Running: true, HA: true}}
	c := newSim(t, spec)
	cl := c.client(t)
	asked := func() int { return c.count("POST", "/cluster/ha/resources/{sid}/migrate") }
	ctx, cancel := context.WithCancel(testContext(t))
	go func() {
		for asked() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := cl.Apply(ctx, haMigrateOp(100, "pve1", "pve3"), pve.ApplyOptions{}); err == nil {
		t.Fatal("the first delivery finished although its context ended")
	}
	out := mustApply(t, cl, haMigrateOp(100, "pve1", "pve3"), pve.ApplyOptions{})
	if out.AlreadyDone {
		t.Fatalf("outcome %+v: the guest moved during this delivery", out)
	}
	if _, ok, err := cl.ReadGuest(testContext(t), "pve3", inventory.QEMU, 100); err != nil || !ok {
		t.Fatalf("on pve3: %v %v", ok, err)
	}
	if n := c.count("POST", "/cluster/ha/resources/{sid}/migrate"); n != 1 {
		t.Fatalf("%d HA migrations requested, want only the earlier one", n)
	}
}
