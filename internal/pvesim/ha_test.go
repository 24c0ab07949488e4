package pvesim_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

func haCluster(t *testing.T, version string) *testCluster {
	t.Helper()
	spec := pvesim.DefaultSpec()
	spec.Version = version
	spec.HADelay = pvesim.Duration(30 * time.Millisecond)
	spec.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Config: "memory: 512\nname: a\n"},
		{VMID: 101, Type: "qemu", Node: "pve1", Config: "memory: 512\nname: b\n"},
		{VMID: 200, Type: "lxc", Node: "pve1", Config: "arch: amd64\nhostname: c\nmemory: 512\nostype: debian\n"},
	}
	return newCluster(t, spec)
}

func haService(t *testing.T, c *testCluster, sid string) map[string]any {
	t.Helper()
	r := c.do(http.MethodGet, "/cluster/ha/status/current", nil)
	mustOK(t, r, "ha status")
	var list []map[string]any
	if err := json.Unmarshal(r.Data, &list); err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if e["sid"] == sid {
			return e
		}
	}
	return nil
}

// A started resource's guest starts once the HA manager acts; stopped stops it; the guest reports it as
// HA-managed with the requested state.
func TestHAResourceStatesDriveTheGuest(t *testing.T) {
	c := haCluster(t, "")
	mustOK(t, c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "100", "comment", "db [proxops]", "max_restart", "2")), "create")
	res := c.do(http.MethodGet, "/cluster/ha/resources/vm:100", nil).obj(t)
	if res["sid"] != "vm:100" || res["state"] != "started" || res["comment"] != "db [proxops]" || res["max_restart"] != float64(2) {
		t.Fatalf("resource %v", res)
	}
	cur := c.do(http.MethodGet, "/nodes/pve1/qemu/100/status/current", nil).obj(t)
	if ha := cur["ha"].(map[string]any); ha["managed"] != float64(1) || ha["state"] != "started" {
		t.Fatalf("ha %v", cur["ha"])
	}
	testkit.Eventually(t, 10*time.Second, "the HA manager to start the VM", func() bool { return c.sim.Running(100) })
	if svc := haService(t, c, "vm:100"); svc["state"] != "started" || svc["node"] != "pve1" || svc["request_state"] != "started" {
		t.Fatalf("service %v", svc)
	}
	mustOK(t, c.do(http.MethodPut, "/cluster/ha/resources/vm:100", form("state", "stopped", "delete", "comment")), "stop")
	testkit.Eventually(t, 10*time.Second, "the HA manager to stop the VM", func() bool { return !c.sim.Running(100) })
	if got := c.sim.HAResource("vm:100"); got["comment"] != "" || got["crm_state"] != "stopped" {
		t.Fatalf("resource %v", got)
	}
	mustOK(t, c.do(http.MethodPut, "/cluster/ha/resources/vm:100", form("state", "ignored")), "ignore")
	c.sim.WaitTasks()
	mustOK(t, c.do(http.MethodDelete, "/cluster/ha/resources/vm:100", nil), "delete")
	cur = c.do(http.MethodGet, "/nodes/pve1/qemu/100/status/current", nil).obj(t)
	if ha := cur["ha"].(map[string]any); ha["managed"] != float64(0) {
		t.Fatalf("ha after delete %v", cur["ha"])
	}
}

// status/start of an HA-managed guest is a hastart task that sets the resource's requested state.
func TestHAStartOfManagedGuestSetsTheRequestedState(t *testing.T) {
	c := haCluster(t, "")
	mustOK(t, c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "ct:200", "state", "stopped")), "create")
	upid, st := c.taskOf("POST", "/nodes/pve1/lxc/200/status/start", nil)
	if st != "OK" || !strings.Contains(upid, ":hastart:200:") {
		t.Fatalf("start: %s %s", upid, st)
	}
	if got := c.sim.HAResource("ct:200")["state"]; got != "started" {
		t.Fatalf("requested state %q", got)
	}
	testkit.Eventually(t, 10*time.Second, "the HA manager to start the CT", func() bool { return c.sim.Running(200) })
}

func TestHAResourceRefusals(t *testing.T) {
	c := haCluster(t, "")
	mustOK(t, c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "vm:100")), "create")
	wantFail(t, c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "vm:100")), 500, "resource ID 'vm:100' already defined\n")
	wantFail(t, c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "vm:999")), 500, "resource 'vm:999' does not exist in cluster\n")
	wantFail(t, c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "vm:200")), 500, "resource 'vm:200' does not exist in cluster\n")
	if r := c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "xx:100")); r.Status != 400 || r.Errors["sid"] != "invalid format - unable to parse service id 'xx:100'\n" {
		t.Fatalf("bad sid: %d %v", r.Status, r.Errors)
	}
	wantFail(t, c.do(http.MethodGet, "/cluster/ha/resources/vm:101", nil), 500, "no such resource 'vm:101'\n")
	if r := c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "vm:101", "group", "g1")); r.Status != 400 || r.Errors["group"] == "" {
		t.Fatalf("group on PVE 9: %d %v", r.Status, r.Errors)
	}
}

func TestHAMigrateMovesTheGuest(t *testing.T) {
	c := haCluster(t, "")
	mustOK(t, c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "vm:100")), "create")
	testkit.Eventually(t, 10*time.Second, "the VM to start", func() bool { return c.sim.Running(100) })
	r := c.do(http.MethodPost, "/cluster/ha/resources/vm:100/migrate", form("node", "pve2"))
	mustOK(t, r, "migrate")
	if out := r.obj(t); out["requested-node"] != "pve2" {
		t.Fatalf("migrate answer %v", out)
	}
	testkit.Eventually(t, 10*time.Second, "the VM to move", func() bool {
		node, _, _ := c.sim.NodeOf(100)
		return node == "pve2"
	})
	if !c.sim.Running(100) {
		t.Fatal("a migrated started VM runs on its new node")
	}
	wantFail(t, c.do(http.MethodPost, "/cluster/ha/resources/vm:101/migrate", form("node", "pve2")), 500, "service 'vm:101' is not HA managed\n")
}

func TestHARulesOnPVE9(t *testing.T) {
	c := haCluster(t, "")
	mustOK(t, c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "vm:100", "state", "stopped")), "r100")
	mustOK(t, c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "vm:101", "state", "stopped")), "r101")
	mustOK(t, c.do(http.MethodPost, "/cluster/ha/rules", form("rule", "prefer-pve1", "type", "node-affinity",
		"resources", "vm:100,vm:101", "nodes", "pve1:2,pve2", "strict", "1", "comment", "x [proxops]")), "node-affinity")
	mustOK(t, c.do(http.MethodPost, "/cluster/ha/rules", form("rule", "apart", "type", "resource-affinity",
		"resources", "vm:100,vm:101", "affinity", "negative")), "resource-affinity")
	rule := c.do(http.MethodGet, "/cluster/ha/rules/prefer-pve1", nil).obj(t)
	if rule["nodes"] != "pve1:2,pve2" || rule["strict"] != float64(1) || rule["type"] != "node-affinity" || rule["comment"] != "x [proxops]" {
		t.Fatalf("rule %v", rule)
	}
	wantFail(t, c.do(http.MethodPost, "/cluster/ha/rules", form("rule", "again", "type", "node-affinity", "resources", "vm:100", "nodes", "pve2")),
		500, "resource 'vm:100' is already used in node affinity rule 'prefer-pve1'\n")
	wantFail(t, c.do(http.MethodPost, "/cluster/ha/rules", form("rule", "lonely", "type", "resource-affinity", "resources", "vm:100", "affinity", "positive")),
		500, "rule 'lonely' must specify at least two resources\n")
	wantFail(t, c.do(http.MethodPost, "/cluster/ha/rules", form("rule", "ghost", "type", "resource-affinity", "resources", "vm:100,ct:200", "affinity", "positive")),
		500, "cannot use unmanaged resource 'ct:200' in rule 'ghost'\n")
	if r := c.do(http.MethodPost, "/cluster/ha/rules", form("rule", "mixed", "type", "resource-affinity", "resources", "vm:100,vm:101", "nodes", "pve1", "affinity", "positive")); r.Status != 400 || r.Errors["nodes"] == "" {
		t.Fatalf("nodes on a resource-affinity rule: %d %v", r.Status, r.Errors)
	}
	mustOK(t, c.do(http.MethodPut, "/cluster/ha/rules/prefer-pve1", form("type", "node-affinity", "disable", "1", "delete", "comment")), "update")
	if rule := c.do(http.MethodGet, "/cluster/ha/rules/prefer-pve1", nil).obj(t); rule["disable"] != float64(1) || rule["comment"] != nil {
		t.Fatalf("rule after update %v", rule)
	}
	// Deleting a resource (purge is the default) takes it out of the rules; a rule left with one resource stays.
	mustOK(t, c.do(http.MethodDelete, "/cluster/ha/resources/vm:101", nil), "delete resource")
	if rule := c.do(http.MethodGet, "/cluster/ha/rules/apart", nil).obj(t); rule["resources"] != "vm:100" {
		t.Fatalf("rule after purge %v", rule)
	}
	mustOK(t, c.do(http.MethodDelete, "/cluster/ha/rules/apart", nil), "delete rule")
	wantFail(t, c.do(http.MethodGet, "/cluster/ha/rules/apart", nil), 500, "no such ha rule 'apart'\n")
	wantFail(t, c.do(http.MethodGet, "/cluster/ha/groups", nil), 501, "Method 'GET /cluster/ha/groups' not implemented")
}

func TestHAGroupsOnPVE8(t *testing.T) {
	c := haCluster(t, "8.4.1")
	r := c.do(http.MethodGet, "/version", nil).obj(t)
	if r["release"] != "8.4" {
		t.Fatalf("version %v", r)
	}
	wantFail(t, c.do(http.MethodGet, "/cluster/ha/rules", nil), 501, "Method 'GET /cluster/ha/rules' not implemented")
	mustOK(t, c.do(http.MethodPost, "/cluster/ha/groups", form("group", "prefer1", "nodes", "pve1:2,pve2", "restricted", "1")), "group")
	mustOK(t, c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "vm:100", "group", "prefer1", "state", "stopped")), "resource")
	wantFail(t, c.do(http.MethodPost, "/cluster/ha/resources", form("sid", "vm:101", "group", "none")), 500, "group 'none' does not exist\n")
	g := c.do(http.MethodGet, "/cluster/ha/groups/prefer1", nil).obj(t)
	if g["nodes"] != "pve1:2,pve2" || g["restricted"] != float64(1) {
		t.Fatalf("group %v", g)
	}
	wantFail(t, c.do(http.MethodDelete, "/cluster/ha/groups/prefer1", nil), 500, "ha group 'prefer1' is used by resource 'vm:100'\n")
	wantFail(t, c.do(http.MethodPost, "/cluster/ha/groups", form("group", "far", "nodes", "pve9")), 500, "node 'pve9' is not a cluster node\n")
}
