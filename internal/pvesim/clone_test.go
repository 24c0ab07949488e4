package pvesim_test

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

func cloneCluster(t *testing.T, durations map[string]pvesim.Duration) *testCluster {
	spec := pvesim.DefaultSpec()
	spec.Storages = append(spec.Storages, pvesim.StorageSpec{ID: "ceph", Type: "rbd", Content: []string{"images", "rootdir"}})
	spec.Files = []pvesim.FileSpec{
		{VolID: "local:iso/debian-12.iso", Size: 600 << 20},
		{VolID: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", Size: 120 << 20},
	}
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	for k, v := range durations {
		spec.TaskDurations[k] = v
	}
	return newCluster(t, spec)
}

var reMAC = regexp.MustCompile(`[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}`)

// A full clone gets new MACs, a new smbios1 uuid and vmgenid and a Copy-of name, keeps tags, description
// and cloud-init settings, gets its own copy of the cloud-init drive, and leaves snapshots, unused disks
// and pending changes behind. The new config carries lock: clone while the qmclone task (id = source)
// runs.
func TestCloneGetsNewIdentityAndKeepsSettings(t *testing.T) {
	c := cloneCluster(t, map[string]pvesim.Duration{"qmclone": pvesim.Duration(300 * time.Millisecond)})
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "name", "web", "scsi0", "local-lvm:4", "scsi1", "local-lvm:1",
		"net0", "virtio,bridge=vmbr0", "net1", "e1000,bridge=vmbr1", "ide2", "local-lvm:cloudinit", "ciuser", "ops",
		"ipconfig0", "ip=dhcp", "tags", "web;prod", "description", "the web server", "cores", "2"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("delete", "scsi1"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "before"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/start", nil)
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("cores", "4"))
	src := c.do("GET", "/nodes/pve1/qemu/100/config", form("current", "1")).obj(t)
	if src["unused0"] == nil || c.sim.PendingConfig(100)["cores"] != "4" {
		t.Fatalf("setup: want unused0 and pending cores, got %v / %v", src, c.sim.PendingConfig(100))
	}

	r := c.do("POST", "/nodes/pve1/qemu/100/clone", form("newid", "101", "full", "1"))
	if r.Status != 200 {
		t.Fatalf("clone: %d %s", r.Status, r.Message)
	}
	upid := r.str(t)
	if !strings.Contains(upid, ":qmclone:100:") {
		t.Fatalf("clone UPID %s must carry the source vmid", upid)
	}
	if l := c.config("pve1", "qemu", 101)["lock"]; l != "clone" {
		t.Fatalf("new config during the clone: lock %v, want clone", l)
	}
	if st := c.waitTask(upid); st != "OK" {
		t.Fatalf("clone task: %s", st)
	}
	dst := c.config("pve1", "qemu", 101)
	for _, k := range []string{"net0", "net1"} {
		sm, dm := reMAC.FindString(src[k].(string)), reMAC.FindString(dst[k].(string))
		if sm == "" || dm == "" || sm == dm {
			t.Errorf("%s: source %v, clone %v: want a new MAC", k, src[k], dst[k])
		}
		if strings.Replace(dst[k].(string), dm, sm, 1) != src[k] {
			t.Errorf("%s: clone %v differs from source %v beyond the MAC", k, dst[k], src[k])
		}
	}
	if src["smbios1"] == dst["smbios1"] || !strings.HasPrefix(dst["smbios1"].(string), "uuid=") {
		t.Errorf("smbios1: source %v, clone %v", src["smbios1"], dst["smbios1"])
	}
	if src["vmgenid"] == dst["vmgenid"] || dst["vmgenid"] == nil {
		t.Errorf("vmgenid: source %v, clone %v", src["vmgenid"], dst["vmgenid"])
	}
	if dst["name"] != "Copy-of-VM-web" {
		t.Errorf("name %v", dst["name"])
	}
	for _, k := range []string{"tags", "description", "ciuser", "ipconfig0", "cores"} {
		if dst[k] != src[k] {
			t.Errorf("%s: clone %v, source %v", k, dst[k], src[k])
		}
	}
	if dst["ide2"] != "local-lvm:vm-101-cloudinit,media=cdrom" {
		t.Errorf("cloud-init drive %v", dst["ide2"])
	}
	if dst["scsi0"] != "local-lvm:vm-101-disk-0,size=4G" {
		t.Errorf("scsi0 %v", dst["scsi0"])
	}
	for _, k := range []string{"unused0", "parent", "template", "lock"} {
		if v, ok := dst[k]; ok {
			t.Errorf("%s copied: %v", k, v)
		}
	}
	if p := c.sim.PendingConfig(101); p != nil {
		t.Errorf("pending changes copied: %v", p)
	}
	raw, _ := c.sim.RawConfig(101)
	if strings.Contains(raw, "[before]") {
		t.Errorf("snapshot section copied:\n%s", raw)
	}
	vols := c.content("pve1", "local-lvm", nil)
	for _, v := range []string{"local-lvm:vm-101-disk-0", "local-lvm:vm-101-cloudinit"} {
		if vols[v] == nil {
			t.Errorf("volume %s missing from %v", v, vols)
		}
	}
	log := c.do("GET", "/nodes/pve1/tasks/"+url.PathEscape(upid)+"/log", nil)
	if !strings.Contains(string(log.Data), "found pending changes for 'cores', discarding for clone") {
		t.Errorf("task log %s", log.Data)
	}
}

// Clone requests PVE refuses before forking (B.2 item 16 and the early checks of clone_vm).
func TestCloneRefusals(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:1"))
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "102", "scsi0", "ceph:1"))
	c.mustTask("POST", "/nodes/pve2/qemu", form("vmid", "200"))
	tests := []struct {
		name, path string
		form       []string
		status     int
		errKey     string
		want       string
	}{
		{"start is not a clone parameter", "/nodes/pve1/qemu/100/clone", []string{"newid", "101", "start", "1"}, 400, "start", "property is not defined in schema"},
		{"missing source", "/nodes/pve1/qemu/999/clone", []string{"newid", "101"}, 500, "", "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist"},
		{"existing target", "/nodes/pve1/qemu/100/clone", []string{"newid", "102"}, 500, "", "unable to create VM 102: config file already exists"},
		{"storage on a linked clone", "/nodes/pve1/qemu/100/clone", []string{"newid", "101", "full", "0", "storage", "local-lvm"}, 500, "", "parameter 'storage' not allowed for linked clones"},
		{"linked clone of a plain volume", "/nodes/pve1/qemu/100/clone", []string{"newid", "101", "full", "0"}, 500, "", "Linked clone feature is not supported for drive 'scsi0'"},
		{"target node with local disks", "/nodes/pve1/qemu/100/clone", []string{"newid", "101", "target", "pve2"}, 500, "", "can't clone VM to node 'pve2' (VM uses local storage)"},
		{"target storage not shared", "/nodes/pve1/qemu/102/clone", []string{"newid", "101", "target", "pve2", "storage", "local-lvm"}, 500, "", "can't clone to non-shared storage 'local-lvm'"},
		{"unknown target node", "/nodes/pve1/qemu/100/clone", []string{"newid", "101", "target", "pve9"}, 500, "", "no such cluster node 'pve9'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := c.do("POST", tc.path, form(tc.form...))
			got := r.Message
			if tc.errKey != "" {
				got = r.Errors[tc.errKey]
			}
			if r.Status != tc.status || !strings.Contains(got, tc.want) {
				t.Fatalf("got %d %q %v, want %d %q", r.Status, r.Message, r.Errors, tc.status, tc.want)
			}
		})
	}
	if c.sim.Exists(101) {
		t.Fatal("a refused clone left a config behind")
	}
	// A vmid taken on another node is found only when the worker writes the new config.
	_, st := c.taskOf("POST", "/nodes/pve1/qemu/100/clone", form("newid", "200"))
	if !strings.Contains(st, "/etc/pve/nodes/pve1/qemu-server/200.conf") {
		t.Fatalf("clone onto a vmid of another node: %q", st)
	}
	if node, _, _ := c.sim.NodeOf(200); node != "pve2" {
		t.Fatalf("the other node's guest was touched: now on %q", node)
	}
	// A clone to another node works from shared storage; the config lands on the target.
	c.mustTask("POST", "/nodes/pve1/qemu/102/clone", form("newid", "103", "target", "pve2"))
	if node, _, _ := c.sim.NodeOf(103); node != "pve2" {
		t.Fatalf("clone with target=pve2 is on %q", node)
	}
}

// A template's clones are linked by default: their volumes are named after the base volume, and the
// template cannot be destroyed while one exists.
func TestLinkedCloneOfTemplate(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:2", "virtio0", "local:1", "ide2", "local:cloudinit"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/template", nil)
	tpl := c.config("pve1", "qemu", 100)
	if tpl["scsi0"] != "local-lvm:base-100-disk-0,size=2G" || tpl["virtio0"] != "local:100/base-100-disk-0.qcow2,size=1G" || tpl["template"] != float64(1) {
		t.Fatalf("template config %v", tpl)
	}
	if tpl["ide2"] != "local:100/vm-100-cloudinit.qcow2,media=cdrom" {
		t.Fatalf("the cloud-init drive must stay as it is: %v", tpl["ide2"])
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/clone", form("newid", "101", "name", "web-1"))
	cl := c.config("pve1", "qemu", 101)
	if cl["scsi0"] != "local-lvm:base-100-disk-0/vm-101-disk-0,size=2G" ||
		cl["virtio0"] != "local:100/base-100-disk-0.qcow2/101/vm-101-disk-0.qcow2,size=1G" ||
		cl["ide2"] != "local:101/vm-101-cloudinit.qcow2,media=cdrom" || cl["name"] != "web-1" {
		t.Fatalf("linked clone config %v", cl)
	}
	if _, ok := cl["template"]; ok {
		t.Fatal("the clone must not be a template")
	}
	_, st := c.taskOf("DELETE", "/nodes/pve1/qemu/100", nil)
	if st != "base volume 'local-lvm:base-100-disk-0' is still in use by linked cloned" {
		t.Fatalf("destroy of a template with a linked clone: %q", st)
	}
	if !c.sim.Exists(100) {
		t.Fatal("the template is gone")
	}
	c.mustTask("DELETE", "/nodes/pve1/qemu/101", nil)
	c.mustTask("DELETE", "/nodes/pve1/qemu/100", nil)
}

// LXC clone runs its checks synchronously: the source is locked "disk" and the new config "create"
// while the vzclone task (id = source) copies the volumes; every NIC gets a new hwaddr and the hostname
// is kept unless given.
func TestLXCCloneLocksBothAndRegeneratesHwaddr(t *testing.T) {
	c := cloneCluster(t, map[string]pvesim.Duration{"vzclone": pvesim.Duration(300 * time.Millisecond)})
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "hostname", "db", "rootfs", "local-lvm:2",
		"ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", "net0", "name=eth0,bridge=vmbr0", "tags", "db"))
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100"))
	if r := c.do("POST", "/nodes/pve1/lxc/200/clone", form("newid", "100")); r.Status != 500 || r.Message != "VM 100 already exists on node 'pve1'\n" {
		t.Fatalf("clone onto a used vmid: %d %q", r.Status, r.Message)
	}
	r := c.do("POST", "/nodes/pve1/lxc/200/clone", form("newid", "201"))
	if r.Status != 200 || !strings.Contains(r.str(t), ":vzclone:200:") {
		t.Fatalf("clone: %d %s %s", r.Status, r.Message, r.Data)
	}
	if l := c.config("pve1", "lxc", 200)["lock"]; l != "disk" {
		t.Errorf("source lock %v, want disk", l)
	}
	if l := c.config("pve1", "lxc", 201)["lock"]; l != "create" {
		t.Errorf("new lock %v, want create", l)
	}
	if st := c.waitTask(r.str(t)); st != "OK" {
		t.Fatalf("clone task %s", st)
	}
	src, dst := c.config("pve1", "lxc", 200), c.config("pve1", "lxc", 201)
	if _, ok := src["lock"]; ok {
		t.Errorf("source still locked: %v", src["lock"])
	}
	if dst["hostname"] != "db" || dst["tags"] != "db" || dst["rootfs"] != "local-lvm:vm-201-disk-0,size=2G" {
		t.Errorf("clone config %v", dst)
	}
	if reMAC.FindString(src["net0"].(string)) == reMAC.FindString(dst["net0"].(string)) {
		t.Errorf("hwaddr not regenerated: %v / %v", src["net0"], dst["net0"])
	}
}

// An LXC template's clones are linked by default (their volumes named after the base volume) and may
// go to another node from shared storage; a CT on local storage cannot, and a plain volume cannot be
// linked.
func TestLXCLinkedCloneAndTarget(t *testing.T) {
	c := cloneCluster(t, nil)
	tmpl := "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "hostname", "base", "rootfs", "ceph:2", "ostemplate", tmpl))
	if r := c.do("POST", "/nodes/pve1/lxc/200/template", nil); r.Status != 200 {
		t.Fatalf("template: %d %s", r.Status, r.Message)
	}
	testkit.Eventually(t, 10*time.Second, "template: 1", func() bool { return c.config("pve1", "lxc", 200)["template"] == float64(1) })
	c.mustTask("POST", "/nodes/pve1/lxc/200/clone", form("newid", "201", "hostname", "web-1"))
	cl := c.config("pve1", "lxc", 201)
	if cl["rootfs"] != "ceph:base-200-disk-0/vm-201-disk-0,size=2G" || cl["hostname"] != "web-1" {
		t.Fatalf("linked clone config %v", cl)
	}
	if _, ok := cl["template"]; ok {
		t.Fatal("the clone must not be a template")
	}
	c.mustTask("POST", "/nodes/pve1/lxc/200/clone", form("newid", "202", "target", "pve2"))
	if node, kind, _ := c.sim.NodeOf(202); node != "pve2" || kind != "lxc" {
		t.Fatalf("clone with target=pve2 is a %s on %q", kind, node)
	}
	if got := c.config("pve2", "lxc", 202)["rootfs"]; got != "ceph:base-200-disk-0/vm-202-disk-0,size=2G" {
		t.Fatalf("linked clone on pve2: rootfs %v", got)
	}
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "210", "rootfs", "local-lvm:1", "ostemplate", tmpl))
	expectErr(t, c.do("POST", "/nodes/pve1/lxc/210/clone", form("newid", "211", "target", "pve2")), 500, "",
		"can't clone CT to node 'pve2' (CT uses local storage)")
	expectErr(t, c.do("POST", "/nodes/pve1/lxc/210/clone", form("newid", "211", "full", "0")), 500, "",
		"Linked clone feature for 'local-lvm:vm-210-disk-0' is not available")
	if c.sim.Exists(211) {
		t.Fatal("a refused clone left a config behind")
	}
}

// Without a name, a qemu clone is called Copy-of-VM-<source name>, or Copy-of-VM-<source vmid> when the
// source has no name either.
func TestCloneDefaultNameFollowsTheSource(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100"))
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "110", "name", "db"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/clone", form("newid", "101"))
	c.mustTask("POST", "/nodes/pve1/qemu/110/clone", form("newid", "111"))
	if got := c.config("pve1", "qemu", 101)["name"]; got != "Copy-of-VM-100" {
		t.Errorf("clone of an unnamed VM: name %v", got)
	}
	if got := c.config("pve1", "qemu", 111)["name"]; got != "Copy-of-VM-db" {
		t.Errorf("clone of a named VM: name %v", got)
	}
}
