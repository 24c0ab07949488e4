package pipeline_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/executor"
	"github.com/proxops/proxops/services/planner"
)

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
	testkit.Eventually(e.t, time.Minute, "the planner to handle the drift ticks", func() bool {
		var err error
		ctl, err = planner.Control(testContext(e.t), e.bus, cluster)
		return err == nil && ctl.SeenSeq >= seq
	})
	return ctl
}

// demoSecrets reads the demo's SOPS files (the token the simulator knows, and a rotated one it does not)
// and the age key that decrypts them.
func demoSecrets(t *testing.T) (good, rotated []byte, keys *secrets.AgeKeys) {
	t.Helper()
	demo := filepath.Join("..", "..", "internal", "secrets", "testdata", "demo")
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(demo, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	keys, err := secrets.ParseAgeKeys("demo.agekey", read("demo.agekey"))
	if err != nil {
		t.Fatal(err)
	}
	return read("secrets.sops.yaml"), read("rotated.sops.yaml"), keys
}

// A plan rejected because PVE refuses the token in the executors' own secrets files is not planned again by
// drift ticks of the same commit: the cluster's state says what it waits for and why. Once the files hold a
// token PVE accepts, the executors read their nodes with it, and the cluster is planned at once and applied,
// without a new commit or an operator's request.
func TestAnExecutorsChangedSecretsFilePlansTheRejectedClusterAgain(t *testing.T) {
	good, rotated, keys := demoSecrets(t)
	spec := pvesim.DefaultSpec()
	spec.Tokens = append(spec.Tokens, pvesim.TokenSpec{ID: "proxops@pve!proxops", Secret: "0b6f2d4e-8a31-4c57-9e02-d1c3a5f7b9e4"})
	e := newEnv(t, spec)
	path := filepath.Join(t.TempDir(), "lab.sops.yaml")
	if err := os.WriteFile(path, rotated, 0o600); err != nil {
		t.Fatal(err)
	}
	source := &executor.SecretsFile{Path: path, Decryptor: secrets.NewDecryptor(keys),
		Credentials: func(store *secrets.Store) (executor.Credentials, error) {
			var v [3]string
			for i, name := range []string{"proxops-user", "proxops-token-id", "proxops-token"} {
				s, err := store.Secret(name)
				if err != nil {
					return executor.Credentials{}, err
				}
				v[i] = s.Reveal()
			}
			return executor.Credentials{TokenID: v[0] + "!" + v[1], TokenSecret: v[2]}, nil
		}}
	for _, n := range []string{"pve1", "pve2", "pve3"} {
		e.startExecutor(cluster, n, e.connect(), func(c *executor.Config) {
			c.Credentials, c.CredentialsCheck = source, 100*time.Millisecond
		})
	}
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web-01": 101})
	tree := e.snapshot(files)
	commit := strings.Repeat("d", 40)
	e.publishEvent(trigger(tree, commit, event.TriggerPoll, 0, ""))
	var o outcome
	testkit.Eventually(t, time.Minute, "the rejection", func() bool { o = e.allEvents(); return len(o.rejected) > 0 })
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

	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "the cluster planned and applied with the rotated secrets file", func() bool {
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
	sops, _, keys := demoSecrets(t)
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
	testkit.Eventually(t, time.Minute, "the rejection", func() bool { o = e.allEvents(); return len(o.rejected) > 0 })
	if r := o.rejected[0].Rejection; r.Transient || r.Reason != plan.RejectSecrets {
		t.Fatalf("rejection: %s, transient %v: %s", r.Reason, r.Transient, r.Diagnostics)
	}
	ctl := e.waitSeen(e.publishTicks(tree, commit, 1, 4))
	if o = e.allEvents(); len(o.rejected) != 1 || !ctl.Blocked.Waiting() || !strings.Contains(ctl.Blocked.Reason, "secrets") {
		t.Fatalf("after four drift ticks: %d rejections, control state %+v", len(o.rejected), ctl)
	}

	// An operator's request is always planned.
	e.publishEvent(trigger(tree, commit, event.TriggerManual, 9, "req-operator"))
	testkit.Eventually(t, time.Minute, "the operator's answer", func() bool {
		o = e.allEvents()
		return len(o.rejected) == 2
	})
	if r := o.rejected[1]; r.RequestID != "req-operator" {
		t.Fatalf("second rejection answers %q", r.RequestID)
	}

	if err := os.WriteFile(path, sops, 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "the cluster planned and applied once the secrets file is there", func() bool {
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
