package executor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
)

// ownedEnv runs an executor of pve1 over a simulator holding guest 100 with the given tags line ("" for
// none), with its metrics in reg. No ownership record is written.
func ownedEnv(t *testing.T, tags string) (*env, *prometheus.Registry) {
	t.Helper()
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Running: true,
		Config: strings.ReplaceAll(seedVM, "tags: proxops\n", tags)}}
	e := newEnv(t, spec)
	reg := prometheus.NewRegistry()
	cfg := e.config()
	cfg.Registry = reg
	e.start(cfg)
	return e, reg
}

// assertNotOwned checks that a validly signed operation was refused after one read of the guest and
// before any write: a failed terminal result naming why, a dead letter, the refusal counted under reason,
// and guest 100's config and power unchanged.
func (e *env) assertNotOwned(reg *prometheus.Registry, op plan.Operation, reason, message string, refusals float64) {
	e.t.Helper()
	before, _ := e.sim.Config(100)
	running := e.sim.Running(100)
	r := e.final(op, 30*time.Second)
	if r.Status != plan.StatusFailed || r.ErrorClass != plan.ErrorTerminal || !strings.Contains(r.Message, message) {
		e.t.Fatalf("%s: result %s (%s): %q, want failed terminal naming %q", op.Action, r.Status, r.ErrorClass, r.Message, message)
	}
	dlq, _ := bus.DLQSubject(cluster, "pve1")
	testkit.Eventually(e.t, 20*time.Second, "the dead letter of "+op.ID, func() bool {
		m, err := e.bus.LastMessage(testContext(e.t), bus.StreamDLQ, dlq)
		if err != nil {
			return false
		}
		dead, err := wire.DecodeOperation(testContext(e.t), m.Decode)
		return err == nil && dead.ID == op.ID && strings.Contains(m.Header.Get(bus.HeaderDeadLetterReason), message)
	})
	testkit.Eventually(e.t, 10*time.Second, "the refusal counted", func() bool {
		return refusedCount(e.t, reg, reason) == refusals
	})
	for _, r := range e.sim.Requests() {
		if r.Method != "GET" {
			e.t.Fatalf("a write reached PVE: %s %s", r.Method, r.Path)
		}
	}
	if after, _ := e.sim.Config(100); after["memory"] != before["memory"] || after["tags"] != before["tags"] || e.sim.Running(100) != running {
		e.t.Fatalf("guest 100 changed: %v running=%v, was %v running=%v", after, e.sim.Running(100), before, running)
	}
}

// writes are one operation of each kind that writes to an existing guest, for guest 100.
func writes() []plan.Operation {
	return []plan.Operation{
		{Action: plan.ActionConfigure, Values: kvs("memory", "8192")},
		{Action: plan.ActionResize, Params: kvs("disk", "scsi0", "size", "16G")},
		{Action: plan.ActionShutdown, Params: kvs("timeout", "10")},
		{Action: plan.ActionStop},
		{Action: plan.ActionMarkTemplate},
		{Action: plan.ActionRegenerateCloudInit, Precondition: plan.Precondition{Fingerprint: "uuid=6f1b2c3d-0000-4000-8000-000000000100"}},
		{Action: plan.ActionDelete, Precondition: plan.Precondition{Fingerprint: "uuid=6f1b2c3d-0000-4000-8000-000000000100", ExpectTag: true}},
	}
}

// An operation signed by the trusted planner, for the open run, aimed at a guest that does not carry the
// ownership tag, is refused by the executor whatever it writes, even with an ownership record that matches
// the guest: the executor reads the guest itself before every write.
func TestSignedOperationForAnUntaggedGuestIsRefused(t *testing.T) {
	e, reg := ownedEnv(t, "")
	e.own(100)
	e.sim.ResetLog()
	for i, w := range writes() {
		w.Node, w.VMID, w.GuestType, w.Ref = "pve1", 100, inventory.QEMU, "VM/web"
		op := e.dispatch(w)
		e.assertNotOwned(reg, op, "not_owned", "refused: the live guest does not carry the proxops tag", float64(i+1))
	}
}

// A guest carrying the tag is still not ProxOps' without an ownership record that holds its identity: a
// tagged guest nobody recorded, and a hand clone of a managed guest (the tag copied, a new uuid) whose vmid
// holds the record of the guest it was cloned from, are both refused.
func TestTaggedGuestWithoutAMatchingRecordIsRefused(t *testing.T) {
	t.Run("no record", func(t *testing.T) {
		e, reg := ownedEnv(t, "tags: proxops\n")
		if err := e.bus.DeleteKey(testContext(t), bus.BucketOwned, "lab.100"); err != nil {
			t.Fatal(err)
		}
		e.sim.ResetLog()
		op := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
			Values: kvs("memory", "8192")})
		e.assertNotOwned(reg, op, "not_owned", "ProxOps holds no ownership record of vmid 100", 1)
	})
	t.Run("hand clone", func(t *testing.T) {
		e, reg := ownedEnv(t, "tags: proxops\n")
		// The record names the managed original; the guest on its vmid now is a copy with an identity of its own.
		e.record(100, "uuid=6f1b2c3d-0000-4000-8000-000000000100")
		if err := e.sim.SetConfig(100, "smbios1", "uuid=0d9e8f7a-1111-4222-8333-444455556666"); err != nil {
			t.Fatal(err)
		}
		e.sim.ResetLog()
		for i, w := range writes() {
			w.Node, w.VMID, w.GuestType, w.Ref = "pve1", 100, inventory.QEMU, "VM/web"
			op := e.dispatch(w)
			e.assertNotOwned(reg, op, "not_owned", `identity "uuid=0d9e8f7a-1111-4222-8333-444455556666" is not the one recorded`, float64(i+1))
		}
	})
}

// claim is the claim-tag operation a plan makes for guest 100 as it observed it (untagged, named web).
func claim() plan.Operation {
	return plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Ref: "VM/web", Action: plan.ActionClaimTag,
		Values:       kvs("tags", "proxops"),
		Precondition: plan.Precondition{Fingerprint: "uuid=6f1b2c3d-0000-4000-8000-000000000100", Name: "web"}}
}

// A planned claim of a declared untagged guest is the one write the executor allows to a guest that is not
// ProxOps' yet, checked against what the plan observed.
func TestPlannedClaimOfAnUntaggedGuestIsApplied(t *testing.T) {
	e, _ := ownedEnv(t, "")
	r := e.mustSucceed(e.dispatch(claim()))
	if conf, _ := e.sim.Config(100); !pveformat.Owned(conf["tags"]) || r.Fingerprint != "uuid=6f1b2c3d-0000-4000-8000-000000000100" {
		t.Fatalf("after the claim: tags %q, result fingerprint %q", conf["tags"], r.Fingerprint)
	}
}

// A claim is refused when the live guest is no longer the one the plan observed: another identity (the
// guest was replaced on its vmid) or another name.
func TestClaimIsRefusedWhenTheGuestChangedSinceThePlan(t *testing.T) {
	t.Run("identity", func(t *testing.T) {
		e, reg := ownedEnv(t, "")
		if err := e.sim.SetConfig(100, "smbios1", "uuid=0d9e8f7a-1111-4222-8333-444455556666"); err != nil {
			t.Fatal(err)
		}
		e.sim.ResetLog()
		e.assertNotOwned(reg, e.dispatch(claim()), "claim_mismatch",
			`identity "uuid=0d9e8f7a-1111-4222-8333-444455556666" is not "uuid=6f1b2c3d-0000-4000-8000-000000000100", which the plan observed`, 1)
	})
	t.Run("name", func(t *testing.T) {
		e, reg := ownedEnv(t, "")
		if err := e.sim.SetConfig(100, "name", "payroll"); err != nil {
			t.Fatal(err)
		}
		e.sim.ResetLog()
		e.assertNotOwned(reg, e.dispatch(claim()), "claim_mismatch", `the live guest is named "payroll", the plan observed "web"`, 1)
	})
}

// An operation whose record an executor of an earlier release kept under <run>.<op> (the layout before
// records named their node) is found after the upgrade: delivered again, it is reported from that record and
// not run a second time.
func TestOperationRecordOfTheOldKeyLayoutIsFoundAfterAnUpgrade(t *testing.T) {
	e, _ := ownedEnv(t, "tags: proxops\n")
	op := plan.Operation{RunID: e.runID, ID: "op-before-upgrade", Cluster: cluster, Node: "pve1", VMID: 100,
		GuestType: inventory.QEMU, Action: plan.ActionConfigure, Values: kvs("memory", "8192")}
	m, err := wire.OperationRecordToProto(wire.OperationRecord{RunID: op.RunID, OpID: op.ID, Cluster: cluster, Node: "pve1",
		VMID: 100, Action: op.Action, Status: plan.StatusSucceeded, Message: "done before the upgrade", Executor: "old"})
	if err != nil {
		t.Fatal(err)
	}
	legacy, _ := bus.LegacyOpKey(op.RunID, op.ID)
	if _, err := e.bus.PutProto(testContext(t), bus.BucketOps, legacy, m); err != nil {
		t.Fatal(err)
	}
	e.sim.ResetLog()
	r := e.mustSucceed(e.dispatch(op))
	if !r.AlreadyDone || r.Message != "done before the upgrade" {
		t.Fatalf("result %+v, want the recorded outcome reported again", r)
	}
	if conf, _ := e.sim.Config(100); conf["memory"] != "2048" || len(e.sim.Requests()) != 0 {
		t.Fatalf("the operation ran again: memory %s, %d requests", conf["memory"], len(e.sim.Requests()))
	}
}
