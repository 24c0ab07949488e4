package pve_test

import (
	"context"
	"sync"
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

// HA may finish the migration between the read of the guest and the read of HA's status: the guest then
// shows on the source while HA already has it on the target. That is a migration in its last step, not a
// failed one, and the operation waits for the guest to show on the target.
func TestHAMigrateFinishingBetweenTheTwoReadsIsNotAFailure(t *testing.T) {
	spec := baseSpec()
	spec.HADelay = pvesim.Duration(150 * time.Millisecond)
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM, Running: true, HA: true}}
	c := newSim(t, spec)
	cl := c.client(t)
	var mu sync.Mutex
	statusReads, held := 0, false
	c.sim.Use(func(r pvesim.RequestInfo) *pvesim.Fault {
		if r.Method != "GET" || r.Template != "/cluster/ha/status/current" || c.count("POST", "/cluster/ha/resources/{sid}/migrate") == 0 {
			return nil
		}
		mu.Lock()
		statusReads++
		hold := statusReads == 2
		held = held || hold
		mu.Unlock()
		// The second status read after the request (the first one saw the move) waits until HA has moved the
		// guest, so the guest read just before it still found the source.
		for hold {
			if node, _, _ := c.sim.NodeOf(100); node == "pve2" {
				break
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	})
	out := mustApply(t, cl, haMigrateOp(100, "pve1", "pve2"), pve.ApplyOptions{})
	if out.AlreadyDone {
		t.Fatalf("outcome %+v: the guest moved during this delivery", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if !held {
		t.Fatal("no HA status read was held until the move; the race was not exercised")
	}
	if node, _, _ := c.sim.NodeOf(100); node != "pve2" {
		t.Fatalf("guest on %s, want pve2", node)
	}
	if n := c.count("POST", "/cluster/ha/resources/{sid}/migrate"); n != 1 {
		t.Fatalf("%d HA migrations requested, want 1", n)
	}
}
