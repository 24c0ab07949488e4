package executor_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
)

// redeliver publishes an operation again under a fresh message id, as the work queue hands it out again
// when its acknowledgement was lost, and waits until the node's consumer has settled that copy.
func (e *env) redeliver(op plan.Operation, copyName string) {
	e.t.Helper()
	m, err := wire.SignOperation(op, testkit.PlannerKey(e.t).Sign)
	if err != nil {
		e.t.Fatal(err)
	}
	subject, _ := bus.OpSubject(cluster, op.Node)
	ack, err := e.bus.Publish(testContext(e.t), subject, m, bus.WithMsgID(op.RunID+"."+op.ID+"."+copyName))
	if err != nil || ack.Duplicate {
		e.t.Fatalf("publish the operation again: %+v (%v)", ack, err)
	}
	durable, _ := bus.ExecutorConsumer(cluster, op.Node)
	testkit.Eventually(e.t, 15*time.Second, "the redelivered "+op.ID+" to be settled", func() bool {
		c, err := e.bus.JetStream().Consumer(testContext(e.t), bus.StreamOps, durable)
		if err != nil {
			return false
		}
		info, err := c.Info(testContext(e.t))
		return err == nil && info.AckFloor.Stream >= ack.Sequence && info.NumAckPending == 0
	})
}

// simPost sends a request straight to the simulator (test setup outside the executor).
func (e *env) simPost(path string) {
	e.t.Helper()
	if err := e.sim.AdminRequest(http.MethodPost, path, nil); err != nil {
		e.t.Fatal(err)
	}
}

// qmpStatus is a guest's QEMU state as the adapter observes it ("running", "paused", ...).
func (e *env) qmpStatus(vmid int) string {
	e.t.Helper()
	n, err := e.client().Observe(testContext(e.t), pve.ObserveRequest{Cluster: cluster, Node: "pve1"})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, g := range n.Guests {
		if g.VMID == vmid {
			return g.QMPStatus
		}
	}
	return ""
}

// Resize, resume, stop and mark-template go through NATS like every operation: each is applied once and
// changes PVE's state; the same operation delivered again after its acknowledgement was lost is found
// finished in the journal and sends nothing to PVE. The same action planned again is reported already done
// without a write for resize and mark-template; stop and resume are idempotent in PVE and are sent again,
// succeeding without a change.
func TestResizeResumeStopAndMarkTemplateApplyOnceThroughTheWorkQueue(t *testing.T) {
	spec := pvesim.DefaultSpec()
	for _, g := range []struct {
		vmid    int
		running bool
	}{{100, false}, {101, true}, {102, true}, {103, false}} {
		spec.Guests = append(spec.Guests, pvesim.GuestSpec{VMID: g.vmid, Type: "qemu", Node: "pve1", Running: g.running,
			Config: strings.NewReplacer("vm-100-", "vm-"+strconv.Itoa(g.vmid)+"-",
				"000000000100", "000000000"+strconv.Itoa(g.vmid)).Replace(seedVM)})
	}
	e := newEnv(t, spec)
	e.simPost("/nodes/pve1/qemu/101/status/suspend")
	testkit.Eventually(t, 15*time.Second, "guest 101 to pause", func() bool { return e.qmpStatus(101) == "paused" })
	e.start(e.config())

	for _, tc := range []struct {
		action         plan.Action
		vmid           int
		params         []plan.KV
		method, target string
		checksFirst    bool          // the adapter reads the state first, so a repeat sends nothing
		applied        func() string // "" once PVE's state shows the action applied
	}{
		{plan.ActionResize, 100, kvs("disk", "scsi0", "size", "20G"), "PUT", "/nodes/{node}/qemu/{vmid}/resize", true,
			func() string {
				if conf, _ := e.sim.Config(100); conf["scsi0"] != "local-lvm:vm-100-disk-0,size=20G" {
					return "scsi0 " + conf["scsi0"]
				}
				return ""
			}},
		{plan.ActionResume, 101, nil, "POST", "/nodes/{node}/qemu/{vmid}/status/resume", false,
			func() string {
				if st := e.qmpStatus(101); st != "running" || !e.sim.Running(101) {
					return "qmpstatus " + st
				}
				return ""
			}},
		{plan.ActionStop, 102, nil, "POST", "/nodes/{node}/qemu/{vmid}/status/stop", false,
			func() string {
				if e.sim.Running(102) {
					return "still running"
				}
				return ""
			}},
		{plan.ActionMarkTemplate, 103, nil, "POST", "/nodes/{node}/qemu/{vmid}/template", true,
			func() string {
				if conf, _ := e.sim.Config(103); conf["template"] != "1" || !strings.HasPrefix(conf["scsi0"], "local-lvm:base-103-disk-0") {
					return "config " + conf["template"] + " " + conf["scsi0"]
				}
				return ""
			}},
	} {
		t.Run(string(tc.action), func(t *testing.T) {
			writes := func() int { return e.sim.Count(tc.method, tc.target) }
			op := plan.Operation{Node: "pve1", VMID: tc.vmid, GuestType: inventory.QEMU, Action: tc.action, Params: tc.params}
			first := e.dispatch(op)
			r := e.mustSucceed(first)
			if r.AlreadyDone || r.UPID == "" {
				t.Errorf("first result %+v: want a task and not already done", r)
			}
			if why := tc.applied(); why != "" {
				t.Fatalf("after %s: %s", tc.action, why)
			}
			if n := writes(); n != 1 {
				t.Fatalf("%d %s %s requests, want 1", n, tc.method, tc.target)
			}

			// Delivered again: the journal says it finished, so nothing is sent and no second result is stored.
			e.redeliver(first, "again")
			if n := writes(); n != 1 {
				t.Errorf("the redelivered operation sent %s %s again (%d requests)", tc.method, tc.target, n)
			}
			if got := e.finals(first); len(got) != 1 {
				t.Errorf("%d final results after the redelivery, want 1", len(got))
			}
			if why := tc.applied(); why != "" {
				t.Errorf("after the redelivery: %s", why)
			}

			// Planned again (a new operation for the same change): PVE is already there.
			op.RunID, op.ID = "", ""
			again := e.mustSucceed(e.dispatch(op))
			wantWrites := 2
			if tc.checksFirst {
				wantWrites = 1
				if !again.AlreadyDone {
					t.Errorf("repeated %s: %+v, want already done", tc.action, again)
				}
			}
			if n := writes(); n != wantWrites {
				t.Errorf("%d %s %s requests after the repeat, want %d", n, tc.method, tc.target, wantWrites)
			}
			if why := tc.applied(); why != "" {
				t.Errorf("after the repeat: %s", why)
			}
		})
	}
}
