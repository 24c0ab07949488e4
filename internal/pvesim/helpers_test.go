package pvesim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
)

// testCluster is a simulator behind a real loopback HTTP server.
type testCluster struct {
	t   *testing.T
	sim *pvesim.Sim
	srv *httptest.Server
}

func newCluster(t *testing.T, spec pvesim.Spec) *testCluster {
	t.Helper()
	if spec.TaskDurations == nil {
		spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	}
	sim, err := pvesim.New(spec)
	if err != nil {
		t.Fatalf("new simulator: %v", err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	return &testCluster{t: t, sim: sim, srv: srv}
}

func defaultCluster(t *testing.T) *testCluster {
	spec := pvesim.DefaultSpec()
	spec.Files = []pvesim.FileSpec{
		{VolID: "local:iso/debian-12.iso", Size: 600 << 20},
		{VolID: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", Size: 120 << 20},
		{VolID: "local:import/noble.qcow2", Size: 3 << 30},
	}
	return newCluster(t, spec)
}

// reply is a decoded API answer.
type reply struct {
	Status  int
	Reason  string
	Data    json.RawMessage
	Message string
	Errors  map[string]string
}

func (r reply) str(t *testing.T) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(r.Data, &s); err != nil {
		t.Fatalf("data %s is not a string: %v", r.Data, err)
	}
	return s
}

func (r reply) obj(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Data, &m); err != nil {
		t.Fatalf("data %s is not an object: %v", r.Data, err)
	}
	return m
}

const rootToken = "PVEAPIToken=" + pvesim.DefaultRootTokenID + "=" + pvesim.DefaultRootTokenSecret
const ciToken = "PVEAPIToken=" + pvesim.DefaultCITokenID + "=" + pvesim.DefaultCITokenSecret

// do sends a form-encoded request with the root token (auth "" ) or the given Authorization value.
func (c *testCluster) do(method, path string, form url.Values, auth ...string) reply {
	c.t.Helper()
	var body io.Reader
	target := c.srv.URL + "/api2/json" + path
	if form != nil && (method == http.MethodGet || method == http.MethodDelete) {
		target += "?" + form.Encode()
	} else if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	a := rootToken
	if len(auth) > 0 {
		a = auth[0]
	}
	if a != "" {
		req.Header.Set("Authorization", a)
	}
	return c.send(req)
}

func (c *testCluster) send(req *http.Request) reply {
	c.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env struct {
		Data    json.RawMessage   `json:"data"`
		Message string            `json:"message"`
		Errors  map[string]string `json:"errors"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		c.t.Fatalf("%s %s: body %q is not an envelope: %v", req.Method, req.URL, raw, err)
	}
	reason := strings.TrimPrefix(resp.Status, resp.Status[:4])
	return reply{Status: resp.StatusCode, Reason: reason, Data: env.Data, Message: env.Message, Errors: env.Errors}
}

// waitTask polls a task until it stops and returns its exit status.
func (c *testCluster) waitTask(upid string) string {
	c.t.Helper()
	node := strings.Split(upid, ":")[1]
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r := c.do("GET", "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/status", nil)
		if r.Status != 200 {
			c.t.Fatalf("task status %s: %d %s", upid, r.Status, r.Message)
		}
		st := r.obj(c.t)
		if st["status"] == "stopped" {
			return st["exitstatus"].(string)
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("task %s did not finish", upid)
	return ""
}

func form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

// mustTask runs an async request and requires its task to end OK.
func (c *testCluster) mustTask(method, path string, f url.Values) {
	c.t.Helper()
	r := c.do(method, path, f)
	if r.Status != 200 {
		c.t.Fatalf("%s %s: %d %s %v", method, path, r.Status, r.Message, r.Errors)
	}
	if st := c.waitTask(r.str(c.t)); st != "OK" {
		c.t.Fatalf("%s %s: task ended %q", method, path, st)
	}
}

// taskOf runs an async request, requires a UPID and returns it with the task's exit status.
func (c *testCluster) taskOf(method, path string, f url.Values) (string, string) {
	c.t.Helper()
	r := c.do(method, path, f)
	if r.Status != 200 {
		c.t.Fatalf("%s %s: %d %s %v", method, path, r.Status, r.Message, r.Errors)
	}
	upid := r.str(c.t)
	return upid, c.waitTask(upid)
}

// config reads a guest's config through the API.
func (c *testCluster) config(node, kind string, vmid int) map[string]any {
	c.t.Helper()
	r := c.do("GET", "/nodes/"+node+"/"+kind+"/"+strconv.Itoa(vmid)+"/config", nil)
	if r.Status != 200 {
		c.t.Fatalf("get config %d: %d %s", vmid, r.Status, r.Message)
	}
	return r.obj(c.t)
}

// content lists a storage's volumes on a node, keyed by volid.
func (c *testCluster) content(node, storage string, f url.Values) map[string]map[string]any {
	c.t.Helper()
	r := c.do("GET", "/nodes/"+node+"/storage/"+storage+"/content", f)
	if r.Status != 200 {
		c.t.Fatalf("content: %d %s", r.Status, r.Message)
	}
	var list []map[string]any
	if err := json.Unmarshal(r.Data, &list); err != nil {
		c.t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, e := range list {
		out[e["volid"].(string)] = e
	}
	return out
}
