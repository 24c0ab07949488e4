package pipeline_test

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// Crash tests: services run as separate processes and are killed with SIGKILL, no cleanup at all.

// commands are the planner and executor commands, built once per test run.
var commands = &testkit.Commands{Prefix: "proxops-planner-test", Packages: []string{
	"github.com/proxops/proxops/services/planner/cmd/proxops-planner",
	"github.com/proxops/proxops/services/executor/cmd/proxops-executor",
}}

// binary returns the path of one of the commands.
func binary(t testing.TB, name string) string {
	t.Helper()
	return commands.Path(t, name)
}

// proc is a service running as a separate process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *lockedBuffer
	done chan struct{}
}

func (e *env) startProcess(name, bin string, args ...string) *proc {
	e.t.Helper()
	info := e.server.ClientInfo()
	cmd := exec.Command(binary(e.t, bin), append(args, "--nats-url", info.URL, "--nats-user", info.User)...)
	cmd.Env = append(os.Environ(), "PROXOPS_NATS_PASSWORD="+info.Password,
		"PROXOPS_PVE_TOKEN_VALUE="+pvesim.DefaultRootTokenID+"="+pvesim.DefaultRootTokenSecret)
	p := &proc{name: name, cmd: cmd, log: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.log
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	e.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if e.t.Failed() {
			e.t.Logf("%s log:\n%s", name, p.log.String())
		}
	})
	return p
}

// kill sends SIGKILL: the process dies in the middle of whatever it does.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", p.name, err)
	}
	<-p.done
}

func (e *env) startPlannerProcess(name string) *proc {
	return e.startProcess("planner "+name, "proxops-planner", "--name", name, "--lease-ttl", leaseTTL.String(),
		"--observe-timeout", "20s", "--metrics-listen", "", "--log-level", "debug",
		"--signing-key-file", testkit.PlannerKeyFile(e.t))
}

func (e *env) startExecutorProcess(node, replica string) *proc {
	return e.startProcess("executor "+replica, "proxops-executor", "--cluster", cluster, "--node", node, "--replica", replica,
		"--pve-url", e.srv.URL, "--task-poll", "10ms", "--ack-wait", "2s", "--retry-backoff", "100ms", "--concurrency", "2",
		"--metrics-listen", "", "--trusted-planner-key", testkit.PlannerKey(e.t).PublicKey())
}

// lockedBuffer is a process's log, written by its output copiers and read by the test.
type lockedBuffer = testkit.SyncBuffer

// slowSpec makes creates take long enough to kill a process in the middle of a run.
func slowSpec() pvesim.Spec {
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmcreate": pvesim.Duration(time.Second)}
	return spec
}

// The planner driving an apply is killed; the second planner, already running, takes the expired lease
// over, reloads the open run from the streams and finishes it: every guest is created exactly once, and
// the next plan is empty.
func TestPlannerKilledMidApplyIsReplacedByTheOtherPlanner(t *testing.T) {
	e := newEnv(t, slowSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	a := e.startPlannerProcess("a")
	files := e.vms(map[string]int{"a": 101, "b": 102, "c": 103, "d": 104, "e": 105})
	chain(files, "a", "b", "c", "d", "e")
	ev := e.announce(files, false)
	testkit.Eventually(t, time.Minute, "planner a to create the second guest", func() bool { return e.creates() >= 2 })
	key, _ := bus.LeaseKey(cluster)
	if holder, held, err := e.bus.LeaseHolder(testContext(t), key); err != nil || !held || holder != "a" {
		t.Fatalf("lease: %q %v %v", holder, held, err)
	}
	e.startPlanner(e.plannerConfig("b"))
	a.kill(t)
	o := e.wait(ev, 2*time.Minute)
	if f := o.last(); f.Outcome != plan.OutcomeSucceeded || f.Succeeded != 5 {
		t.Fatalf("run after the takeover: %+v", f)
	}
	if len(o.planned) != 1 || len(o.finished) != 1 {
		t.Fatalf("the run was planned %d and finished %d times", len(o.planned), len(o.finished))
	}
	if n := e.creates(); n != 5 {
		t.Fatalf("%d creates for 5 guests", n)
	}
	if holder, _, _ := e.bus.LeaseHolder(testContext(t), key); holder == "a" {
		t.Fatal("the dead planner still holds the lease")
	}
	next := e.apply(files)
	if n := len(next.planned[0].Plan.Operations); n != 0 {
		t.Fatalf("the next plan has %d operations", n)
	}
}

// An executor replica is killed in the middle of a create; the node's other replica takes the operation
// over on redelivery and re-attaches to the task: the plan finishes, each guest is created once, and the
// next plan is empty.
func TestExecutorReplicaKilledMidTaskLeavesTheRunWhole(t *testing.T) {
	e := newEnv(t, slowSpec())
	e.startExecutors("pve2", "pve3")
	a := e.startExecutorProcess("pve1", "a")
	durable, _ := bus.ExecutorConsumer(cluster, "pve1")
	testkit.Eventually(t, 30*time.Second, "replica a's consumer", func() bool {
		_, err := e.bus.JetStream().Consumer(testContext(t), bus.StreamOps, durable)
		return err == nil
	})
	e.startPlanner(e.plannerConfig("p"))
	files := repoFiles{"clusters/lab/config.yaml": e.lab(""),
		"clusters/lab/resources.yaml": "resources:\n  - ../../vm/lab/x.yaml\n  - ../../vm/lab/y.yaml\n  - ../../vm/lab/z.yaml\n",
		"vm/lab/x.yaml":               vm("x", 111, "pve1"), "vm/lab/y.yaml": vm("y", 112, "pve1"), "vm/lab/z.yaml": vm("z", 113, "pve2")}
	ev := e.announce(files, false)
	testkit.Eventually(t, time.Minute, "replica a to submit a create", func() bool {
		return strings.Contains(a.log.String(), "qmcreate") || e.sim.Count("POST", "/nodes/{node}/qemu") >= 1
	})
	e.startExecutorProcess("pve1", "b")
	a.kill(t)
	o := e.wait(ev, 2*time.Minute)
	if f := o.last(); f.Outcome != plan.OutcomeSucceeded || f.Succeeded != 3 {
		t.Fatalf("run: %+v", f)
	}
	if n := e.creates(); n != 3 {
		t.Fatalf("%d creates for 3 guests", n)
	}
	next := e.apply(files)
	if n := len(next.planned[0].Plan.Operations); n != 0 {
		t.Fatalf("the next plan has %d operations", n)
	}
}

// TestMain removes the commands built for the crash tests.
func TestMain(m *testing.M) {
	code := m.Run()
	commands.Remove()
	os.Exit(code)
}
