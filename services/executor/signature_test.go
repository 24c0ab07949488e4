package executor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/opsign"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
)

// publishSigned publishes op on pve1's work queue, signed by sign (nil: unsigned).
func (e *env) publishSigned(op plan.Operation, sign wire.SignFunc) {
	e.t.Helper()
	var m, err = wire.OperationToProto(op)
	if sign != nil {
		m, err = wire.SignOperation(op, sign)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	subject, _ := bus.OpSubject(cluster, "pve1")
	if _, err := e.bus.Publish(testContext(e.t), subject, m, bus.WithMsgID(op.RunID+"."+op.ID)); err != nil {
		e.t.Fatalf("publish operation: %v", err)
	}
}

// refusedEnv runs an executor of pve1, trusting the test planner key, over a simulator holding guest 100
// (not carrying the ownership tag), with its metrics in reg.
func refusedEnv(t *testing.T) (*env, *prometheus.Registry) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: strings.ReplaceAll(seedVM, "tags: proxops\n", "")}}
	e := newEnv(t, spec)
	reg := prometheus.NewRegistry()
	cfg := e.config()
	cfg.Registry = reg
	e.start(cfg)
	return e, reg
}

// assertRefused checks that op was refused for reason without reaching PVE: a failed terminal result,
// a dead letter whose reason header names the refusal, the refusal counted, and guest 100 unchanged.
func (e *env) assertRefused(reg *prometheus.Registry, op plan.Operation, reason, message string) {
	e.t.Helper()
	r := e.final(op, 30*time.Second)
	if r.Status != plan.StatusFailed || r.ErrorClass != plan.ErrorTerminal || !strings.Contains(r.Message, message) {
		e.t.Fatalf("result %s (%s): %q, want failed terminal naming %q", r.Status, r.ErrorClass, r.Message, message)
	}
	dlq, _ := bus.DLQSubject(cluster, "pve1")
	var m *bus.Message
	testkit.Eventually(e.t, 20*time.Second, "the dead letter", func() bool {
		var err error
		m, err = e.bus.LastMessage(testContext(e.t), bus.StreamDLQ, dlq)
		return err == nil
	})
	if got := m.Header.Get(bus.HeaderDeadLetterReason); !strings.Contains(got, message) {
		e.t.Errorf("dead letter reason %q, want it to name %q", got, message)
	}
	if got := m.Header.Get(bus.HeaderRefused); got != reason {
		e.t.Errorf("dead letter marked refused %q, want %q", got, reason)
	}
	dead, err := wire.DecodeOperation(testContext(e.t), m.Decode)
	if err != nil || dead.RunID != op.RunID || dead.ID != op.ID {
		e.t.Errorf("dead letter holds %s.%s (%v), want %s.%s", dead.RunID, dead.ID, err, op.RunID, op.ID)
	}
	testkit.Eventually(e.t, 10*time.Second, "the refusal counted", func() bool {
		return refusedCount(e.t, reg, reason) == 1
	})
	if n := e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/config") + e.sim.Count("PUT", "/nodes/{node}/qemu/{vmid}/config"); n != 0 {
		e.t.Errorf("%d config writes reached PVE", n)
	}
	if n := e.sim.Count("GET", "/nodes/{node}/qemu/{vmid}/config"); n != 0 {
		e.t.Errorf("%d config reads reached PVE for a refused operation", n)
	}
	if conf, _ := e.sim.Config(100); conf["memory"] != "2048" || strings.Contains(conf["description"], "hunter2") {
		e.t.Errorf("guest 100 changed: %v", conf)
	}
}

// refusedCount is the value of proxops_executor_operations_refused_total{reason}.
func refusedCount(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "proxops_executor_operations_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// attack is the operation an attacker who can publish on the work queue wants run: guest 100's memory
// changed and a secret written into its description.
func attack(runID string) plan.Operation {
	return plan.Operation{RunID: runID, ID: "op-1", PlanID: "p-forged", Cluster: cluster, Node: "pve1", VMID: 100,
		GuestType: inventory.QEMU, Action: plan.ActionConfigure, Values: kvs("memory", "8192", "description", "hunter2")}
}

// An operation that carries no signature at all is refused and dead-lettered; nothing reaches PVE.
func TestExecutorRefusesUnsignedOperation(t *testing.T) {
	e, reg := refusedEnv(t)
	op := attack("run-unsigned")
	e.publishSigned(op, nil)
	e.assertRefused(reg, op, "unsigned", "operation is not signed")
}

// A real planner signature taken from one operation and attached to another (the content changed after
// signing: another value, another run) does not verify; the operation is refused.
func TestExecutorRefusesForgedOperation(t *testing.T) {
	e, reg := refusedEnv(t)
	planner := testkit.PlannerKey(t)
	benign := plan.Operation{RunID: "run-real", ID: "op-1", PlanID: "p-real", Cluster: cluster, Node: "pve1", VMID: 100,
		GuestType: inventory.QEMU, Action: plan.ActionConfigure, Values: kvs("memory", "2048")}
	var signer string
	var signature []byte
	if _, err := wire.SignOperation(benign, func(payload []byte) (string, []byte, error) {
		var err error
		signer, signature, err = planner.Sign(payload)
		return signer, signature, err
	}); err != nil {
		t.Fatal(err)
	}
	op := attack("run-forged")
	e.publishSigned(op, func([]byte) (string, []byte, error) { return signer, signature, nil })
	e.assertRefused(reg, op, "bad_signature", "signature does not match")
}

// An operation correctly signed by a key the executor does not trust is refused.
func TestSignatureOfAnotherKeyIsRefused(t *testing.T) {
	e, reg := refusedEnv(t)
	seed, err := opsign.GenerateSeed()
	if err != nil {
		t.Fatal(err)
	}
	other, err := opsign.NewSigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	op := attack("run-other-key")
	e.publishSigned(op, other.Sign)
	e.assertRefused(reg, op, "unknown_key", "signed by a key this executor does not trust")
}

// A secret reference is allowed only under the keys that carry secrets (cipassword, sshkeys). One under
// description is refused by the planner's check before anything is dispatched and, should an operation
// carry one all the same (here signed by the trusted planner key), by the executor: the secret never
// reaches PVE.
func TestSecretReferenceInDescriptionIsRefusedAtBothEnds(t *testing.T) {
	op := plan.Operation{RunID: "run-test", ID: "op-secret", PlanID: "p-1", Cluster: cluster, Node: "pve1", VMID: 100,
		Ref: "VM/web", GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: []plan.KV{{Key: "description", SecretRefs: []string{"cloud-init.passwords.root"}}}}
	if err := op.CheckSecretRefs(); err == nil || !strings.Contains(err.Error(), "not for value description") {
		t.Fatalf("planner's check: %v, want description refused", err)
	}
	allowed := op
	allowed.Values = []plan.KV{{Key: "cipassword", SecretRefs: []string{"cloud-init.passwords.root"}},
		{Key: "sshkeys", SecretRefs: []string{"cloud-init.ssh-keys.main"}}}
	if err := allowed.CheckSecretRefs(); err != nil {
		t.Fatalf("cipassword and sshkeys refused: %v", err)
	}

	e, reg := refusedEnv(t)
	e.publishSigned(op, testkit.PlannerKey(t).Sign)
	e.assertRefused(reg, op, "secret_reference", "secret references are only allowed for cipassword and sshkeys, not for value description")
}
