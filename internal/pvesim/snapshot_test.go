package pvesim_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
)

// snapCluster has one storage of each kind that matters for snapshots.
func snapCluster(t *testing.T, durations map[string]pvesim.Duration, guests ...pvesim.GuestSpec) *testCluster {
	t.Helper()
	spec := pvesim.DefaultSpec()
	spec.Guests = guests
	spec.Storages = append(spec.Storages,
		pvesim.StorageSpec{ID: "ceph", Type: "rbd", Content: []string{"images", "rootdir"}},
		pvesim.StorageSpec{ID: "tank", Type: "zfspool", Content: []string{"images", "rootdir"}},
		pvesim.StorageSpec{ID: "thick", Type: "lvm", Content: []string{"images", "rootdir"}},
	)
	spec.Files = []pvesim.FileSpec{{VolID: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", Size: 120 << 20}}
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	for k, v := range durations {
		spec.TaskDurations[k] = v
	}
	return newCluster(t, spec)
}

func (c *testCluster) snapshots(kind, vmid string) []map[string]any {
	c.t.Helper()
	r := c.do("GET", "/nodes/pve1/"+kind+"/"+vmid+"/snapshot", nil)
	if r.Status != 200 {
		c.t.Fatalf("snapshot list: %d %s", r.Status, r.Message)
	}
	var list []map[string]any
	if err := json.Unmarshal(r.Data, &list); err != nil {
		c.t.Fatal(err)
	}
	return list
}

// Which volumes can be snapshotted follows pve-storage: qcow2 on a directory, LVM-thin, ZFS and RBD can;
// raw on a directory, LVM thick and a container's bind mount cannot, and one such volume refuses the
// whole guest; cdroms are not looked at.
func TestSnapshotNeedsEveryVolumeToSupportIt(t *testing.T) {
	// A bind mount needs root@pam, so that container is seeded.
	c := snapCluster(t, nil, pvesim.GuestSpec{VMID: 200, Type: "lxc", Node: "pve1",
		Config: "arch: amd64\nostype: debian\nrootfs: local-lvm:vm-200-disk-0,size=1G\nmp0: /srv/data,mp=/data\n"})
	cases := []struct {
		kind, vmid string
		params     []string
		ok         bool
	}{
		{"qemu", "100", []string{"scsi0", "local:1,format=qcow2", "ide2", "none,media=cdrom"}, true},
		{"qemu", "101", []string{"scsi0", "local:1,format=raw"}, false},
		{"qemu", "102", []string{"scsi0", "local-lvm:1", "scsi1", "tank:1", "scsi2", "ceph:1"}, true},
		{"qemu", "103", []string{"scsi0", "local-lvm:1", "scsi1", "thick:1"}, false},
		{"qemu", "104", []string{"scsi0", "local-lvm:1", "ide2", "local-lvm:cloudinit"}, true},
		{"lxc", "200", nil, false},
		{"lxc", "201", []string{"rootfs", "tank:1"}, true},
	}
	for _, tc := range cases {
		p := append([]string{"vmid", tc.vmid}, tc.params...)
		if tc.kind == "lxc" {
			p = append(p, "ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst")
		}
		if tc.params != nil {
			c.mustTask("POST", "/nodes/pve1/"+tc.kind, form(p...))
		}
		_, st := c.taskOf("POST", "/nodes/pve1/"+tc.kind+"/"+tc.vmid+"/snapshot", form("snapname", "before"))
		if tc.ok && st != "OK" || !tc.ok && st != "snapshot feature is not available" {
			t.Errorf("%s %s %v: task %q", tc.kind, tc.vmid, tc.params, st)
		}
		if list := c.snapshots(tc.kind, tc.vmid); tc.ok != (len(list) == 2) {
			t.Errorf("%s %s: list after the snapshot %v", tc.kind, tc.vmid, list)
		}
		if lock := c.config("pve1", tc.kind, atoi(tc.vmid))["lock"]; lock != nil {
			t.Errorf("%s %s: lock %v left behind", tc.kind, tc.vmid, lock)
		}
	}
}

// Names follow pve-configid, at most 40 characters; "current" and "pending" are reserved.
func TestSnapshotNamesFollowPVE(t *testing.T) {
	c := snapCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:1"))
	for name, msg := range map[string]string{
		"current": "unable to use snapshot name 'current' (reserved name)\n",
		"Pending": "unable to use snapshot name 'pending' (reserved name)\n",
	} {
		if r := c.do("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", name)); r.Status != 500 || r.Message != msg {
			t.Errorf("%s: %d %q", name, r.Status, r.Message)
		}
	}
	for _, bad := range []string{"1abc", "a b", strings.Repeat("a", 41)} {
		if r := c.do("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", bad)); r.Status != 400 || r.Errors["snapname"] == "" {
			t.Errorf("%q: %d %v", bad, r.Status, r.Errors)
		}
	}
}

// While the snapshot task runs the guest carries lock: snapshot and the snapshot snapstate: prepare; a
// config write is refused with PVE's text; the commit makes it the parent of the current config.
func TestSnapshotLocksTheGuestWhileItRuns(t *testing.T) {
	c := snapCluster(t, map[string]pvesim.Duration{"qmsnapshot": pvesim.Duration(300 * time.Millisecond)})
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:1"))
	r := c.do("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "s1", "description", "before the change"))
	upid := r.str(t)
	if !strings.Contains(upid, ":qmsnapshot:100:") {
		t.Fatalf("task type: %s", upid)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.config("pve1", "qemu", 100)["lock"] != "snapshot" {
		if time.Now().After(deadline) {
			t.Fatal("no lock: snapshot while the task runs")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if list := c.snapshots("qemu", "100"); list[0]["snapstate"] != "prepare" {
		t.Errorf("list while running: %v", list)
	}
	if r := c.do("POST", "/nodes/pve1/qemu/100/config", form("cores", "2")); r.Status != 500 || r.Message != "VM 100 is locked (snapshot)\n" {
		t.Errorf("write while snapshotting: %d %q", r.Status, r.Message)
	}
	if st := c.waitTask(upid); st != "OK" {
		t.Fatalf("snapshot task: %q", st)
	}
	cfg := c.config("pve1", "qemu", 100)
	if cfg["lock"] != nil || cfg["parent"] != "s1" {
		t.Fatalf("after the snapshot: %v", cfg)
	}
	list := c.snapshots("qemu", "100")
	if list[0]["snapstate"] != nil || list[0]["description"] != "before the change" || list[0]["vmstate"] != float64(0) || list[1]["running"] != float64(0) {
		t.Fatalf("list: %v", list)
	}
}

// A failed snapshot task removes its half-made snapshot and the lock again.
func TestFailedSnapshotCleansUp(t *testing.T) {
	c := snapCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:1"))
	if err := c.sim.SetFaults(pvesim.Faults{TaskFailureRate: 1, TaskTypes: []string{"qmsnapshot"}}); err != nil {
		t.Fatal(err)
	}
	if _, st := c.taskOf("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "s1")); st != "injected task failure" {
		t.Fatalf("task: %q", st)
	}
	if raw, _ := c.sim.RawConfig(100); strings.Contains(raw, "[s1]") || strings.Contains(raw, "lock:") {
		t.Fatalf("after a failed snapshot:\n%s", raw)
	}
}

// Rollback stops a running guest, restores the snapshot's config (description and unused disks stay,
// a disk added since becomes unused), makes the snapshot the parent and, with start=1, starts it again.
func TestRollbackRestoresTheSnapshotConfig(t *testing.T) {
	c := snapCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:1", "memory", "1024", "description", "web"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "s1"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("memory", "4096", "scsi1", "local-lvm:2", "description", "web v2"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/start", nil)
	upid, st := c.taskOf("POST", "/nodes/pve1/qemu/100/snapshot/s1/rollback", form("start", "1"))
	if st != "OK" || !strings.Contains(upid, ":qmrollback:100:") {
		t.Fatalf("rollback %s: %q", upid, st)
	}
	cfg := c.config("pve1", "qemu", 100)
	if cfg["memory"] != "1024" || cfg["scsi1"] != nil || cfg["unused0"] != "local-lvm:vm-100-disk-1" || cfg["description"] != "web v2" || cfg["parent"] != "s1" || cfg["lock"] != nil {
		t.Fatalf("config after rollback: %v", cfg)
	}
	if !c.sim.Running(100) {
		t.Fatal("start=1 did not start the VM again")
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot/s1/rollback", nil)
	if c.sim.Running(100) {
		t.Fatal("a rollback without start left the VM running")
	}
}

// A failed rollback leaves the guest stopped with lock: rollback, which refuses other writes.
func TestFailedRollbackLeavesTheLock(t *testing.T) {
	c := snapCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "rootfs", "local-lvm:1", "ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"))
	c.mustTask("POST", "/nodes/pve1/lxc/200/snapshot", form("snapname", "s1"))
	c.mustTask("POST", "/nodes/pve1/lxc/200/status/start", nil)
	if err := c.sim.SetFaults(pvesim.Faults{TaskFailureRate: 1, TaskTypes: []string{"vzrollback"}}); err != nil {
		t.Fatal(err)
	}
	if _, st := c.taskOf("POST", "/nodes/pve1/lxc/200/snapshot/s1/rollback", nil); st != "injected task failure" {
		t.Fatalf("rollback: %q", st)
	}
	if c.config("pve1", "lxc", 200)["lock"] != "rollback" || c.sim.Running(200) {
		t.Fatalf("after a failed rollback: %v running=%v", c.config("pve1", "lxc", 200), c.sim.Running(200))
	}
	if r := c.do("PUT", "/nodes/pve1/lxc/200/config", form("cores", "2")); r.Status != 500 || r.Message != "CT 200 is locked (rollback)\n" {
		t.Fatalf("write to a locked CT: %d %q", r.Status, r.Message)
	}
}

// ZFS rolls back only to the most recent snapshot of a volume.
func TestZFSRollsBackOnlyToTheLatestSnapshot(t *testing.T) {
	c := snapCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "tank:1"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "s1"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "s2"))
	if _, st := c.taskOf("POST", "/nodes/pve1/qemu/100/snapshot/s1/rollback", nil); st != "can't rollback, 's1' is not most recent snapshot on 'vm-100-disk-0'" {
		t.Fatalf("rollback past a later snapshot: %q", st)
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot/s2/rollback", nil)
}

// Deleting a snapshot re-links its children to its parent; the task is qmdelsnapshot / vzdelsnapshot
// and holds lock: snapshot-delete while it runs.
func TestDeleteSnapshotRelinksTheChain(t *testing.T) {
	c := snapCluster(t, map[string]pvesim.Duration{"vzdelsnapshot": pvesim.Duration(300 * time.Millisecond)})
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "rootfs", "local-lvm:1", "ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"))
	for _, n := range []string{"s1", "s2", "s3"} {
		c.mustTask("POST", "/nodes/pve1/lxc/200/snapshot", form("snapname", n))
	}
	r := c.do("DELETE", "/nodes/pve1/lxc/200/snapshot/s2", nil)
	upid := r.str(t)
	deadline := time.Now().Add(5 * time.Second)
	for c.config("pve1", "lxc", 200)["lock"] != "snapshot-delete" {
		if time.Now().After(deadline) {
			t.Fatal("no lock: snapshot-delete while the task runs")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := c.waitTask(upid); st != "OK" || !strings.Contains(upid, ":vzdelsnapshot:200:") {
		t.Fatalf("delete %s: %q", upid, st)
	}
	list := c.snapshots("lxc", "200")
	if len(list) != 3 || list[0]["name"] != "s1" || list[1]["name"] != "s3" || list[1]["parent"] != "s1" || list[2]["parent"] != "s3" {
		t.Fatalf("chain after delete: %v", list)
	}
	if _, st := c.taskOf("DELETE", "/nodes/pve1/lxc/200/snapshot/s2", nil); st != "snapshot 's2' does not exist" {
		t.Fatalf("delete again: %q", st)
	}
}

// The RAM state is saved only for a running VM that asks for it; a rollback to it starts the VM.
func TestVMStateOnlyForARunningVM(t *testing.T) {
	c := snapCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:1", "memory", "1024"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "cold", "vmstate", "1"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/start", nil)
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "warm", "vmstate", "1"))
	list := c.snapshots("qemu", "100")
	if list[0]["vmstate"] != float64(0) || list[1]["vmstate"] != float64(1) {
		t.Fatalf("vmstate flags: %v", list)
	}
	if _, ok := c.content("pve1", "local-lvm", nil)["local-lvm:vm-100-state-warm"]; !ok {
		t.Fatal("no state volume for the warm snapshot")
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/stop", nil)
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot/warm/rollback", nil)
	if !c.sim.Running(100) {
		t.Fatal("a rollback to a snapshot with RAM did not start the VM")
	}
	c.mustTask("DELETE", "/nodes/pve1/qemu/100/snapshot/warm", nil)
	if _, ok := c.content("pve1", "local-lvm", nil)["local-lvm:vm-100-state-warm"]; ok {
		t.Fatal("the state volume outlived its snapshot")
	}
}

// The snapshot's config can be read and its description changed; a missing snapshot is PVE's error.
func TestSnapshotConfigReadAndDescription(t *testing.T) {
	c := snapCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:1", "cores", "2"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "s1", "description", "old"))
	if r := c.do("PUT", "/nodes/pve1/qemu/100/snapshot/s1/config", form("description", "new")); r.Status != 200 {
		t.Fatalf("put: %d %s", r.Status, r.Message)
	}
	got := c.do("GET", "/nodes/pve1/qemu/100/snapshot/s1/config", nil).obj(t)
	if got["description"] != "new" || got["cores"] != "2" || got["snaptime"] == nil {
		t.Fatalf("snapshot config: %v", got)
	}
	if r := c.do("GET", "/nodes/pve1/qemu/100/snapshot/nope/config", nil); r.Status != 500 || r.Message != "snapshot 'nope' does not exist\n" {
		t.Fatalf("missing: %d %q", r.Status, r.Message)
	}
	var idx []map[string]string
	if err := json.Unmarshal(c.do("GET", "/nodes/pve1/qemu/100/snapshot/s1", nil).Data, &idx); err != nil || len(idx) != 2 {
		t.Fatalf("index: %v %v", idx, err)
	}
}

// A container with snapshots cannot become a template.
func TestContainerWithSnapshotsCannotBecomeATemplate(t *testing.T) {
	c := snapCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "rootfs", "local-lvm:1", "ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"))
	c.mustTask("POST", "/nodes/pve1/lxc/200/snapshot", form("snapname", "s1"))
	if r := c.do("POST", "/nodes/pve1/lxc/200/template", nil); r.Status != 500 || r.Message != "unable to create template, because CT contains snapshots\n" {
		t.Fatalf("template: %d %q", r.Status, r.Message)
	}
	c.mustTask("DELETE", "/nodes/pve1/lxc/200/snapshot/s1", nil)
	if r := c.do("POST", "/nodes/pve1/lxc/200/template", nil); r.Status != 200 {
		t.Fatalf("template without snapshots: %d %q", r.Status, r.Message)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// Current PVE grows a disk that snapshots hold: qemu-server's resize_vm no longer refuses a qcow2 volume with
// snapshots (the check PVE 6 and older made), and pve-container's check concerns qcow2 volumes, which
// containers never have. A grow after a snapshot succeeds, on a file storage's qcow2 and on LVM-thin, and the
// snapshot keeps the size it had.
func TestResizeGrowsADiskThatASnapshotHolds(t *testing.T) {
	c := snapCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local:1,format=qcow2", "scsi1", "local-lvm:1"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "proxops-before"))
	for _, disk := range []string{"scsi0", "scsi1"} {
		if _, st := c.taskOf("PUT", "/nodes/pve1/qemu/100/resize", form("disk", disk, "size", "+1G")); st != "OK" {
			t.Fatalf("grow %s with a snapshot: %s", disk, st)
		}
		if got, _ := c.config("pve1", "qemu", 100)[disk].(string); !strings.Contains(got, "size=2G") {
			t.Fatalf("%s after the grow: %s", disk, got)
		}
	}
	r := c.do("GET", "/nodes/pve1/qemu/100/snapshot/proxops-before/config", nil)
	if r.Status != 200 || !strings.Contains(string(r.Data), "size=1G") {
		t.Fatalf("the snapshot's config after the grow: %d %s", r.Status, r.Data)
	}
}
