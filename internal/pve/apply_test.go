package pve_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

// journal records what Apply journals.
type journal struct {
	mu      sync.Mutex
	intents []pve.Intent
	upids   []string
}

func (j *journal) Intend(_ context.Context, in pve.Intent) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.intents = append(j.intents, in)
	return nil
}

func (j *journal) Submitted(_ context.Context, u pve.UPID) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.upids = append(j.upids, u.String())
	return nil
}

func apply(t *testing.T, cl *pve.Client, op plan.Operation, opts pve.ApplyOptions) (pve.Outcome, error) {
	t.Helper()
	return cl.Apply(testContext(t), op, opts)
}

func mustApply(t *testing.T, cl *pve.Client, op plan.Operation, opts pve.ApplyOptions) pve.Outcome {
	t.Helper()
	out, err := apply(t, cl, op, opts)
	if err != nil {
		t.Fatalf("%s %d: %v (class %s)", op.Action, op.VMID, err, pve.ClassOf(err))
	}
	return out
}

func kvs(pairs ...string) []plan.KV {
	var out []plan.KV
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, plan.KV{Key: pairs[i], Value: pairs[i+1]})
	}
	return out
}

func TestCreateMakesTheGuestAndReportsItsFingerprint(t *testing.T) {
	c := newSim(t, baseSpec())
	cl := c.client(t)
	j := &journal{}
	vm := plan.Operation{Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Action: plan.ActionCreate,
		Values:       kvs("name", "web-01", "memory", "2048", "cores", "2", "scsi0", "local-lvm:8", "net0", "virtio,bridge=vmbr0", "tags", "proxops"),
		Precondition: plan.Precondition{ExpectAbsent: true}}
	out := mustApply(t, cl, vm, pve.ApplyOptions{Journal: j})
	conf, ok := c.sim.Config(101)
	if !ok || conf["name"] != "web-01" || !strings.HasPrefix(conf["scsi0"], "local-lvm:vm-101-disk-0") {
		t.Fatalf("simulator config after create: %v", conf)
	}
	if !strings.HasPrefix(out.Fingerprint, "uuid=") || !strings.Contains(conf["smbios1"], strings.TrimPrefix(out.Fingerprint, "uuid=")) {
		t.Errorf("fingerprint %q, smbios1 %q", out.Fingerprint, conf["smbios1"])
	}
	if len(j.intents) != 1 || j.intents[0].TaskType != "qmcreate" || len(j.upids) != 1 || j.upids[0] != out.UPID {
		t.Errorf("journal %+v, outcome upid %s", j, out.UPID)
	}

	ct := plan.Operation{Node: "pve1", VMID: 201, GuestType: inventory.LXC, Action: plan.ActionCreate,
		Values: kvs("hostname", "ct-01", "ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
			"rootfs", "local-lvm:4", "net0", "name=eth0,bridge=vmbr0", "memory", "512"),
		Precondition: plan.Precondition{ExpectAbsent: true}}
	out = mustApply(t, cl, ct, pve.ApplyOptions{Journal: j})
	if conf, ok := c.sim.Config(201); !ok || conf["hostname"] != "ct-01" {
		t.Fatalf("simulator config after lxc create: %v", conf)
	}
	if !strings.HasPrefix(out.Fingerprint, "hwaddr=") {
		t.Errorf("lxc fingerprint %q", out.Fingerprint)
	}

	// Creating on a vmid that exists (no earlier attempt of this operation) is a conflict, and nothing is sent.
	before := c.count("POST", "/nodes/{node}/qemu")
	_, err := apply(t, cl, vm, pve.ApplyOptions{Journal: &journal{}})
	if pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("create over an existing vmid: %v (class %s)", err, pve.ClassOf(err))
	}
	if c.count("POST", "/nodes/{node}/qemu") != before {
		t.Fatal("a create was sent although the vmid exists")
	}
}

// A redelivered create whose first delivery died after PVE accepted it re-attaches: by the recorded UPID,
// or, with only the intent recorded, through the node's task list. No second create is sent.
func TestRedeliveredCreateReattachesInsteadOfResubmitting(t *testing.T) {
	spec := baseSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmcreate": pvesim.Duration(300 * time.Millisecond)}
	c := newSim(t, spec)
	cl := c.client(t)
	op := plan.Operation{Node: "pve1", VMID: 150, GuestType: inventory.QEMU, Action: plan.ActionCreate,
		Values: kvs("name", "db", "memory", "1024"), Precondition: plan.Precondition{ExpectAbsent: true}}

	// The first delivery records its intent and sends the create, then "dies" (its context ends).
	j := &journal{}
	ctx, cancel := context.WithCancel(testContext(t))
	go func() {
		for c.count("POST", "/nodes/{node}/qemu") == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := cl.Apply(ctx, op, pve.ApplyOptions{Journal: j}); err == nil {
		t.Fatal("the first delivery finished although its context ended")
	}
	if len(j.intents) != 1 {
		t.Fatalf("intents %+v", j.intents)
	}
	in := j.intents[0]

	// Redelivery with the intent only: the running task is found and waited for.
	j2 := &journal{}
	out := mustApply(t, cl, op, pve.ApplyOptions{Journal: j2, Prior: pve.Prior{Intent: &in}})
	if n := c.count("POST", "/nodes/{node}/qemu"); n != 1 {
		t.Fatalf("%d creates sent, want 1", n)
	}
	if out.UPID == "" || len(j2.upids) != 1 || j2.upids[0] != out.UPID || len(j2.intents) != 0 {
		t.Errorf("re-attach outcome %+v, journal %+v", out, j2)
	}
	if !c.sim.Exists(150) || out.Fingerprint == "" {
		t.Fatalf("guest missing or no fingerprint: %+v", out)
	}

	// A third delivery with the recorded UPID re-attaches to the finished task: still one create.
	out = mustApply(t, cl, op, pve.ApplyOptions{Prior: pve.Prior{Intent: &in, UPID: j2.upids[0]}})
	if n := c.count("POST", "/nodes/{node}/qemu"); n != 1 {
		t.Fatalf("%d creates sent after re-attach, want 1", n)
	}
	if !out.AlreadyDone || out.Fingerprint == "" {
		t.Errorf("re-attached outcome %+v", out)
	}
}

// An intent without a task (the executor died before sending) leads to a fresh check and one create.
func TestIntentWithoutTaskSubmitsAfterAFreshCheck(t *testing.T) {
	c := newSim(t, baseSpec())
	cl := c.client(t)
	in := pve.Intent{TaskType: "qmcreate", Node: "pve1", ID: "160", VMID: 160, At: time.Now()}
	op := plan.Operation{Node: "pve1", VMID: 160, GuestType: inventory.QEMU, Action: plan.ActionCreate,
		Values: kvs("memory", "512"), Precondition: plan.Precondition{ExpectAbsent: true}}
	mustApply(t, cl, op, pve.ApplyOptions{Prior: pve.Prior{Intent: &in}})
	if c.count("POST", "/nodes/{node}/qemu") != 1 || c.count("GET", "/cluster/nextid") < 1 || !c.sim.Exists(160) {
		t.Fatalf("counts %v", c.sim.Counts())
	}
}

func TestConfigureWritesWithTheDigestAndRefusesAChangedGuest(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM},
		{VMID: 200, Type: "lxc", Node: "pve1", Config: seedCT}}
	c := newSim(t, spec)
	cl := c.client(t)
	n, err := cl.Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "pve1"})
	if err != nil {
		t.Fatal(err)
	}
	vm, ct := n.Guests[0], n.Guests[1]

	op := plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: kvs("memory", "4096", "description", "web server"), Delete: []string{"scsihw"},
		Precondition: plan.Precondition{Digest: vm.Digest}}
	out := mustApply(t, cl, op, pve.ApplyOptions{})
	conf, _ := c.sim.Config(100)
	if conf["memory"] != "4096" || conf["description"] != "web server" || conf["scsihw"] != "" {
		t.Fatalf("config after configure: %v", conf)
	}
	if out.UPID == "" || !strings.Contains(out.UPID, ":qmconfig:100:") {
		t.Errorf("qemu config write did not run as a qmconfig task: %q", out.UPID)
	}
	for _, r := range c.sim.Requests() {
		if r.Method == "POST" && r.Template == "/nodes/{node}/qemu/{vmid}/config" && r.Params["digest"] != vm.Digest {
			t.Errorf("config write without the observed digest: %v", r.Params)
		}
	}

	// Redelivered after success: the values are there, nothing is written again.
	writes := c.count("POST", "/nodes/{node}/qemu/{vmid}/config")
	out = mustApply(t, cl, op, pve.ApplyOptions{})
	if !out.AlreadyDone || c.count("POST", "/nodes/{node}/qemu/{vmid}/config") != writes {
		t.Fatalf("redelivered configure wrote again: %+v", out)
	}

	// Someone edits the container by hand: the write with the observed digest is a conflict.
	if err := c.sim.SetConfig(200, "cores", "3"); err != nil {
		t.Fatal(err)
	}
	ctOp := plan.Operation{Node: "pve1", VMID: 200, GuestType: inventory.LXC, Action: plan.ActionConfigure,
		Values: kvs("memory", "1024"), Precondition: plan.Precondition{Digest: ct.Digest}}
	if _, err := apply(t, cl, ctOp, pve.ApplyOptions{}); pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("write over a hand edit: %v (class %s)", err, pve.ClassOf(err))
	}
	if conf, _ := c.sim.Config(200); conf["memory"] != "512" {
		t.Fatalf("the hand-edited guest was overwritten: %v", conf)
	}

	// A later write of the sequence checks the values it expects and writes with the fresh digest (PUT).
	ctOp.Precondition = plan.Precondition{Expect: kvs("memory", "512", "swap", "")}
	mustApply(t, cl, ctOp, pve.ApplyOptions{})
	if conf, _ := c.sim.Config(200); conf["memory"] != "1024" || conf["cores"] != "3" {
		t.Fatalf("lxc config after configure: %v", conf)
	}
	if c.count("PUT", "/nodes/{node}/lxc/{vmid}/config") != 1 {
		t.Errorf("lxc writes: %v", c.sim.Counts())
	}
	ctOp.Values = kvs("memory", "2048")
	if _, err := apply(t, cl, ctOp, pve.ApplyOptions{}); pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("write with a stale expectation: %v", err)
	}

	// Setting and deleting one key in one request is refused before anything is sent.
	bad := plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: kvs("ciuser", "x"), Delete: []string{"ciuser"}}
	if _, err := apply(t, cl, bad, pve.ApplyOptions{}); pve.ClassOf(err) != plan.ErrorTerminal {
		t.Fatalf("set and delete of one key: %v", err)
	}
}

// secretStore resolves references from a map.
type secretStore map[string]string

func (s secretStore) Resolve(_ context.Context, ref string) (string, error) {
	v, ok := s[ref]
	if !ok {
		return "", errors.New("no such secret")
	}
	return v, nil
}

func TestConfigureResolvesSecretReferences(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	c := newSim(t, spec)
	cl := c.client(t)
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHx4yk0cS2cVb3P1oW0T2Zb9nX8t6k7s9aYb0R1d2e3f ops@example"
	store := secretStore{"cloud-init.ssh-keys.main": key, "cloud-init.passwords.default": "s3cret pass"}
	op := plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: []plan.KV{{Key: "sshkeys", SecretRefs: []string{"cloud-init.ssh-keys.main"}},
			{Key: "cipassword", SecretRefs: []string{"cloud-init.passwords.default"}}}}
	mustApply(t, cl, op, pve.ApplyOptions{Secrets: store})
	conf, _ := c.sim.Config(100)
	keys, err := inventory.DecodeSSHKeys(conf["sshkeys"])
	if err != nil || len(keys) != 1 || keys[0] != key {
		t.Fatalf("sshkeys stored as %q (%v)", conf["sshkeys"], err)
	}
	if conf["cipassword"] == "" || strings.Contains(conf["cipassword"], "s3cret") {
		t.Fatalf("cipassword stored as %q", conf["cipassword"])
	}
	op.Values[0].SecretRefs = []string{"cloud-init.ssh-keys.missing"}
	_, err = apply(t, cl, op, pve.ApplyOptions{Secrets: store})
	if pve.ClassOf(err) != plan.ErrorTerminal || !strings.Contains(err.Error(), "cloud-init.ssh-keys.missing") {
		t.Fatalf("missing secret: %v", err)
	}
}

// A secret reference under a key that does not carry secrets is refused before anything is read or written:
// the secret would otherwise land where every reader of the config sees it.
func TestSecretReferenceOutsideSecretKeysIsRefused(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	c := newSim(t, spec)
	cl := c.client(t)
	store := secretStore{"cloud-init.passwords.default": "s3cret pass"}
	for _, key := range []string{"description", "tags", "args"} {
		c.sim.ResetLog()
		op := plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
			Values: []plan.KV{{Key: key, SecretRefs: []string{"cloud-init.passwords.default"}}}}
		_, err := apply(t, cl, op, pve.ApplyOptions{Secrets: store})
		if pve.ClassOf(err) != plan.ErrorTerminal || !strings.Contains(err.Error(), "only allowed for cipassword and sshkeys") {
			t.Errorf("%s: %v, want a terminal refusal", key, err)
		}
		if n := len(c.sim.Requests()); n != 0 {
			t.Errorf("%s: %d requests reached PVE", key, n)
		}
	}
	if conf, _ := c.sim.Config(100); strings.Contains(fmt.Sprint(conf), "s3cret") {
		t.Fatalf("the secret reached the config: %v", conf)
	}
}

func TestPowerActionsChangeStateAndTreatNoOpsAsDone(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM},
		{VMID: 200, Type: "lxc", Node: "pve1", Config: seedCT}}
	c := newSim(t, spec)
	cl := c.client(t)
	for _, g := range []struct {
		vmid int
		typ  inventory.GuestType
	}{{100, inventory.QEMU}, {200, inventory.LXC}} {
		op := func(a plan.Action, params ...string) plan.Operation {
			return plan.Operation{Node: "pve1", VMID: g.vmid, GuestType: g.typ, Action: a, Params: kvs(params...)}
		}
		mustApply(t, cl, op(plan.ActionStart), pve.ApplyOptions{})
		if !c.sim.Running(g.vmid) {
			t.Fatalf("%d not running after start", g.vmid)
		}
		if out := mustApply(t, cl, op(plan.ActionStart), pve.ApplyOptions{}); !out.AlreadyDone {
			t.Errorf("%d: second start not reported as done: %+v", g.vmid, out)
		}
		mustApply(t, cl, op(plan.ActionShutdown, "timeout", "30"), pve.ApplyOptions{})
		if c.sim.Running(g.vmid) {
			t.Fatalf("%d running after shutdown", g.vmid)
		}
		mustApply(t, cl, op(plan.ActionStop), pve.ApplyOptions{})
	}
	for _, r := range c.sim.Requests() {
		if strings.HasSuffix(r.Template, "/status/shutdown") && (r.Params["timeout"] != "30" || r.Params["forceStop"] != "1") {
			t.Errorf("shutdown sent %v, want timeout 30 and forceStop 1", r.Params)
		}
	}
}

// A delete needs the ownership tag and the recorded fingerprint, re-verified on the live guest; a running
// guest is stopped first.
func TestDeleteVerifiesTagAndFingerprintRightBeforeDestroying(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM, Running: true},
		{VMID: 101, Type: "qemu", Node: "pve1", Config: strings.Replace(seedVM, "tags: proxops", "tags: web", 1)},
		{VMID: 200, Type: "lxc", Node: "pve1", Config: seedCT},
	}
	c := newSim(t, spec)
	cl := c.client(t)
	n, err := cl.Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "pve1"})
	if err != nil {
		t.Fatal(err)
	}
	fp := map[int]string{}
	for _, g := range n.Guests {
		fp[g.VMID] = inventory.Fingerprint(g)
	}
	del := func(vmid int, typ inventory.GuestType, fingerprint string, tag bool) plan.Operation {
		return plan.Operation{Node: "pve1", VMID: vmid, GuestType: typ, Action: plan.ActionDelete,
			Precondition: plan.Precondition{Fingerprint: fingerprint, ExpectTag: tag}}
	}
	refusals := []struct {
		name string
		op   plan.Operation
	}{
		{"no fingerprint", del(100, inventory.QEMU, "", true)},
		{"no tag expected", del(100, inventory.QEMU, fp[100], false)},
		{"wrong fingerprint", del(100, inventory.QEMU, "uuid=00000000-0000-4000-8000-000000000000", true)},
		{"untagged guest", del(101, inventory.QEMU, fp[101], true)},
	}
	for _, r := range refusals {
		if _, err := apply(t, cl, r.op, pve.ApplyOptions{}); err == nil {
			t.Errorf("%s: delete accepted", r.name)
		}
	}
	if n := c.count("DELETE", "/nodes/{node}/qemu/{vmid}"); n != 0 {
		t.Fatalf("%d DELETEs reached PVE for refused deletes", n)
	}
	// Hand-cloned identity: the fingerprint changes between observe and delete.
	if err := c.sim.SetConfig(200, "net0", "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:99:99:99,type=veth"); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(t, cl, del(200, inventory.LXC, fp[200], true), pve.ApplyOptions{}); pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("delete of a guest whose identity changed: %v", err)
	}
	if !c.sim.Exists(200) {
		t.Fatal("guest 200 was deleted")
	}
	j := &journal{}
	owned := func(vmid int) []string {
		n, err := cl.Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "pve1", AllContent: true})
		if err != nil {
			t.Fatal(err)
		}
		var vols []string
		for _, v := range n.Volumes {
			if v.VMID == vmid {
				vols = append(vols, v.Volid)
			}
		}
		return vols
	}
	if len(owned(100)) == 0 {
		t.Fatal("setup: guest 100 owns no volume")
	}
	mustApply(t, cl, del(100, inventory.QEMU, fp[100], true), pve.ApplyOptions{Journal: j})
	if c.sim.Exists(100) || c.sim.Running(100) {
		t.Fatal("guest 100 still exists")
	}
	if vols := owned(100); len(vols) != 0 {
		t.Errorf("volumes of the deleted guest remain: %v", vols)
	}
	if r := c.lastRequest(t, "DELETE", "/nodes/{node}/qemu/{vmid}"); r.Params["purge"] != "1" {
		t.Errorf("delete request %v", r.Params)
	}
	if c.count("POST", "/nodes/{node}/qemu/{vmid}/status/stop") != 1 || len(j.intents) != 2 {
		t.Errorf("running guest not stopped first: %v, intents %+v", c.sim.Counts(), j.intents)
	}
	if out := mustApply(t, cl, del(100, inventory.QEMU, fp[100], true), pve.ApplyOptions{}); !out.AlreadyDone {
		t.Errorf("redelivered delete: %+v", out)
	}
}

func TestErrorsAreClassifiedAtTheBoundary(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM},
		{VMID: 101, Type: "qemu", Node: "pve1", Config: strings.ReplaceAll(seedVM, "vm-100-", "vm-101-") + "lock: backup\n"}}
	c := newSim(t, spec)
	var mu sync.Mutex
	fault := map[string]*pvesim.Fault{}
	c.sim.Use(func(r pvesim.RequestInfo) *pvesim.Fault {
		mu.Lock()
		defer mu.Unlock()
		return fault[r.Method+" "+r.Template]
	})
	setFault := func(key string, f *pvesim.Fault) {
		mu.Lock()
		defer mu.Unlock()
		fault = map[string]*pvesim.Fault{key: f}
	}
	cl := c.client(t)
	configure := plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure, Values: kvs("cores", "4")}
	cases := []struct {
		name  string
		fault *pvesim.Fault
		class plan.ErrorClass
		lock  string
	}{
		{"lock timeout", &pvesim.Fault{Status: 500, Message: "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"}, plan.ErrorRetryable, pve.LockFileContended},
		{"node unreachable", &pvesim.Fault{Status: 595, Message: "Connection refused"}, plan.ErrorRetryable, ""},
		{"bad gateway", &pvesim.Fault{Status: 502, Message: "Bad Gateway"}, plan.ErrorRetryable, ""},
		{"digest", &pvesim.Fault{Status: 500, Message: "checksum mismatch (file change by other user?)"}, plan.ErrorConflict, ""},
		{"permission", &pvesim.Fault{Status: 403, Message: "Permission check failed"}, plan.ErrorTerminal, ""},
		{"parameter", &pvesim.Fault{Status: 400, Message: "Parameter verification failed.", Errors: map[string]string{"cores": "value must have a minimum value of 1"}}, plan.ErrorTerminal, ""},
		{"plain die", &pvesim.Fault{Status: 500, Message: "unable to parse value of 'cores'"}, plan.ErrorTerminal, ""},
	}
	for _, tc := range cases {
		setFault("POST /nodes/{node}/qemu/{vmid}/config", tc.fault)
		before := c.count("POST", "/nodes/{node}/qemu/{vmid}/config")
		_, err := apply(t, cl, configure, pve.ApplyOptions{})
		if got := pve.ClassOf(err); got != tc.class {
			t.Errorf("%s: class %q (%v), want %q", tc.name, got, err, tc.class)
		}
		if lock, _ := pve.LockOf(err); lock != tc.lock {
			t.Errorf("%s: lock %q, want %q", tc.name, lock, tc.lock)
		}
		// Writes are never retried by the client, whatever the answer.
		if n := c.count("POST", "/nodes/{node}/qemu/{vmid}/config") - before; n != 1 {
			t.Errorf("%s: the write was sent %d times", tc.name, n)
		}
	}
	// Reads are retried on transient answers.
	setFault("", nil)
	var calls int
	c.sim.Use(func(r pvesim.RequestInfo) *pvesim.Fault {
		if r.Template == "/nodes/{node}/qemu/{vmid}/pending" && r.Method == "GET" {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls <= 2 {
				return &pvesim.Fault{Status: 503, Message: "Service Unavailable"}
			}
		}
		return nil
	})
	if _, ok, err := cl.ReadGuest(testContext(t), "pve1", inventory.QEMU, 100); err != nil || !ok {
		t.Fatalf("read with two transient failures: %v", err)
	}
	// So are reads answered 500 without one of PVE's semantic answers; once the attempts are spent the
	// failure is retryable, not terminal. A missing config (a semantic 500) is an answer, asked once.
	var pending500 int
	c.sim.Use(func(r pvesim.RequestInfo) *pvesim.Fault {
		if r.Template == "/nodes/{node}/qemu/{vmid}/pending" && r.Params["vmid"] == "100" {
			mu.Lock()
			defer mu.Unlock()
			pending500++
			if pending500 <= 2 || pending500 >= 4 {
				return &pvesim.Fault{Status: 500, Message: "cluster not ready - no quorum?"}
			}
		}
		return nil
	})
	if _, ok, err := cl.ReadGuest(testContext(t), "pve1", inventory.QEMU, 100); err != nil || !ok {
		t.Fatalf("read with two transient 500s: %v", err)
	}
	if _, _, err := cl.ReadGuest(testContext(t), "pve1", inventory.QEMU, 100); pve.ClassOf(err) != plan.ErrorRetryable {
		t.Fatalf("read failing with 500 on every attempt: %v (class %s)", err, pve.ClassOf(err))
	}
	missing := c.count("GET", "/nodes/{node}/qemu/{vmid}/pending")
	if _, ok, err := cl.ReadGuest(testContext(t), "pve1", inventory.QEMU, 777); err != nil || ok {
		t.Fatalf("read of a missing guest: ok %v, %v", ok, err)
	}
	if n := c.count("GET", "/nodes/{node}/qemu/{vmid}/pending") - missing; n != 1 {
		t.Errorf("a missing config was asked %d times", n)
	}
	// A guest locked by a long job reports the lock, so the executor can wait for it.
	locked := configure
	locked.VMID = 101
	_, err := apply(t, cl, locked, pve.ApplyOptions{})
	if lock, ok := pve.LockOf(err); !ok || lock != "backup" || pve.ClassOf(err) != plan.ErrorRetryable {
		t.Fatalf("locked guest: %v (lock %q)", err, lock)
	}
}
