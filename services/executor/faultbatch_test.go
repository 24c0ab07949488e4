package executor_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// vmConf is a stopped, proxops-tagged qemu guest with its own disk, MAC and smbios1 uuid.
func vmConf(vmid int) string {
	return fmt.Sprintf(`cores: 1
memory: 1024
name: vm%d
net0: virtio=BC:24:11:00:%02X:%02X,bridge=vmbr0
scsi0: local-lvm:vm-%d-disk-0,size=2G
smbios1: uuid=6f1b2c3d-0000-4000-8000-%012d
tags: proxops
`, vmid, vmid/256, vmid%256, vmid, vmid)
}

func vmUUID(vmid int) string { return fmt.Sprintf("uuid=6f1b2c3d-0000-4000-8000-%012d", vmid) }

// client is an adapter client of the environment's simulator, for checks.
func (e *env) client() *pve.Client {
	e.t.Helper()
	cfg := e.config().PVE
	cl, err := pve.New(testContext(e.t), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}

// nonIdempotentKey names what a non-idempotent request creates or destroys ("" for other requests).
func nonIdempotentKey(r pvesim.RequestLogEntry) string {
	switch {
	case r.Method == "POST" && (r.Template == "/nodes/{node}/qemu" || r.Template == "/nodes/{node}/lxc"):
		return "guest " + r.Params["vmid"]
	case r.Method == "POST" && strings.HasSuffix(r.Template, "/{vmid}/clone"):
		return "guest " + r.Params["newid"]
	case r.Method == "POST" && r.Template == "/nodes/{node}/storage/{storage}/download-url":
		return "file " + r.Params["storage"] + ":" + r.Params["filename"]
	case r.Method == "DELETE" && (r.Template == "/nodes/{node}/qemu/{vmid}" || r.Template == "/nodes/{node}/lxc/{vmid}"):
		return "delete " + r.Params["vmid"]
	}
	return ""
}

// freshCheck reports whether a request is the read that must separate two identical non-idempotent
// requests: the vmid shown free (nextid answers 200 only for a free vmid), the storage's content listed,
// the guest's config read right before a delete.
func freshCheck(key string, r pvesim.RequestLogEntry) bool {
	if r.Method != "GET" || r.Status != http.StatusOK {
		return false
	}
	kind, id, _ := strings.Cut(key, " ")
	switch kind {
	case "guest":
		return r.Template == "/cluster/nextid" && r.Params["vmid"] == id
	case "file":
		storage, _, _ := strings.Cut(id, ":")
		return r.Template == "/nodes/{node}/storage/{storage}/content" && r.Params["storage"] == storage
	case "delete":
		return strings.HasSuffix(r.Template, "/{vmid}/pending") && r.Params["vmid"] == id
	}
	return false
}

// R2 at the executor: with 10 % of reads answered 500, 10 % of guest writes refused with a lock timeout,
// 5 % of tasks failing and jittered latency, a mixed batch completes. Retryable failures are retried
// within the retry budget, a failed task is tried once more in place and, if it fails again, reported with
// PVE's exit status, and no non-idempotent request is repeated without a fresh check of its target in between.
func TestMixedBatchCompletesThroughInjectedFaults(t *testing.T) {
	spec := pvesim.DefaultSpec()
	for _, id := range []int{100, 101, 102, 103, 110, 111, 112, 113, 120, 121, 190} {
		spec.Guests = append(spec.Guests, pvesim.GuestSpec{VMID: id, Type: "qemu", Node: "pve1", Config: vmConf(id), Running: id == 121})
	}
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(20 * time.Millisecond)}
	e := newEnv(t, spec)
	files := map[string][]byte{}
	for _, name := range []string{"a.iso", "b.iso", "c.iso"} {
		files[name] = []byte(strings.Repeat(name+" content\n", 1000))
	}
	art := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := files[strings.TrimPrefix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(art.Close)

	cfg := e.config()
	cfg.MaxDeliver = 10
	cfg.LockWait = time.Minute
	e.start(cfg)
	// Besides the random faults, the first request of four non-idempotent kinds is refused, so each is
	// certainly sent again.
	var firstMu sync.Mutex
	refusedOnce := map[string]bool{}
	e.sim.Use(func(r pvesim.RequestInfo) *pvesim.Fault {
		key := ""
		switch {
		case r.Method == "POST" && r.Template == "/nodes/{node}/qemu" && r.Params["vmid"] == "300",
			r.Method == "POST" && r.Template == "/nodes/{node}/qemu/{vmid}/clone" && r.Params["newid"] == "400",
			r.Method == "DELETE" && r.Params["vmid"] == "120":
			key = r.Method + r.Path
		case r.Method == "POST" && r.Template == "/nodes/{node}/storage/{storage}/download-url" && r.Params["filename"] == "a.iso":
			key = "a.iso"
		default:
			return nil
		}
		firstMu.Lock()
		defer firstMu.Unlock()
		if refusedOnce[key] {
			return nil
		}
		refusedOnce[key] = true
		if key == "a.iso" {
			return &pvesim.Fault{Status: 503, Message: "Service Unavailable"}
		}
		return &pvesim.Fault{Status: 500, Message: "can't lock file '/var/lock/qemu-server/lock-" + r.Params["vmid"] + ".conf' - got timeout"}
	})
	if err := e.sim.SetFaults(pvesim.Faults{Seed: 18, Jitter: pvesim.Duration(5 * time.Millisecond),
		Errors:          []pvesim.ErrorFault{{Method: "GET", Rate: 0.10, Status: 500, Message: "cluster not ready - no quorum?"}},
		LockTimeoutRate: 0.10, TaskFailureRate: 0.05}); err != nil {
		t.Fatal(err)
	}

	type check func(t *testing.T, cl *pve.Client) string
	var ops []plan.Operation
	checks := map[string]check{}
	add := func(op plan.Operation, c check) {
		op = e.dispatch(op)
		ops = append(ops, op)
		checks[op.ID] = c
	}
	for i := range 6 {
		vmid := 300 + i
		add(plan.Operation{Node: "pve1", VMID: vmid, GuestType: inventory.QEMU, Action: plan.ActionCreate,
			Values: kvs("memory", "512", "tags", "proxops"), Precondition: plan.Precondition{ExpectAbsent: true}},
			func(*testing.T, *pve.Client) string {
				if conf, ok := e.sim.Config(vmid); !ok || conf["memory"] != "512" {
					return fmt.Sprintf("created guest %d: %v", vmid, conf)
				}
				return ""
			})
	}
	for _, vmid := range []int{100, 101, 102, 103} {
		add(plan.Operation{Node: "pve1", VMID: vmid, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
			Values: kvs("memory", "2048"), Precondition: plan.Precondition{Expect: kvs("memory", "1024")}},
			func(*testing.T, *pve.Client) string {
				if conf, _ := e.sim.Config(vmid); conf["memory"] != "2048" {
					return fmt.Sprintf("configured guest %d: %v", vmid, conf)
				}
				return ""
			})
	}
	for i := range 3 {
		vmid := 400 + i
		name := fmt.Sprintf("clone-%d", i)
		add(plan.Operation{Node: "pve1", VMID: vmid, GuestType: inventory.QEMU, Action: plan.ActionClone, SourceVMID: 190,
			Storage: "local-lvm", Params: kvs("name", name), Values: kvs("memory", "1536"), Delete: []string{"ciuser"},
			Precondition: plan.Precondition{ExpectAbsent: true}},
			func(*testing.T, *pve.Client) string {
				if conf, ok := e.sim.Config(vmid); !ok || conf["name"] != name || conf["memory"] != "1536" || conf["lock"] != "" {
					return fmt.Sprintf("clone %d: %v", vmid, conf)
				}
				return ""
			})
	}
	for _, vmid := range []int{110, 111, 112, 113} {
		add(plan.Operation{Node: "pve1", VMID: vmid, GuestType: inventory.QEMU, Action: plan.ActionStart},
			func(*testing.T, *pve.Client) string {
				if !e.sim.Running(vmid) {
					return fmt.Sprintf("guest %d not running", vmid)
				}
				return ""
			})
	}
	for _, vmid := range []int{120, 121} {
		add(plan.Operation{Node: "pve1", VMID: vmid, GuestType: inventory.QEMU, Action: plan.ActionDelete,
			Precondition: plan.Precondition{Fingerprint: vmUUID(vmid), ExpectTag: true}},
			func(*testing.T, *pve.Client) string {
				if e.sim.Exists(vmid) {
					return fmt.Sprintf("guest %d still exists", vmid)
				}
				return ""
			})
	}
	for _, name := range []string{"a.iso", "b.iso", "c.iso"} {
		sum := sha256.Sum256(files[name])
		add(plan.Operation{Node: "pve1", Action: plan.ActionDownload, Storage: "local",
			Params: kvs("url", art.URL+"/"+name, "filename", name, "content", "iso", "checksum", hex.EncodeToString(sum[:]),
				"checksum-algorithm", "sha256"), Precondition: plan.Precondition{ExpectAbsent: true}},
			func(t *testing.T, cl *pve.Client) string {
				n, err := cl.Observe(testContext(t), pve.ObserveRequest{Cluster: cluster, Node: "pve1", ContentStorages: []string{"local"}})
				if err != nil {
					return err.Error()
				}
				for _, v := range n.Volumes {
					if v.Volid == "local:iso/"+name && v.Size == int64(len(files[name])) {
						return ""
					}
				}
				return "file " + name + " missing"
			})
	}

	results := map[string]plan.Result{}
	testkit.Eventually(t, 3*time.Minute, "final results of the batch", func() bool {
		for _, r := range e.results() {
			if r.Status.Final() {
				results[r.OpID] = r
			}
		}
		return len(results) == len(ops)
	})
	// The faults are off for the checks.
	e.sim.ClearFaults()
	cl := e.client()
	failed := 0
	for _, op := range ops {
		r := results[op.ID]
		switch r.Status {
		case plan.StatusSucceeded:
			if msg := checks[op.ID](t, cl); msg != "" {
				t.Errorf("%s %s succeeded, but %s", op.Action, op.ID, msg)
			}
		case plan.StatusFailed:
			failed++
			// Only failed tasks may fail an operation, reported with PVE's exit status and the task.
			if r.ErrorClass != plan.ErrorTerminal || !strings.Contains(r.Message, "injected task failure") || r.UPID == "" {
				t.Errorf("%s %d failed for another reason: %+v", op.Action, op.VMID, r)
			}
			// A failed create or clone task leaves nothing behind (PVE removes the new config).
			if u, err := pve.ParseUPID(r.UPID); err == nil && (u.Type == "qmcreate" || u.Type == "qmclone") && e.sim.Exists(op.VMID) {
				t.Errorf("failed %s left guest %d behind", op.Action, op.VMID)
			}
		default:
			t.Errorf("%s %d: %+v", op.Action, op.VMID, r)
		}
	}
	// Seed 18 fails the 10th, 15th, 21st and 27th task the simulator starts. A failed task is tried once
	// more in place, so an operation fails only when its retry fails too.
	retried := countWhere(e.results(), func(r plan.Result) bool {
		return r.Status == plan.StatusProgress && strings.HasPrefix(r.Message, "retrying after a failed task: ")
	})
	if retried == 0 {
		t.Error("no operation met an injected task failure")
	}
	t.Logf("%d failed tasks tried again; %d of %d operations failed by injected task failures", retried, failed, len(ops))

	log := e.sim.Requests()
	readFaults, writeFaults := 0, 0
	for _, r := range log {
		switch {
		case r.Method == "GET" && r.Status == 500:
			readFaults++
		case r.Method != "GET" && r.Status == 500:
			writeFaults++
		}
	}
	t.Logf("%d requests, %d failed reads, %d failed writes", len(log), readFaults, writeFaults)
	if readFaults == 0 || writeFaults == 0 {
		t.Fatalf("the faults did not happen: %d failed reads, %d failed writes", readFaults, writeFaults)
	}
	// No non-idempotent request twice without a fresh check between, and none sent again after PVE accepted
	// it unless its task failed.
	last := map[string]int{}
	repeated := map[string]bool{}
	for i, r := range log {
		key := nonIdempotentKey(r)
		if key == "" {
			continue
		}
		if prev, ok := last[key]; ok {
			repeated[key] = true
			checked := false
			for _, between := range log[prev+1 : i] {
				if freshCheck(key, between) {
					checked = true
					break
				}
			}
			if !checked {
				t.Errorf("%s %s sent again without a fresh check (requests %d and %d)", r.Method, r.Path, prev, i)
			}
			// Sent again after PVE accepted it: only when that task failed (PVE removed what it began).
			if log[prev].Status == http.StatusOK {
				if st, err := cl.TaskStatus(testContext(t), mustUPID(t, log[prev].UPID)); err != nil || st.OK() {
					t.Errorf("%s sent again after an accepted request whose task did not fail (%+v, %v)", key, st, err)
				}
			}
		}
		last[key] = i
	}
	for _, key := range []string{"guest 300", "guest 400", "delete 120", "file local:a.iso"} {
		if !repeated[key] {
			t.Errorf("%s was never sent again: the check above saw nothing", key)
		}
	}
	dlq, _ := bus.DLQSubject(cluster, "pve1")
	if _, err := e.bus.LastMessage(testContext(t), bus.StreamDLQ, dlq); err == nil {
		t.Error("an operation was dead-lettered: the retry budget was not enough")
	}
}

func mustUPID(t *testing.T, s string) pve.UPID {
	t.Helper()
	u, err := pve.ParseUPID(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
