package planner_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/executor"
	"github.com/proxops/proxops/services/planner"
)

// rotatable is a credential source whose token an operator replaces at run time, as a rotated secrets file.
type rotatable struct {
	mu     sync.Mutex
	secret string
}

func (r *rotatable) Current(context.Context) (executor.Credentials, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return executor.Credentials{TokenID: pvesim.DefaultRootTokenID, TokenSecret: r.secret}, nil
}

func (r *rotatable) set(secret string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secret = secret
}

// publishTicks publishes n drift ticks of a tree, as the watcher's drift schedule would, and returns the
// PROXOPS_REPO sequence of the last one.
func (e *env) publishTicks(tree, commit string, from, n int) uint64 {
	e.t.Helper()
	var last uint64
	for i := from; i < from+n; i++ {
		ev := trigger(tree, commit, event.TriggerDrift, i, "")
		m, err := wire.RepoChangedToProto(ev)
		if err != nil {
			e.t.Fatal(err)
		}
		ack, err := e.bus.Publish(testContext(e.t), bus.SubjectRepoChanged, m, bus.WithMsgID(ev.EventID))
		if err != nil {
			e.t.Fatalf("publish drift tick: %v", err)
		}
		last = ack.Sequence
	}
	return last
}

// waitSeen waits until the planners have recorded the cluster's events up to a PROXOPS_REPO sequence.
func (e *env) waitSeen(seq uint64) wire.ClusterControl {
	e.t.Helper()
	var ctl wire.ClusterControl
	eventually(e.t, time.Minute, "the planner to handle the drift ticks", func() bool {
		var err error
		ctl, err = planner.Control(testContext(e.t), e.bus, cluster)
		return err == nil && ctl.SeenSeq >= seq
	})
	return ctl
}

// A plan rejected because PVE refuses the executors' credentials is not planned again by drift ticks of the
// same commit: the cluster's state says what it waits for and why. Once the executors' credentials are
// rotated to good ones, the executors read their nodes again and the cluster is planned at once and applied,
// without a new commit or an operator's request.
func TestRejectedCredentialsWaitForTheExecutorsCredentialsToChange(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	src := &rotatable{secret: "00000000-0000-0000-0000-000000000000"}
	for _, n := range []string{"pve1", "pve2", "pve3"} {
		e.startExecutor(cluster, n, e.connect(), func(c *executor.Config) {
			c.Credentials, c.CredentialsCheck = src, 100*time.Millisecond
		})
	}
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web-01": 101})
	tree := e.snapshot(files)
	commit := strings.Repeat("d", 40)
	e.publishEvent(trigger(tree, commit, event.TriggerPoll, 0, ""))
	var o outcome
	eventually(t, time.Minute, "the rejection", func() bool { o = e.allEvents(); return len(o.rejected) > 0 })
	if r := o.rejected[0].Rejection; r.Transient || r.Reason != plan.RejectObserve {
		t.Fatalf("rejection: %s, transient %v", r.Reason, r.Transient)
	}

	ctl := e.waitSeen(e.publishTicks(tree, commit, 1, 5))
	if o = e.allEvents(); len(o.rejected) != 1 || len(o.planned) != 0 {
		t.Fatalf("after five drift ticks: %d rejections and %d plans, want the one rejection", len(o.rejected), len(o.planned))
	}
	b := ctl.Blocked
	if !b.Waiting() || b.Tree != tree || !strings.Contains(b.Reason, "401") || len(b.Nodes) == 0 || ctl.Pending() {
		t.Fatalf("control state of the waiting cluster: %+v", ctl)
	}

	src.set(pvesim.DefaultRootTokenSecret)
	eventually(t, time.Minute, "the cluster planned and applied with the rotated credentials", func() bool {
		o = e.allEvents()
		return len(o.finished) > 0
	})
	if f := o.finished[0]; f.Outcome != plan.OutcomeSucceeded || !e.sim.Exists(101) {
		t.Fatalf("run after the rotation: %s; guest exists %v", f.Outcome, e.sim.Exists(101))
	}
	if len(o.rejected) != 1 {
		t.Fatalf("%d rejections, want 1", len(o.rejected))
	}
	ctl, err := planner.Control(testContext(t), e.bus, cluster)
	if err != nil || ctl.Blocked.Waiting() {
		t.Fatalf("control state after the apply: %+v, %v", ctl, err)
	}
}

// A plan rejected because the cluster's secrets file on the planner's host is missing is not planned again
// by drift ticks; an operator's request plans it (and is rejected the same way, with its own answer); once
// the file is in place the cluster is planned again by itself and applied.
func TestRejectedSecretsWaitForTheHostSecretsFileToChange(t *testing.T) {
	demo := filepath.Join("..", "..", "internal", "secrets", "testdata", "demo")
	sops, err := os.ReadFile(filepath.Join(demo, "secrets.sops.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	keyText, err := os.ReadFile(filepath.Join(demo, "demo.agekey"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := secrets.ParseAgeKeys("demo.agekey", keyText)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lab.sops.yaml")

	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	cfg := e.plannerConfig("a")
	cfg.Keys, cfg.LocalSecrets = keys, true
	e.startPlanner(cfg)
	files := e.vms(map[string]int{"web-01": 101})
	files["clusters/lab/config.yaml"] = e.lab("      secrets-file: " + path + "\n")
	tree := e.snapshot(files)
	commit := strings.Repeat("e", 40)
	e.publishEvent(trigger(tree, commit, event.TriggerPoll, 0, ""))
	var o outcome
	eventually(t, time.Minute, "the rejection", func() bool { o = e.allEvents(); return len(o.rejected) > 0 })
	if r := o.rejected[0].Rejection; r.Transient || r.Reason != plan.RejectSecrets {
		t.Fatalf("rejection: %s, transient %v: %s", r.Reason, r.Transient, r.Diagnostics)
	}
	ctl := e.waitSeen(e.publishTicks(tree, commit, 1, 4))
	if o = e.allEvents(); len(o.rejected) != 1 || !ctl.Blocked.Waiting() || !strings.Contains(ctl.Blocked.Reason, "secrets") {
		t.Fatalf("after four drift ticks: %d rejections, control state %+v", len(o.rejected), ctl)
	}

	// An operator's request is always planned.
	e.publishEvent(trigger(tree, commit, event.TriggerManual, 9, "req-operator"))
	eventually(t, time.Minute, "the operator's answer", func() bool {
		o = e.allEvents()
		return len(o.rejected) == 2
	})
	if r := o.rejected[1]; r.RequestID != "req-operator" {
		t.Fatalf("second rejection answers %q", r.RequestID)
	}

	if err := os.WriteFile(path, sops, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the cluster planned and applied once the secrets file is there", func() bool {
		o = e.allEvents()
		return len(o.finished) > 0
	})
	if f := o.finished[0]; f.Outcome != plan.OutcomeSucceeded || !e.sim.Exists(101) {
		t.Fatalf("run after the secrets file appeared: %s; guest exists %v", f.Outcome, e.sim.Exists(101))
	}
	if len(o.rejected) != 2 {
		t.Fatalf("%d rejections, want 2", len(o.rejected))
	}
}
