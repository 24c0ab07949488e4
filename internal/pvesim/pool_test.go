package pvesim_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/proxops/proxops/internal/pvesim"
)

func poolCluster(t *testing.T) *testCluster {
	t.Helper()
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Config: "memory: 512\nname: a\n"},
		{VMID: 101, Type: "qemu", Node: "pve2", Config: "memory: 512\nname: b\n"},
		{VMID: 200, Type: "lxc", Node: "pve1", Config: "arch: amd64\nhostname: c\nmemory: 512\nostype: debian\n"},
	}
	return newCluster(t, spec)
}

type poolEntry struct {
	PoolID  string           `json:"poolid"`
	Comment string           `json:"comment"`
	Members []map[string]any `json:"members"`
}

func (c *testCluster) pool(id string) poolEntry {
	c.t.Helper()
	r := c.do(http.MethodGet, "/pools", form("poolid", id))
	if r.Status != 200 {
		c.t.Fatalf("GET /pools?poolid=%s: %d %s", id, r.Status, r.Message)
	}
	var out []poolEntry
	if err := json.Unmarshal(r.Data, &out); err != nil || len(out) != 1 {
		c.t.Fatalf("GET /pools?poolid=%s: %s (%v)", id, r.Data, err)
	}
	return out[0]
}

func memberIDs(p poolEntry) []string {
	var ids []string
	for _, m := range p.Members {
		ids = append(ids, m["id"].(string))
	}
	return ids
}

func mustOK(t *testing.T, r reply, what string) {
	t.Helper()
	if r.Status != 200 {
		t.Fatalf("%s: %d %q %v", what, r.Status, r.Message, r.Errors)
	}
}

func wantFail(t *testing.T, r reply, status int, msg string) {
	t.Helper()
	if r.Status != status || r.Message != msg {
		t.Fatalf("got %d %q %v, want %d %q", r.Status, r.Message, r.Errors, status, msg)
	}
}

func TestPoolCreateListAndComment(t *testing.T) {
	c := poolCluster(t)
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "web", "comment", "front ends [proxops]")), "create")
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "empty")), "create without comment")
	r := c.do(http.MethodGet, "/pools", nil)
	mustOK(t, r, "list")
	var list []poolEntry
	if err := json.Unmarshal(r.Data, &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].PoolID != "empty" || list[0].Comment != "" || list[1].PoolID != "web" ||
		list[1].Comment != "front ends [proxops]" || list[1].Members != nil {
		t.Fatalf("list = %+v", list)
	}
	wantFail(t, c.do(http.MethodPost, "/pools", form("poolid", "web")), 500, "create pool failed: pool 'web' already exists\n")

	mustOK(t, c.do(http.MethodPut, "/pools", form("poolid", "web", "comment", "edited [proxops]")), "comment")
	if got := c.pool("web").Comment; got != "edited [proxops]" {
		t.Fatalf("comment = %q", got)
	}
	// The deprecated path form reads and writes the same pool.
	mustOK(t, c.do(http.MethodPut, "/pools/web", form("comment", "")), "clear comment")
	r = c.do(http.MethodGet, "/pools/web", nil)
	mustOK(t, r, "read")
	if m := r.obj(t); m["comment"] != nil || m["members"] == nil {
		t.Fatalf("read = %v", m)
	}
	wantFail(t, c.do(http.MethodPut, "/pools", form("poolid", "nope", "comment", "x")), 500,
		"update pools failed: pool 'nope' does not exist\n")
	wantFail(t, c.do(http.MethodGet, "/pools", form("poolid", "nope")), 500, "pool 'nope' does not exist\n")
}

func TestPoolIDsFollowPVEFormat(t *testing.T) {
	c := poolCluster(t)
	r := c.do(http.MethodPost, "/pools", form("poolid", "bad id"))
	if r.Status != 400 || r.Errors["poolid"] != "invalid format - pool name 'bad id' contains invalid characters\n" {
		t.Fatalf("bad id: %d %q %v", r.Status, r.Message, r.Errors)
	}
	r = c.do(http.MethodPost, "/pools", form("poolid", "a/b/c/d"))
	if r.Status != 400 || r.Errors["poolid"] != "invalid format - pool name 'a/b/c/d' nested too deeply (max levels = 3)\n" {
		t.Fatalf("deep id: %d %q %v", r.Status, r.Message, r.Errors)
	}
	wantFail(t, c.do(http.MethodPost, "/pools", form("poolid", "team/web")), 500,
		"create pool failed: parent 'team' does not exist\n")
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "team")), "parent")
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "team/web", "comment", "nested")), "child")
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "team/web/blue")), "grandchild")
	if got := c.pool("team/web").Comment; got != "nested" {
		t.Fatalf("nested comment = %q", got)
	}
	// A nested id in the path is one escaped segment.
	r = c.do(http.MethodGet, "/pools/"+url.PathEscape("team/web"), nil)
	mustOK(t, r, "read nested by path")
	wantFail(t, c.do(http.MethodDelete, "/pools", form("poolid", "team/web")), 500,
		"delete pool failed: pool 'team/web' is not empty (contains pool 'team/web/blue')\n")
	mustOK(t, c.do(http.MethodDelete, "/pools", form("poolid", "team/web/blue")), "delete grandchild")
	mustOK(t, c.do(http.MethodDelete, "/pools", form("poolid", "team/web")), "delete child")
	mustOK(t, c.do(http.MethodDelete, "/pools", form("poolid", "team")), "delete parent")
	wantFail(t, c.do(http.MethodDelete, "/pools", form("poolid", "team")), 500,
		"delete pool failed: pool 'team' does not exist\n")
}

func TestPoolMembershipRules(t *testing.T) {
	c := poolCluster(t)
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "a")), "create a")
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "b")), "create b")
	mustOK(t, c.do(http.MethodPut, "/pools", form("poolid", "a", "vms", "100,200", "storage", "local")), "add")
	if got := memberIDs(c.pool("a")); len(got) != 3 || got[0] != "qemu/100" || got[1] != "lxc/200" ||
		got[2] != "storage/pve1/local" {
		t.Fatalf("members of a = %v", got)
	}
	r := c.do(http.MethodGet, "/pools", form("poolid", "a", "type", "lxc"))
	mustOK(t, r, "members by type")
	var typed []poolEntry
	if err := json.Unmarshal(r.Data, &typed); err != nil || len(typed) != 1 || len(memberIDs(typed[0])) != 1 ||
		memberIDs(typed[0])[0] != "lxc/200" {
		t.Fatalf("lxc members = %s", r.Data)
	}
	wantFail(t, c.do(http.MethodPut, "/pools", form("poolid", "a", "vms", "100")), 500,
		"update pools failed: VM 100 is already a pool member\n")
	// A guest is in at most one pool; a failed update changes nothing, not even the comment.
	wantFail(t, c.do(http.MethodPut, "/pools", form("poolid", "b", "vms", "101,100", "comment", "x")), 500,
		"update pools failed: VM 100 belongs already to pool 'a' and 'allow-move' is not set\n")
	if p := c.pool("b"); len(p.Members) != 0 || p.Comment != "" {
		t.Fatalf("b after a failed update = %+v", p)
	}
	mustOK(t, c.do(http.MethodPut, "/pools", form("poolid", "b", "vms", "100", "allow-move", "1")), "move")
	if got := memberIDs(c.pool("b")); len(got) != 1 || got[0] != "qemu/100" {
		t.Fatalf("members of b = %v", got)
	}
	if got := memberIDs(c.pool("a")); len(got) != 2 || got[0] != "lxc/200" {
		t.Fatalf("members of a after the move = %v", got)
	}
	// The cluster resources show the guest's pool.
	r = c.do(http.MethodGet, "/cluster/resources", form("type", "vm"))
	mustOK(t, r, "resources")
	var res []map[string]any
	if err := json.Unmarshal(r.Data, &res); err != nil {
		t.Fatal(err)
	}
	pools := map[float64]any{}
	for _, e := range res {
		pools[e["vmid"].(float64)] = e["pool"]
	}
	if pools[100] != "b" || pools[200] != "a" || pools[101] != nil {
		t.Fatalf("resource pools = %v", pools)
	}

	wantFail(t, c.do(http.MethodDelete, "/pools", form("poolid", "a")), 500,
		"delete pool failed: pool 'a' is not empty (contains VM 200)\n")
	wantFail(t, c.do(http.MethodPut, "/pools", form("poolid", "a", "vms", "101", "delete", "1")), 500,
		"update pools failed: VM 101 is not a pool member\n")
	mustOK(t, c.do(http.MethodPut, "/pools", form("poolid", "a", "vms", "200", "delete", "1")), "remove guest")
	wantFail(t, c.do(http.MethodDelete, "/pools/a", nil), 500,
		"delete pool failed: pool 'a' is not empty (contains storage 'local')\n")
	wantFail(t, c.do(http.MethodPut, "/pools", form("poolid", "a", "storage", "local")), 500,
		"update pools failed: Storage 'local' is already a pool member\n")
	mustOK(t, c.do(http.MethodPut, "/pools", form("poolid", "a", "storage", "local", "delete", "1")), "remove storage")
	wantFail(t, c.do(http.MethodPut, "/pools", form("poolid", "a", "storage", "local", "delete", "1")), 500,
		"update pools failed: Storage 'local' is not a pool member\n")
	mustOK(t, c.do(http.MethodDelete, "/pools/a", nil), "delete empty pool")
}

func TestPoolKeepsVMIDsWithoutGuestButIgnoresThem(t *testing.T) {
	c := poolCluster(t)
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "a")), "create a")
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "b")), "create b")
	mustOK(t, c.do(http.MethodPut, "/pools", form("poolid", "a", "vms", "999")), "add a vmid without guest")
	if got := memberIDs(c.pool("a")); len(got) != 0 {
		t.Fatalf("members = %v", got)
	}
	wantFail(t, c.do(http.MethodPut, "/pools", form("poolid", "b", "vms", "999")), 500,
		"update pools failed: VM 999 belongs already to pool 'a' and 'allow-move' is not set\n")
	mustOK(t, c.do(http.MethodDelete, "/pools", form("poolid", "a")), "delete a pool holding only a vmid without guest")
	mustOK(t, c.do(http.MethodPut, "/pools", form("poolid", "b", "vms", "999")), "the vmid left with its pool")
}

func TestDestroyedGuestLeavesItsPool(t *testing.T) {
	c := poolCluster(t)
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "a")), "create a")
	mustOK(t, c.do(http.MethodPut, "/pools", form("poolid", "a", "vms", "101")), "add")
	c.mustTask(http.MethodDelete, "/nodes/pve2/qemu/101", nil)
	if got := memberIDs(c.pool("a")); len(got) != 0 {
		t.Fatalf("members after destroy = %v", got)
	}
	mustOK(t, c.do(http.MethodDelete, "/pools", form("poolid", "a")), "delete emptied pool")
}

func TestCreateIntoNestedPool(t *testing.T) {
	c := poolCluster(t)
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "team")), "parent")
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "team/web")), "child")
	c.mustTask(http.MethodPost, "/nodes/pve1/qemu", form("vmid", "300", "memory", "512", "pool", "team/web"))
	if got := memberIDs(c.pool("team/web")); len(got) != 1 || got[0] != "qemu/300" {
		t.Fatalf("members = %v", got)
	}
}
