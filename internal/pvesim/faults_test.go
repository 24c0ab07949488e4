package pvesim_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

func faultCluster(t *testing.T, f pvesim.Faults) *testCluster {
	spec := pvesim.DefaultSpec()
	spec.Faults = f
	return newCluster(t, spec)
}

// statuses sends n version requests and returns their statuses in order.
func (c *testCluster) statuses(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = c.do("GET", "/version", nil).Status
	}
	return out
}

// The same seed and the same request sequence give the same faults; another seed gives others.
func TestFaultsAreDeterministicPerSeed(t *testing.T) {
	f := pvesim.Faults{Seed: 42, Errors: []pvesim.ErrorFault{{Method: "GET", Rate: 0.3, Status: 500}}}
	a := faultCluster(t, f).statuses(200)
	b := faultCluster(t, f).statuses(200)
	f.Seed = 43
	other := faultCluster(t, f).statuses(200)
	same, failed := true, 0
	for i := range a {
		if a[i] != b[i] {
			same = false
		}
		if a[i] == 500 {
			failed++
		}
	}
	if !same {
		t.Fatalf("two runs with seed 42 differ:\n%v\n%v", a, b)
	}
	if failed == 0 || failed == len(a) {
		t.Fatalf("%d of %d failed: want some", failed, len(a))
	}
	differs := false
	for i := range a {
		if a[i] != other[i] {
			differs = true
		}
	}
	if !differs {
		t.Fatal("seed 43 produced the same sequence as seed 42")
	}
}

// An error rate of 10 % on reads fails 100 ± 30 of 1,000 reads and no writes; the answer carries the
// configured status and message.
func TestErrorRateIsWithinTolerance(t *testing.T) {
	c := faultCluster(t, pvesim.Faults{Seed: 7, Errors: []pvesim.ErrorFault{{Method: "GET", Path: "/version", Rate: 0.1, Message: "pmxcfs busy"}}})
	failed := 0
	for i := 0; i < 1000; i++ {
		r := c.do("GET", "/version", nil)
		if r.Status == 500 {
			failed++
			if r.Message != "pmxcfs busy\n" {
				t.Fatalf("fault message %q", r.Message)
			}
		}
	}
	if failed < 70 || failed > 130 {
		t.Fatalf("%d of 1000 reads failed, want 100 ± 30", failed)
	}
	if r := c.do("GET", "/nodes", nil); r.Status != 200 {
		t.Fatalf("a path the rule does not match failed: %d", r.Status)
	}
}

// Lock-timeout faults answer guest writes with PVE's flock message; task faults end tasks with an error.
func TestLockTimeoutAndTaskFaults(t *testing.T) {
	c := faultCluster(t, pvesim.Faults{Seed: 1, LockTimeoutRate: 1})
	r := c.do("POST", "/nodes/pve1/qemu", form("vmid", "100"))
	expectErr(t, r, 500, "", "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout")
	if r := c.do("GET", "/nodes/pve1/qemu", nil); r.Status != 200 {
		t.Fatalf("reads are not writes: %d", r.Status)
	}
	if err := c.sim.SetFaults(pvesim.Faults{TaskFailureRate: 1, TaskTypes: []string{"qmstart"}, TaskFailureMessage: "start failed: QEMU exited with code 1"}); err != nil {
		t.Fatal(err)
	}
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100"))
	if _, st := c.taskOf("POST", "/nodes/pve1/qemu/100/status/start", nil); st != "start failed: QEMU exited with code 1" {
		t.Fatalf("injected task failure: %q", st)
	}
	if c.sim.Running(100) {
		t.Fatal("a failed task must not do its work")
	}
	// A failed create leaves no guest behind (PVE deletes the config file the API call wrote with lock: create).
	if err := c.sim.SetFaults(pvesim.Faults{TaskFailureRate: 1, TaskTypes: []string{"qmcreate", "vzcreate"}}); err != nil {
		t.Fatal(err)
	}
	if _, st := c.taskOf("POST", "/nodes/pve1/qemu", form("vmid", "101")); st != "injected task failure" {
		t.Fatalf("injected create failure: %q", st)
	}
	if c.sim.Exists(101) {
		cfg, _ := c.sim.Config(101)
		t.Fatalf("a failed create left guest 101 behind: %v", cfg)
	}
	if err := c.sim.SetFaults(pvesim.Faults{Errors: []pvesim.ErrorFault{{Rate: 2}}}); err == nil {
		t.Fatal("a rate above 1 must be refused")
	}
}

// With a worker limit of k, at most k requests are inside the API at once and the rest queue.
func TestWorkerLimitQueuesRequests(t *testing.T) {
	const k, n = 3, 10
	c := faultCluster(t, pvesim.Faults{MaxConcurrent: k})
	var inside, maxInside atomic.Int32
	gate := make(chan struct{})
	c.sim.Use(func(pvesim.RequestInfo) *pvesim.Fault {
		now := inside.Add(1)
		for {
			m := maxInside.Load()
			if now <= m || maxInside.CompareAndSwap(m, now) {
				break
			}
		}
		<-gate
		inside.Add(-1)
		return nil
	})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", c.srv.URL+"/api2/json/version", nil)
			req.Header.Set("Authorization", rootToken)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	testkit.Eventually(t, 10*time.Second, "k requests inside and the rest queued", func() bool {
		serving, queued := c.sim.Load()
		return serving == k && queued == n-k && inside.Load() == k
	})
	close(gate)
	wg.Wait()
	if m := maxInside.Load(); m != k {
		t.Fatalf("%d requests were inside at once, want %d", m, k)
	}
}

// Latency delays each request by at least the fixed part.
func TestLatencyDelaysRequests(t *testing.T) {
	c := faultCluster(t, pvesim.Faults{Latency: pvesim.Duration(30 * time.Millisecond), Jitter: pvesim.Duration(10 * time.Millisecond)})
	start := time.Now()
	c.do("GET", "/version", nil)
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("request took %v, want at least the 30ms latency", d)
	}
}

// The /_sim/ routes set faults, patch guests, and show the redacted request log, counters and state.
func TestSimRoutes(t *testing.T) {
	c := defaultCluster(t)
	call := func(method, path string, body any) (int, []byte) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, c.srv.URL+path, rd)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if st, b := call("PUT", "/_sim/faults", map[string]any{"seed": 3, "latency": "1ms",
		"errors": []map[string]any{{"method": "GET", "path": "/nodes/*", "rate": 1, "status": 596, "message": "Connection timed out"}}}); st != 200 {
		t.Fatalf("put faults: %d %s", st, b)
	}
	if r := c.do("GET", "/nodes/pve1/qemu", nil); r.Status != 596 || r.Message != "Connection timed out\n" {
		t.Fatalf("injected 596: %d %q", r.Status, r.Message)
	}
	if st, _ := call("DELETE", "/_sim/faults", nil); st != 200 {
		t.Fatal("clear faults")
	}
	blob := append([]byte{0, 0, 0, 11}, []byte("ssh-ed25519")...)
	blob = append(blob, 0, 0, 0, 32)
	blob = append(blob, bytes.Repeat([]byte{7}, 32)...)
	key := "ssh-ed25519%20" + strings.NewReplacer("+", "%2B", "/", "%2F", "=", "%3D").Replace(base64.StdEncoding.EncodeToString(blob))
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "cipassword", "hunter2", "sshkeys", key))
	lock := "backup"
	if st, b := call("POST", "/_sim/guests/100", map[string]any{"lock": lock, "lockFor": "50ms", "ignoreACPI": true}); st != 200 {
		t.Fatalf("patch guest: %d %s", st, b)
	}
	if r := c.do("PUT", "/nodes/pve1/qemu/100/config", form("cores", "2")); r.Message != "VM 100 is locked (backup)\n" {
		t.Fatalf("after the patch: %q", r.Message)
	}
	_, b := call("GET", "/_sim/requests", nil)
	if strings.Contains(string(b), "hunter2") || strings.Contains(string(b), "ssh-ed25519") || !strings.Contains(string(b), `"cipassword": "**********"`) {
		t.Fatalf("request log not redacted: %s", b)
	}
	var counters map[string]int
	_, b = call("GET", "/_sim/counters", nil)
	if err := json.Unmarshal(b, &counters); err != nil || counters["POST /nodes/{node}/qemu"] != 1 {
		t.Fatalf("counters %s", b)
	}
	if _, b = call("GET", "/_sim/state", nil); !strings.Contains(string(b), `"vmid": 100`) {
		t.Fatalf("state %s", b)
	}
	if st, _ := call("POST", "/_sim/reset", nil); st != 200 || len(c.sim.Requests()) != 0 {
		t.Fatal("reset must clear the log")
	}
	if st, _ := call("GET", "/_sim/nothing", nil); st != 404 {
		t.Fatalf("unknown route: %d", st)
	}
}

// The spec file's fault, lock, lag and mirror keys load from YAML.
func TestSpecFileLoadsFaultSettings(t *testing.T) {
	spec, err := pvesim.ParseSpec("cluster.yaml", []byte(`
nodes: [{name: pve1}]
storages: [{id: local, type: dir, content: [iso]}]
lockTimeouts: {default: 150ms}
resourcesLag: 2s
mirrors: {"https://example.com/a.iso": /tmp/a.iso}
guests:
  - {vmid: 100, type: qemu, node: pve1, ha: true, ignoreACPI: true, config: "cores: 1\n"}
faults:
  seed: 9
  latency: 5ms
  errors: [{method: GET, path: "/nodes/*", rate: 0.5, status: 596}]
  maxConcurrent: 2
  longLocks: [{vmid: 100, lock: backup, after: 0s, for: 1h}]
`))
	if err != nil {
		t.Fatal(err)
	}
	sim, err := pvesim.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	f := sim.CurrentFaults()
	if f.Seed != 9 || time.Duration(f.Latency) != 5*time.Millisecond || len(f.Errors) != 1 || f.Errors[0].Status != 596 || f.MaxConcurrent != 2 {
		t.Fatalf("faults %+v", f)
	}
	st := sim.CurrentSettings()
	if time.Duration(st.LockTimeouts["default"]) != 150*time.Millisecond || time.Duration(*st.ResourcesLag) != 2*time.Second {
		t.Fatalf("settings %+v", st)
	}
	if sim.Mirrors()["https://example.com/a.iso"] != "/tmp/a.iso" {
		t.Fatalf("mirrors %v", sim.Mirrors())
	}
	testkit.Eventually(t, 10*time.Second, "the long lock", func() bool { cfg, _ := sim.Config(100); return cfg["lock"] == "backup" })
	if _, err := pvesim.ParseSpec("bad.yaml", []byte("faults: {bogus: 1}\n")); err == nil {
		t.Fatal("an unknown fault key must be refused")
	}
}

// Replacing the faults restarts the task sequence too: the same task faults, set again through
// SetFaults or PUT /_sim/faults, fail the same tasks of the following run.
func TestSettingFaultsRestartsTheTaskFaultSequence(t *testing.T) {
	f := pvesim.Faults{Seed: 11, TaskFailureRate: 0.5, TaskTypes: []string{"qmcreate"}}
	c := faultCluster(t, f)
	run := func(first int) string {
		var b strings.Builder
		for i := 0; i < 16; i++ {
			_, st := c.taskOf("POST", "/nodes/pve1/qemu", form("vmid", strconv.Itoa(first+i)))
			if st == "OK" {
				b.WriteByte('.')
			} else {
				b.WriteByte('x')
			}
		}
		return b.String()
	}
	want := run(100)
	if !strings.Contains(want, ".") || !strings.Contains(want, "x") {
		t.Fatalf("outcomes %s: want some failed and some finished tasks", want)
	}
	if err := c.sim.SetFaults(f); err != nil {
		t.Fatal(err)
	}
	if got := run(200); got != want {
		t.Fatalf("after SetFaults the tasks ended %s, want %s as in the first run", got, want)
	}
	body, _ := json.Marshal(map[string]any{"seed": 11, "taskFailureRate": 0.5, "taskTypes": []string{"qmcreate"}})
	req, _ := http.NewRequest("PUT", c.srv.URL+"/_sim/faults", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT /_sim/faults: %s", resp.Status)
	}
	if got := run(300); got != want {
		t.Fatalf("after PUT /_sim/faults the tasks ended %s, want %s as in the first run", got, want)
	}
}
