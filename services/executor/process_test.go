package executor_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
)

var build struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// executorBinary builds the proxops-executor command once per test run.
func executorBinary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		dir, err := os.MkdirTemp("", "proxops-executor-test")
		if err != nil {
			build.err = err
			return
		}
		build.bin = filepath.Join(dir, "proxops-executor")
		cmd := exec.Command("go", "build", "-o", build.bin, "./cmd/proxops-executor")
		build.out, build.err = cmd.CombinedOutput()
	})
	if build.err != nil {
		t.Fatalf("build proxops-executor: %v\n%s", build.err, build.out)
	}
	return build.bin
}

// replica is an executor running as a separate process.
type replica struct {
	name string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan struct{}
}

// startReplica starts a replica with the simulator's root token from the environment.
func (e *env) startReplica(name string, extraEnv ...string) *replica {
	e.t.Helper()
	return e.startReplicaWith(name, nil,
		append([]string{"PROXOPS_PVE_TOKEN_VALUE=" + pvesim.DefaultRootTokenID + "=" + pvesim.DefaultRootTokenSecret}, extraEnv...))
}

// startReplicaWith starts a replica with extra flags and environment (and no PVE credentials from this
// process's environment).
func (e *env) startReplicaWith(name string, args, extraEnv []string) *replica {
	e.t.Helper()
	info := e.server.ClientInfo()
	cmd := exec.Command(executorBinary(e.t), append([]string{"--cluster", cluster, "--node", "pve1", "--replica", name,
		"--nats-url", info.URL, "--nats-user", info.User, "--pve-url", e.srv.URL, "--task-poll", "10ms",
		"--ack-wait", "2s", "--retry-backoff", "100ms", "--concurrency", "2", "--metrics-listen", ""}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PROXOPS_") && !strings.HasPrefix(kv, "SOPS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PROXOPS_NATS_PASSWORD="+info.Password, "PROXOPS_TRUSTED_PLANNER_KEYS="+testkit.PlannerKey(e.t).PublicKey())
	cmd.Env = append(cmd.Env, extraEnv...)
	r := &replica{name: name, cmd: cmd, log: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{w: r.log}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start replica %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(r.done) }()
	e.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-r.done
		}
		if e.t.Failed() {
			e.t.Logf("replica %s log:\n%s", name, r.log.String())
		}
	})
	return r
}

// kill sends SIGKILL: the process dies without any cleanup.
func (r *replica) kill(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", r.name, err)
	}
	<-r.done
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (e *env) waitConsumer() {
	e.t.Helper()
	durable, _ := bus.ExecutorConsumer(cluster, "pve1")
	testkit.Eventually(e.t, 30*time.Second, "executor consumer", func() bool {
		_, err := e.bus.JetStream().Consumer(testContext(e.t), bus.StreamOps, durable)
		return err == nil
	})
}

func (e *env) creates() int { return e.sim.Count("POST", "/nodes/{node}/qemu") }

func createOp(vmid int) plan.Operation {
	return plan.Operation{Node: "pve1", VMID: vmid, GuestType: inventory.QEMU, Action: plan.ActionCreate,
		Values: kvs("memory", "512", "tags", "proxops"), Precondition: plan.Precondition{ExpectAbsent: true}}
}

// Two replicas of a node, as separate processes, share its work; SIGKILL of the replica running a create
// mid-task leads the other to finish it by re-attaching to the task: the simulator sees one create.
func TestReplicaKilledMidTaskIsReplacedWithoutASecondCreate(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmcreate": pvesim.Duration(1500 * time.Millisecond)}
	e := newEnv(t, spec)
	a := e.startReplica("a")
	e.waitConsumer()
	op := e.dispatch(createOp(150))
	testkit.Eventually(t, 30*time.Second, "replica a to submit the create", func() bool { return e.creates() == 1 })
	e.startReplica("b")
	a.kill(t)
	r := e.final(op, 60*time.Second)
	if r.Status != plan.StatusSucceeded || r.Executor != "b" || r.Fingerprint == "" {
		t.Fatalf("result %+v", r)
	}
	if n := e.creates(); n != 1 {
		t.Fatalf("%d creates reached PVE, want 1", n)
	}

	// The surviving replica and a new one share a batch of work.
	e.startReplica("c")
	var ops []plan.Operation
	for i := range 8 {
		ops = append(ops, e.dispatch(createOp(300+i)))
	}
	executors := map[string]int{}
	for _, op := range ops {
		r := e.final(op, 60*time.Second)
		if r.Status != plan.StatusSucceeded {
			t.Fatalf("%d: %+v", op.VMID, r)
		}
		executors[r.Executor]++
	}
	if len(executors) < 2 {
		t.Errorf("one replica did all the work: %v", executors)
	}
	if n := e.creates(); n != 1+len(ops) {
		t.Fatalf("%d creates for %d guests", n, 1+len(ops))
	}
}

// A replica killed after PVE accepted a create but before it recorded the UPID: its successor finds the
// task through the node's task list and waits for it instead of creating again.
func TestReplicaKilledBeforeRecordingTheUPIDIsReplacedWithoutASecondCreate(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmcreate": pvesim.Duration(time.Second)}
	e := newEnv(t, spec)
	a := e.startReplica("a", "PROXOPS_EXECUTOR_TEST_FAULT=kill:submitted")
	e.waitConsumer()
	op := e.dispatch(createOp(160))
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatal("replica a did not die at the fault point")
	}
	// The journal holds the intent but no UPID.
	key, _ := bus.OpKey(cluster, op.Node, op.RunID, op.ID)
	m := wire.NewOperationRecord()
	if _, err := e.bus.GetProto(testContext(t), bus.BucketOps, key, m); err != nil {
		t.Fatal(err)
	}
	rec, err := wire.OperationRecordFromProto(m)
	if err != nil || rec.IntentAt.IsZero() || rec.UPID != "" || e.creates() != 1 {
		t.Fatalf("record after the kill %+v (%v), creates %d", rec, err, e.creates())
	}
	e.startReplica("b")
	r := e.final(op, 60*time.Second)
	if r.Status != plan.StatusSucceeded || r.Executor != "b" {
		t.Fatalf("result %+v", r)
	}
	if n := e.creates(); n != 1 {
		t.Fatalf("%d creates reached PVE, want 1", n)
	}
	if !e.sim.Exists(160) {
		t.Fatal("guest 160 missing")
	}
}

// The same for a clone: the replica dies after PVE accepted the clone and before it recorded the UPID. Its
// successor finds the new vmid taken by the running clone, waits for it and does the post-clone write; the
// simulator sees one clone request.
func TestReplicaKilledBeforeRecordingTheCloneUPIDIsReplacedWithoutASecondClone(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmclone": pvesim.Duration(time.Second)}
	e := newEnv(t, spec)
	a := e.startReplica("a", "PROXOPS_EXECUTOR_TEST_FAULT=kill:submitted")
	e.waitConsumer()
	clones := func() int { return e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/clone") }
	op := e.dispatch(plan.Operation{Node: "pve1", VMID: 170, GuestType: inventory.QEMU, Action: plan.ActionClone,
		SourceVMID: 100, Storage: "local-lvm", Params: kvs("name", "web-copy"), Values: kvs("memory", "1024", "tags", "proxops"),
		Delete: []string{"ciuser"}, Precondition: plan.Precondition{ExpectAbsent: true}})
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatal("replica a did not die at the fault point")
	}
	key, _ := bus.OpKey(cluster, op.Node, op.RunID, op.ID)
	m := wire.NewOperationRecord()
	if _, err := e.bus.GetProto(testContext(t), bus.BucketOps, key, m); err != nil {
		t.Fatal(err)
	}
	rec, err := wire.OperationRecordFromProto(m)
	if err != nil || rec.IntentAt.IsZero() || rec.UPID != "" || rec.TaskType != "qmclone" || clones() != 1 {
		t.Fatalf("record after the kill %+v (%v), clones %d", rec, err, clones())
	}
	e.startReplica("b")
	r := e.final(op, 60*time.Second)
	if r.Status != plan.StatusSucceeded || r.Executor != "b" || r.Fingerprint == "" {
		t.Fatalf("result %+v", r)
	}
	if n := clones(); n != 1 {
		t.Fatalf("%d clone requests reached PVE, want 1", n)
	}
	conf, ok := e.sim.Config(170)
	if !ok || conf["name"] != "web-copy" || conf["memory"] != "1024" || conf["tags"] != "proxops" || conf["lock"] != "" {
		t.Fatalf("clone config %v", conf)
	}
}

// An executor run as its own process takes its PVE token and the cloud-init secrets an operation refers to
// from a SOPS file (--secrets-file, age key from SOPS_AGE_KEY_FILE).
func TestSeparateExecutorResolvesCredentialsAndSecretsFromASOPSFile(t *testing.T) {
	demo, err := filepath.Abs(filepath.Join("..", "..", "internal", "secrets", "testdata", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	spec := pvesim.DefaultSpec()
	spec.Tokens = append(spec.Tokens, pvesim.TokenSpec{ID: "proxops@pve!proxops", Secret: "0b6f2d4e-8a31-4c57-9e02-d1c3a5f7b9e4"})
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	e.startReplicaWith("sops", []string{"--secrets-file", filepath.Join(demo, "secrets.sops.yaml"),
		"--secrets-pve-user", "proxops-user", "--secrets-pve-token-id", "proxops-token-id", "--secrets-pve-token", "proxops-token"},
		[]string{"SOPS_AGE_KEY_FILE=" + filepath.Join(demo, "demo.agekey"), "HOME=" + t.TempDir()})
	e.waitConsumer()
	op := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: []plan.KV{{Key: "sshkeys", SecretRefs: []string{"cloud-init.ssh-keys.main", "cloud-init.ssh-keys.backup"}},
			{Key: "cipassword", SecretRefs: []string{"cloud-init.passwords.default"}}}})
	e.mustSucceed(op)
	conf, _ := e.sim.Config(100)
	keys, err := inventory.DecodeSSHKeys(conf["sshkeys"])
	if err != nil || len(keys) != 2 || !strings.HasSuffix(keys[0], "demo-main@proxops.invalid") || !strings.HasSuffix(keys[1], "demo-backup@proxops.invalid") {
		t.Fatalf("sshkeys on PVE %q (%v)", conf["sshkeys"], err)
	}
	if conf["cipassword"] == "" {
		t.Fatal("no cipassword on PVE")
	}
	for _, r := range e.sim.Requests() {
		if r.Method == "POST" && r.User != "proxops@pve!proxops" {
			t.Fatalf("%s %s as %q, want the token from the SOPS file", r.Method, r.Path, r.User)
		}
	}
}
