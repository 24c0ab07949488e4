package pvesim_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// The LXC template mark answers null and works in a background vztemplate task; polling the config
// shows template: 1 afterwards (B.2 item 17).
func TestLXCTemplateMarkReturnsNull(t *testing.T) {
	c := cloneCluster(t, map[string]pvesim.Duration{"vztemplate": pvesim.Duration(100 * time.Millisecond)})
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "rootfs", "local-lvm:2",
		"ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"))
	r := c.do("POST", "/nodes/pve1/lxc/200/template", nil)
	if r.Status != 200 || string(r.Data) != "null" {
		t.Fatalf("lxc template: %d data %s", r.Status, r.Data)
	}
	if _, ok := c.config("pve1", "lxc", 200)["template"]; ok {
		t.Fatal("template: 1 must appear only when the background task is done")
	}
	testkit.Eventually(t, 10*time.Second, "template: 1", func() bool { return c.config("pve1", "lxc", 200)["template"] == float64(1) })
	if got := c.config("pve1", "lxc", 200)["rootfs"]; got != "local-lvm:base-200-disk-0,size=2G" {
		t.Fatalf("rootfs %v", got)
	}
	r = c.do("GET", "/nodes/pve1/tasks", form("typefilter", "vztemplate"))
	if !strings.Contains(string(r.Data), ":vztemplate:200:") {
		t.Fatalf("no vztemplate task in %s", r.Data)
	}
	// Directory storages cannot hold container templates.
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "201", "rootfs", "local:2",
		"ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"))
	if r := c.do("POST", "/nodes/pve1/lxc/201/template", nil); r.Status != 500 || r.Message != "Directory storage 'local' does not support container templates!\n" {
		t.Fatalf("template on dir storage: %d %q", r.Status, r.Message)
	}
}

// The qemu template mark answers with a qmtemplate UPID (B.2 item 17).
func TestQemuTemplateMarkReturnsUPID(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:1"))
	upid, st := c.taskOf("POST", "/nodes/pve1/qemu/100/template", nil)
	if !strings.HasPrefix(upid, "UPID:pve1:") || !strings.Contains(upid, ":qmtemplate:100:") || st != "OK" {
		t.Fatalf("template: %s %s", upid, st)
	}
}

// Templates are one-way (B.2 item 11): there is no untemplate endpoint; converting again, starting and
// snapshotting a template are refused with PVE's texts; a VM with snapshots cannot become one.
func TestTemplateIsOneWay(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:1"))
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "101", "scsi0", "local-lvm:1"))
	c.mustTask("POST", "/nodes/pve1/qemu/101/snapshot", form("snapname", "s1"))
	if r := c.do("POST", "/nodes/pve1/qemu/101/template", nil); r.Status != 500 || r.Message != "unable to create template, because VM contains snapshots\n" {
		t.Fatalf("template with snapshots: %d %q", r.Status, r.Message)
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/template", nil)
	for _, kind := range []string{"qemu", "lxc"} {
		if r := c.do("POST", "/nodes/pve1/"+kind+"/100/untemplate", nil); r.Status != 501 {
			t.Fatalf("%s untemplate: %d %s", kind, r.Status, r.Message)
		}
	}
	if r := c.do("POST", "/nodes/pve1/qemu/100/template", nil); r.Status != 500 || r.Message != "you can't convert a template to a template\n" {
		t.Fatalf("template again: %d %q", r.Status, r.Message)
	}
	if _, st := c.taskOf("POST", "/nodes/pve1/qemu/100/status/start", nil); st != "you can't start a vm if it's a template" {
		t.Fatalf("start of a template: %q", st)
	}
	if _, st := c.taskOf("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "s1")); st != "you can't take a snapshot if it's a template" {
		t.Fatalf("snapshot of a template: %q", st)
	}
	// Config edits stay allowed; a disk added to a template is a base volume at once.
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("tags", "golden", "scsi1", "local-lvm:1"))
	if got := c.config("pve1", "qemu", 100)["scsi1"]; got != "local-lvm:base-100-disk-1,size=1G" {
		t.Fatalf("disk added to a template: %v", got)
	}
	if c.sim.Running(100) {
		t.Fatal("a template must not run")
	}
}

// Snapshots are listed with a final "current" entry and kept as sections of the config file.
func TestSnapshotsAreKeptAsSections(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "cores", "2"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "s1", "description", "first"))
	var list []map[string]any
	if err := json.Unmarshal(c.do("GET", "/nodes/pve1/qemu/100/snapshot", nil).Data, &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0]["name"] != "s1" || list[0]["description"] != "first" || list[1]["name"] != "current" || list[1]["parent"] != "s1" {
		t.Fatalf("snapshot list %v", list)
	}
	raw, _ := c.sim.RawConfig(100)
	if !strings.Contains(raw, "\n[s1]\n") || !strings.Contains(raw, "parent: s1\n") {
		t.Fatalf("config file:\n%s", raw)
	}
	if _, st := c.taskOf("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "s1")); st != "snapshot name 's1' already used" {
		t.Fatalf("duplicate snapshot: %q", st)
	}
	c.mustTask("DELETE", "/nodes/pve1/qemu/100/snapshot/s1", nil)
	if raw, _ := c.sim.RawConfig(100); strings.Contains(raw, "[s1]") || strings.Contains(raw, "parent:") {
		t.Fatalf("after delete:\n%s", raw)
	}
}

// On a running VM hot-pluggable and fast-plug keys apply at once, the rest is listed in …/pending and
// applied by the next stop/start.
func TestPendingChangesApplyAfterRestart(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "cores", "2", "memory", "1024", "net0", "virtio,bridge=vmbr0", "start", "1"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("cores", "4", "memory", "2048", "tags", "web", "ciuser", "ops",
		"net1", "virtio,bridge=vmbr1", "scsi0", "local-lvm:1", "description", "hi"))
	cur := c.do("GET", "/nodes/pve1/qemu/100/config", form("current", "1")).obj(t)
	for _, k := range []string{"tags", "ciuser", "net1", "scsi0", "description"} {
		if cur[k] == nil {
			t.Errorf("%s should apply live, current config %v", k, cur)
		}
	}
	if cur["cores"] != float64(2) || cur["memory"] != "1024" {
		t.Errorf("cores/memory applied live: %v %v", cur["cores"], cur["memory"])
	}
	var pending []map[string]any
	if err := json.Unmarshal(c.do("GET", "/nodes/pve1/qemu/100/pending", nil).Data, &pending); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, p := range pending {
		if v, ok := p["pending"]; ok {
			got[p["key"].(string)] = v
		}
	}
	if len(got) != 2 || got["cores"] != float64(4) || got["memory"] != "2048" {
		t.Fatalf("pending entries %v", got)
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/stop", nil)
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/start", nil)
	cur = c.config("pve1", "qemu", 100)
	if cur["cores"] != float64(4) || cur["memory"] != "2048" || c.sim.PendingConfig(100) != nil {
		t.Fatalf("after restart: %v pending %v", cur, c.sim.PendingConfig(100))
	}
	// hotplug=0 keeps even NIC changes pending; with cpu hotplug vcpus apply live.
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("hotplug", "0"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("net2", "virtio,bridge=vmbr0"))
	if p := c.sim.PendingConfig(100); p["net2"] == "" {
		t.Fatalf("net2 with hotplug=0 should be pending, pending %v", p)
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("delete", "net2"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/stop", nil)
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("hotplug", "cpu,network", "cores", "4"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/start", nil)
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("vcpus", "2", "sockets", "2"))
	cfg, _ := c.sim.Config(100)
	if cfg["vcpus"] != "2" || cfg["sockets"] != "" || c.sim.PendingConfig(100)["sockets"] != "2" {
		t.Fatalf("cpu hotplug: config %v pending %v", cfg, c.sim.PendingConfig(100))
	}
}

// A running container takes fast-plug keys, memory and NICs at once and keeps the rest pending.
func TestLXCPendingFollowsPveContainer(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "rootfs", "local-lvm:2", "start", "1",
		"ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"))
	if r := c.do("PUT", "/nodes/pve1/lxc/200/config", form("hostname", "db", "cores", "2", "memory", "1024",
		"net0", "name=eth0,bridge=vmbr0", "nameserver", "10.0.0.1", "mp0", "local-lvm:1,mp=/data")); r.Status != 200 {
		t.Fatalf("update: %d %s", r.Status, r.Message)
	}
	cfg, _ := c.sim.Config(200)
	for _, k := range []string{"hostname", "cores", "memory", "net0", "mp0"} {
		if cfg[k] == "" {
			t.Errorf("%s should apply live: %v", k, cfg)
		}
	}
	if p := c.sim.PendingConfig(200); p["nameserver"] != "10.0.0.1" || len(p) != 1 {
		t.Fatalf("pending %v", p)
	}
	c.do("PUT", "/nodes/pve1/lxc/200/config", form("delete", "mp0"))
	if p := c.sim.PendingConfig(200); p["delete"] != "mp0" {
		t.Fatalf("removing a mount point of a running CT stays pending: %v", p)
	}
	c.mustTask("POST", "/nodes/pve1/lxc/200/status/stop", nil)
	cfg, _ = c.sim.Config(200)
	if cfg["nameserver"] != "10.0.0.1" || cfg["mp0"] != "" || cfg["unused0"] != "local-lvm:vm-200-disk-1" {
		t.Fatalf("after stop: %v", cfg)
	}
}

// An LXC template cannot start (the vzstart task fails), be converted again or be snapshotted.
func TestLXCTemplateRefusals(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "rootfs", "local-lvm:2",
		"ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"))
	if r := c.do("POST", "/nodes/pve1/lxc/200/template", nil); r.Status != 200 {
		t.Fatalf("template: %d %s", r.Status, r.Message)
	}
	testkit.Eventually(t, 10*time.Second, "template: 1", func() bool { return c.config("pve1", "lxc", 200)["template"] == float64(1) })
	if _, st := c.taskOf("POST", "/nodes/pve1/lxc/200/status/start", nil); st != "you can't start a CT if it's a template" {
		t.Fatalf("start of a template: %q", st)
	}
	expectErr(t, c.do("POST", "/nodes/pve1/lxc/200/template", nil), 500, "", "you can't convert a template to a template")
	if _, st := c.taskOf("POST", "/nodes/pve1/lxc/200/snapshot", form("snapname", "s1")); st != "you can't take a snapshot if it's a template" {
		t.Fatalf("snapshot of a template: %q", st)
	}
	if c.sim.Running(200) {
		t.Fatal("a template must not run")
	}
}

// Starting a running CT is refused synchronously (500, no UPID), unlike qemu, whose start task fails.
func TestLXCStartOfARunningCTIsSynchronous(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "rootfs", "local-lvm:2",
		"ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"))
	c.mustTask("POST", "/nodes/pve1/lxc/200/status/start", nil)
	r := c.do("POST", "/nodes/pve1/lxc/200/status/start", nil)
	expectErr(t, r, 500, "", "CT 200 already running")
	if r.Message != "CT 200 already running\n" || string(r.Data) != "null" {
		t.Fatalf("message %q data %s", r.Message, r.Data)
	}
	if !c.sim.Running(200) {
		t.Fatal("the CT must keep running")
	}
}

// While a create runs, the new config carries lock: create and the worker holds the config flock:
// destroy is refused at once by the lock, config writes wait for the flock and time out. Afterwards
// both work. The same holds for the new CT of an LXC clone.
func TestLockCreateRefusesWritesDuringTheCreate(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Files = []pvesim.FileSpec{{VolID: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", Size: 120 << 20}}
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0,
		"qmcreate": pvesim.Duration(2 * time.Second), "vzclone": pvesim.Duration(2 * time.Second)}
	spec.LockTimeouts = map[string]pvesim.Duration{"default": pvesim.Duration(50 * time.Millisecond)}
	c := newCluster(t, spec)

	r := c.do("POST", "/nodes/pve1/qemu", form("vmid", "100"))
	if r.Status != 200 {
		t.Fatalf("create: %d %s", r.Status, r.Message)
	}
	upid := r.str(t)
	if l := c.config("pve1", "qemu", 100)["lock"]; l != "create" {
		t.Fatalf("lock during the create: %v", l)
	}
	expectErr(t, c.do("DELETE", "/nodes/pve1/qemu/100", nil), 500, "", "VM 100 is locked (create)")
	expectErr(t, c.do("PUT", "/nodes/pve1/qemu/100/config", form("name", "early")), 500, "",
		"can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout")
	if st := c.waitTask(upid); st != "OK" {
		t.Fatalf("create task: %s", st)
	}
	if r := c.do("PUT", "/nodes/pve1/qemu/100/config", form("name", "later")); r.Status != 200 {
		t.Fatalf("write after the create: %d %s", r.Status, r.Message)
	}
	if conf := c.config("pve1", "qemu", 100); conf["name"] != "later" || conf["lock"] != nil {
		t.Fatalf("config after the create: %v", conf)
	}

	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "rootfs", "local-lvm:1",
		"ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"))
	r = c.do("POST", "/nodes/pve1/lxc/200/clone", form("newid", "201"))
	if r.Status != 200 {
		t.Fatalf("clone: %d %s", r.Status, r.Message)
	}
	upid = r.str(t)
	expectErr(t, c.do("DELETE", "/nodes/pve1/lxc/201", nil), 500, "", "CT 201 is locked (create)")
	expectErr(t, c.do("PUT", "/nodes/pve1/lxc/201/config", form("hostname", "early")), 500, "",
		"can't lock file '/run/lock/lxc/pve-config-201.lock' - got timeout")
	if st := c.waitTask(upid); st != "OK" {
		t.Fatalf("clone task: %s", st)
	}
	if r := c.do("PUT", "/nodes/pve1/lxc/201/config", form("hostname", "later")); r.Status != 200 {
		t.Fatalf("write after the clone: %d %s", r.Status, r.Message)
	}
}

// A machine version newer than the node's QEMU (10.0), or a +pveN revision above what qemu-server knows for
// that version, fails the start task with qemu-server's texts; known revisions start.
func TestStartRefusesMachineVersionsTheNodeCannotRun(t *testing.T) {
	c := cloneCluster(t, nil)
	tests := []struct{ machine, want string }{
		{"q35", "OK"},
		{"pc-q35-10.0", "OK"},
		{"pc-i440fx-4.1+pve2", "OK"},
		{"pc-q35-9.2+pve1", "OK"},
		{"pc-q35-10.1", "Installed QEMU version '10.0.2' is too old to run machine type 'pc-q35-10.1+pve0', please upgrade node 'pve1'"},
		{"pc-q35-9.2+pve2", "Installed qemu-server (max feature level for 9.2 is pve1) is too old to run machine type 'pc-q35-9.2+pve2', please upgrade node 'pve1'"},
		{"pc-i440fx-8.1+pve1", "Installed qemu-server (max feature level for 8.1 is pve0) is too old to run machine type 'pc-i440fx-8.1+pve1', please upgrade node 'pve1'"},
	}
	for i, tc := range tests {
		t.Run(tc.machine, func(t *testing.T) {
			vmid := strconv.Itoa(100 + i)
			c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", vmid, "machine", tc.machine))
			if _, st := c.taskOf("POST", "/nodes/pve1/qemu/"+vmid+"/status/start", nil); st != tc.want {
				t.Fatalf("start ended %q, want %q", st, tc.want)
			}
		})
	}
}
