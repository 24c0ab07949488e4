package pve_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

type fingerprints map[int]string

func (f fingerprints) RecordedFingerprint(_ context.Context, vmid int) (string, bool, error) {
	fp, ok := f[vmid]
	return fp, ok, nil
}

func migrateOp(vmid int, t inventory.GuestType, from, to string, params ...string) plan.Operation {
	return plan.Operation{Node: from, VMID: vmid, GuestType: t, Action: plan.ActionMigrate,
		Params: kvs(append([]string{"target", to}, params...)...)}
}

// A migration moves the guest and reports its (unchanged) identity; the same operation delivered again finds
// it on the target and sends nothing.
func TestMigrateMovesTheGuestAndIsDoneOnRedelivery(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM, Running: true}}
	c := newSim(t, spec)
	cl := c.client(t)
	before, _, err := cl.ReadGuest(testContext(t), "pve1", inventory.QEMU, 100)
	if err != nil {
		t.Fatal(err)
	}
	own := fingerprints{100: inventory.Fingerprint(before)}
	op := migrateOp(100, inventory.QEMU, "pve1", "pve2", "online", "1", "with-local-disks", "1")
	out := mustApply(t, cl, op, pve.ApplyOptions{Ownership: own, Journal: &journal{}})
	if out.AlreadyDone || out.Fingerprint != own[100] {
		t.Fatalf("outcome %+v, want the recorded identity %s", out, own[100])
	}
	_, ok, err := cl.ReadGuest(testContext(t), "pve2", inventory.QEMU, 100)
	if err != nil || !ok || !c.sim.Running(100) {
		t.Fatalf("on pve2: %v %v running=%v", ok, err, c.sim.Running(100))
	}
	out = mustApply(t, cl, op, pve.ApplyOptions{Ownership: own, Journal: &journal{}})
	if !out.AlreadyDone {
		t.Fatalf("redelivery: %+v", out)
	}
	if n := c.count("POST", "/nodes/{node}/qemu/{vmid}/migrate"); n != 1 {
		t.Fatalf("%d migrations sent, want 1", n)
	}
}

// A delivery cut off while the migration runs leaves an intent; the next delivery waits for that task
// instead of migrating again.
func TestRedeliveredMigrateWaitsForTheRunningMigration(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmigrate": pvesim.Duration(300 * time.Millisecond)}
	c := newSim(t, spec)
	cl := c.client(t)
	sent := func() int { return c.count("POST", "/nodes/{node}/qemu/{vmid}/migrate") }
	op := migrateOp(100, inventory.QEMU, "pve1", "pve3")
	j := &journal{}
	ctx, cancel := context.WithCancel(testContext(t))
	go func() {
		for sent() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := cl.Apply(ctx, op, pve.ApplyOptions{Journal: j}); err == nil {
		t.Fatal("the first delivery finished although its context ended")
	}
	in := j.intents[0]
	out := mustApply(t, cl, op, pve.ApplyOptions{Journal: &journal{}, Prior: pve.Prior{Intent: &in}})
	if !out.AlreadyDone || sent() != 1 {
		t.Fatalf("outcome %+v, %d migrations sent", out, sent())
	}
	// Without any record of the earlier delivery, the guest's `lock: migrate` is waited for too.
	back := migrateOp(100, inventory.QEMU, "pve3", "pve1")
	if _, err := cl.Apply(testContext(t), back, pve.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.sim.SetLock(100, "migrate"); err != nil {
		t.Fatal(err)
	}
	reads := func() int { return c.count("GET", "/nodes/{node}/qemu/{vmid}/pending") }
	before := reads()
	done := make(chan error, 1)
	go func() {
		_, err := cl.Apply(testContext(t), migrateOp(100, inventory.QEMU, "pve1", "pve2"), pve.ApplyOptions{})
		done <- err
	}()
	testkit.Eventually(t, 10*time.Second, "the locked guest read again and again", func() bool { return reads() >= before+6 })
	if n := sent(); n != 2 {
		t.Fatalf("a migration was sent while the guest was locked migrate (%d sent)", n)
	}
	if err := c.sim.SetLock(100, ""); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := sent(); n != 3 {
		t.Fatalf("%d migrations sent, want 3", n)
	}
}

// A guest ProxOps does not own is not moved; a guest on neither node is a conflict.
func TestMigrateChecksOwnershipAndWhereTheGuestIs(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	c := newSim(t, spec)
	cl := c.client(t)
	_, err := apply(t, cl, migrateOp(100, inventory.QEMU, "pve1", "pve2"), pve.ApplyOptions{Ownership: fingerprints{}})
	if pve.ClassOf(err) != plan.ErrorTerminal {
		t.Fatalf("unowned: %v", err)
	}
	_, err = apply(t, cl, migrateOp(100, inventory.QEMU, "pve2", "pve3"), pve.ApplyOptions{})
	if pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("elsewhere: %v", err)
	}
	if n := c.count("POST", "/nodes/{node}/qemu/{vmid}/migrate"); n != 0 {
		t.Fatalf("%d migrations sent", n)
	}
}

// The precondition names what ties a VM to its node.
func TestCheckMigrationReportsLocalDisksAndStorages(t *testing.T) {
	spec := baseSpec()
	spec.Storages = append(spec.Storages, pvesim.StorageSpec{ID: "fast", Type: "lvmthin", Content: []string{"images"}, Nodes: []string{"pve1"}})
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1",
		Config: seedVM + "ide2: local:iso/debian-12.iso,media=cdrom\nscsi1: fast:vm-100-disk-1,size=1G\n"}}
	c := newSim(t, spec)
	cl := c.client(t)
	chk, err := cl.CheckMigration(testContext(t), "pve1", inventory.QEMU, 100, "pve2")
	if err != nil {
		t.Fatal(err)
	}
	if chk.Running || !chk.Known || chk.Allowed || len(chk.CDROMs) != 1 || len(chk.UnavailableStorages) != 1 ||
		chk.UnavailableStorages[0] != "fast" {
		t.Fatalf("check %+v", chk)
	}
}

// A move PVE would refuse is refused before anything is sent, naming the reason.
func TestMigrateRefusesWhatPVERefuses(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1",
		Config: seedVM + "ide2: local:iso/debian-12.iso,media=cdrom\n"}}
	c := newSim(t, spec)
	cl := c.client(t)
	_, err := apply(t, cl, migrateOp(100, inventory.QEMU, "pve1", "pve2"), pve.ApplyOptions{})
	if pve.ClassOf(err) != plan.ErrorTerminal || !strings.Contains(err.Error(), "local:iso/debian-12.iso") {
		t.Fatalf("local ISO: %v", err)
	}
	if n := c.count("POST", "/nodes/{node}/qemu/{vmid}/migrate"); n != 0 {
		t.Fatalf("%d migrations sent", n)
	}
}
