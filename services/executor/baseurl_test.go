package executor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/wire"
)

const attackerURL = "https://pve.attacker.example:8006"

// An executor with its own endpoint (proxops-executor --pve-url) refuses an observe request and an
// operation that name another base-url than its endpoint, and nothing at all reaches PVE for them; ones
// that name its endpoint, however spelled, or none, are served.
func TestAStandaloneExecutorRefusesABaseURLThatIsNotItsEndpoint(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	cfg := e.config()
	cfg.OwnEndpoint = true
	e.start(cfg)
	subject, _ := bus.ObserveSubject(cluster, "pve1")
	e.sim.ResetLog()

	_, err := requestInventory(t, e, subject, wire.ObserveRequestToProto(wire.ObserveRequest{Cluster: cluster, Node: "pve1",
		RequestID: "redirected", BaseURL: attackerURL}))
	if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), attackerURL) ||
		!strings.Contains(err.Error(), e.srv.URL) {
		t.Fatalf("observe naming %s: %v; want a refusal naming it and %s", attackerURL, err, e.srv.URL)
	}
	op := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionStart, BaseURL: attackerURL})
	r := e.final(op, 20*time.Second)
	if r.Status != plan.StatusFailed || r.ErrorClass != plan.ErrorTerminal || !strings.Contains(r.Message, attackerURL) ||
		!strings.Contains(r.Message, e.srv.URL) {
		t.Fatalf("operation naming %s: %+v; want a terminal failure naming both endpoints", attackerURL, r)
	}
	if got := e.sim.Requests(); len(got) != 0 {
		t.Fatalf("a refused observe or operation reached PVE: %+v", got)
	}
	if e.sim.Running(100) {
		t.Fatal("guest 100 was started")
	}

	for _, same := range []string{"", e.srv.URL, e.srv.URL + "/", e.srv.URL + "/api2/json/", strings.Replace(e.srv.URL, "http://", "HTTP://", 1)} {
		inv, err := requestInventory(t, e, subject, wire.ObserveRequestToProto(wire.ObserveRequest{Cluster: cluster, Node: "pve1",
			RequestID: "same", BaseURL: same}))
		if err != nil || inv.Error != "" || len(inv.Node.Guests) != 1 {
			t.Fatalf("observe naming %q: %v %s", same, err, inv.Error)
		}
	}
	e.mustSucceed(e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionStart,
		BaseURL: e.srv.URL + "/"}))
	if !e.sim.Running(100) {
		t.Fatal("an operation naming the executor's own endpoint did not start guest 100")
	}
}

// An in-process executor (proxops up, diff, apply) is built from the repository's base-url and rebuilt
// when it changes: it does not check the base-url observe requests and operations name.
func TestAnInProcessExecutorDoesNotCheckTheBaseURLOperationsName(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	e.start(e.config())
	subject, _ := bus.ObserveSubject(cluster, "pve1")
	inv, err := requestInventory(t, e, subject, wire.ObserveRequestToProto(wire.ObserveRequest{Cluster: cluster, Node: "pve1",
		RequestID: "r", BaseURL: attackerURL}))
	if err != nil || inv.Error != "" {
		t.Fatalf("observe: %v %s", err, inv.Error)
	}
	e.mustSucceed(e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionStart, BaseURL: attackerURL}))
	if !e.sim.Running(100) {
		t.Fatal("guest 100 not started")
	}
}
