package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
)

// captureOps keeps a copy of every operation message (body and headers) the planner dispatches to pve1.
func (e *env) captureOps() (drain func() []*nats.Msg) {
	e.t.Helper()
	subject, _ := bus.OpSubject(cluster, "pve1")
	sub, err := e.bus.Conn().SubscribeSync(subject)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.bus.Conn().Flush(); err != nil {
		e.t.Fatal(err)
	}
	return func() []*nats.Msg {
		var out []*nats.Msg
		for {
			m, err := sub.NextMsg(200 * time.Millisecond)
			if err != nil {
				return out
			}
			out = append(out, m)
		}
	}
}

func decodeOp(t *testing.T, m *nats.Msg) (plan.Operation, error) {
	return wire.DecodeOperation(testContext(t), func(_ context.Context, into proto.Message) error { return proto.Unmarshal(m.Data, into) })
}

// An operation the real planner signed is good only while its run is open: published again, byte for byte,
// after the run finished, it is refused (a failed result naming the run, a dead letter) and PVE keeps what
// an operator changed since.
func TestReplayedSignedOperationIsRefused(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web-01": 101})
	e.apply(files)

	ops := e.captureOps()
	files["vm/lab/web-01.yaml"] = strings.Replace(files["vm/lab/web-01.yaml"], "memory: 512MiB", "memory: 1024MiB", 1)
	e.apply(files)
	var configure *nats.Msg
	for _, m := range ops() {
		op, err := decodeOp(t, m)
		if err == nil && op.Action == plan.ActionConfigure && op.VMID == 101 {
			configure = m
		}
	}
	if configure == nil {
		t.Fatal("no configure of guest 101 was dispatched")
	}
	if conf, _ := e.sim.Config(101); conf["memory"] != "1024" {
		t.Fatalf("memory after the run: %q", conf["memory"])
	}
	// An operator sets the memory by hand; an attacker replays the planner's signed configure.
	if err := e.sim.SetConfig(101, "memory", "768"); err != nil {
		t.Fatal(err)
	}
	e.sim.ResetLog()
	replay := nats.NewMsg(configure.Subject)
	replay.Data = configure.Data
	for k, v := range configure.Header {
		replay.Header[k] = v
	}
	replay.Header.Set(nats.MsgIdHdr, "replayed-copy")
	if _, err := e.bus.JetStream().PublishMsg(testContext(t), replay); err != nil {
		t.Fatalf("replay: %v", err)
	}
	op, _ := decodeOp(t, configure)
	dlq, _ := bus.DLQSubject(cluster, "pve1")
	var dead *bus.Message
	testkit.Eventually(t, 30*time.Second, "the replayed operation dead-lettered", func() bool {
		m, err := e.bus.LastMessage(testContext(t), bus.StreamDLQ, dlq)
		dead = m
		return err == nil
	})
	if reason := dead.Header.Get(bus.HeaderDeadLetterReason); !strings.Contains(reason, "run "+op.RunID+" is not the run in progress") {
		t.Errorf("dead letter reason %q", reason)
	}
	var refused plan.Result
	filter, _ := bus.ResultFilter(cluster)
	testkit.Eventually(t, 10*time.Second, "the refusal reported", func() bool {
		found := false
		_ = e.bus.ReadStream(testContext(t), bus.StreamResults, filter, 0, func(m *bus.Message) error {
			r, err := wire.DecodeResult(testContext(t), m.Decode)
			if err == nil && r.OpID == op.ID && r.RunID == op.RunID && r.Status == plan.StatusFailed {
				refused, found = r, true
			}
			return nil
		})
		return found
	})
	if refused.ErrorClass != plan.ErrorTerminal || !strings.Contains(refused.Message, "not the run in progress") {
		t.Errorf("refusal %s (%s): %s", refused.Status, refused.ErrorClass, refused.Message)
	}
	if conf, _ := e.sim.Config(101); conf["memory"] != "768" {
		t.Errorf("memory after the replay: %q, want the operator's 768", conf["memory"])
	}
	if n := e.writes(); n != 0 {
		t.Errorf("%d writes reached PVE for a replayed operation: %v", n, e.sim.Counts())
	}
}
