package pvesim_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
)

// migrationCluster has three nodes, a shared rbd storage, node-local storages and a storage only pve1 and
// pve2 have.
func migrationCluster(t *testing.T, durations map[string]pvesim.Duration, faults pvesim.Faults, guests ...pvesim.GuestSpec) *testCluster {
	spec := pvesim.DefaultSpec()
	spec.Storages = append(spec.Storages,
		pvesim.StorageSpec{ID: "ceph", Type: "rbd", Content: []string{"images", "rootdir"}, Shared: true},
		pvesim.StorageSpec{ID: "fast", Type: "lvmthin", Content: []string{"images", "rootdir"}, Nodes: []string{"pve1", "pve2"}})
	spec.Files = []pvesim.FileSpec{
		{VolID: "local:iso/debian-12.iso", Size: 600 << 20},
		{VolID: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", Size: 120 << 20},
	}
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	for k, v := range durations {
		spec.TaskDurations[k] = v
	}
	spec.Faults = faults
	spec.Guests = guests
	return newCluster(t, spec)
}

func (c *testCluster) guestList(node, kind string) map[float64]map[string]any {
	c.t.Helper()
	r := c.do("GET", "/nodes/"+node+"/"+kind, nil)
	var list []map[string]any
	if err := json.Unmarshal(r.Data, &list); err != nil {
		c.t.Fatal(err)
	}
	out := map[float64]map[string]any{}
	for _, e := range list {
		out[e["vmid"].(float64)] = e
	}
	return out
}

func (c *testCluster) taskLog(upid string) string {
	c.t.Helper()
	node := strings.Split(upid, ":")[1]
	r := c.do("GET", "/nodes/"+node+"/tasks/"+upid+"/log", form("limit", "500"))
	var lines []map[string]any
	if err := json.Unmarshal(r.Data, &lines); err != nil {
		c.t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l["t"].(string) + "\n")
	}
	return b.String()
}

// A running VM on shared storage moves online: the qmigrate task (id = the vmid, on the source) holds
// `lock: migrate` while it runs, and afterwards the config is in the target's directory, the VM still runs
// there and the source no longer lists it.
func TestOnlineMigrationMovesARunningVMAndKeepsItRunning(t *testing.T) {
	c := migrationCluster(t, map[string]pvesim.Duration{"qmigrate": pvesim.Duration(200 * time.Millisecond)}, pvesim.Faults{})
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "ceph:8", "memory", "2048"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/start", nil)

	pre := c.do("GET", "/nodes/pve1/qemu/100/migrate", form("target", "pve2")).obj(t)
	if pre["running"] != true || len(pre["local_disks"].([]any)) != 0 || len(pre["local_resources"].([]any)) != 0 {
		t.Fatalf("precondition %v", pre)
	}
	r := c.do("POST", "/nodes/pve1/qemu/100/migrate", form("target", "pve2"))
	expectErr(t, r, 500, "", "can't migrate running VM without --online")

	r = c.do("POST", "/nodes/pve1/qemu/100/migrate", form("target", "pve2", "online", "1"))
	if r.Status != 200 {
		t.Fatalf("migrate: %d %s %v", r.Status, r.Message, r.Errors)
	}
	upid := r.str(t)
	if !strings.Contains(upid, ":pve1:") || !strings.Contains(upid, ":qmigrate:100:") {
		t.Fatalf("UPID %s: want a qmigrate task of 100 on pve1", upid)
	}
	if l := c.config("pve1", "qemu", 100)["lock"]; l != "migrate" {
		t.Fatalf("lock during the migration: %v", l)
	}
	if st := c.waitTask(upid); st != "OK" {
		t.Fatalf("task: %s\n%s", st, c.taskLog(upid))
	}
	if _, ok := c.guestList("pve1", "qemu")[100]; ok {
		t.Fatal("pve1 still lists VM 100")
	}
	g, ok := c.guestList("pve2", "qemu")[100]
	if !ok || g["status"] != "running" {
		t.Fatalf("pve2 lists %v, want VM 100 running", g)
	}
	if _, ok := c.config("pve2", "qemu", 100)["lock"]; ok {
		t.Fatal("lock left after the migration")
	}
	log := c.taskLog(upid)
	for _, want := range []string{"starting migration of VM 100 to node 'pve2'", "migration status: completed",
		"migration finished successfully"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// A stopped VM's local disk is copied to the target node offline; the source's volume is gone.
func TestOfflineMigrationCopiesLocalDisks(t *testing.T) {
	c := migrationCluster(t, nil, pvesim.Faults{})
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:4"))
	pre := c.do("GET", "/nodes/pve1/qemu/100/migrate", nil).obj(t)
	disks := pre["local_disks"].([]any)
	if len(disks) != 1 || disks[0].(map[string]any)["volid"] != "local-lvm:vm-100-disk-0" {
		t.Fatalf("local_disks %v", disks)
	}
	if allowed := pre["allowed_nodes"].([]any); len(allowed) != 2 {
		t.Fatalf("allowed_nodes %v", allowed)
	}
	upid, st := c.taskOf("POST", "/nodes/pve1/qemu/100/migrate", form("target", "pve3"))
	if st != "OK" {
		t.Fatalf("task %s\n%s", st, c.taskLog(upid))
	}
	if _, ok := c.content("pve3", "local-lvm", nil)["local-lvm:vm-100-disk-0"]; !ok {
		t.Fatal("the disk is not on pve3")
	}
	if _, ok := c.content("pve1", "local-lvm", nil)["local-lvm:vm-100-disk-0"]; ok {
		t.Fatal("the disk is still on pve1")
	}
	if g := c.guestList("pve3", "qemu")[100]; g == nil || g["status"] != "stopped" {
		t.Fatalf("pve3 lists %v", g)
	}
	if !strings.Contains(c.taskLog(upid), "volume 'local-lvm:vm-100-disk-0' is 'local-lvm:vm-100-disk-0' on the target") {
		t.Fatalf("log:\n%s", c.taskLog(upid))
	}
}

// A running VM with a local disk needs with-local-disks, and targetstorage maps it onto another storage.
func TestLiveMigrationOfLocalDisksNeedsWithLocalDisks(t *testing.T) {
	c := migrationCluster(t, nil, pvesim.Faults{})
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:4"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/start", nil)
	upid, st := c.taskOf("POST", "/nodes/pve1/qemu/100/migrate", form("target", "pve2", "online", "1"))
	if !strings.Contains(st, "Problem found while scanning volumes") ||
		!strings.Contains(c.taskLog(upid), "can't live migrate attached local disks without with-local-disks option") {
		t.Fatalf("task %s\n%s", st, c.taskLog(upid))
	}
	if cf := c.config("pve1", "qemu", 100); cf["lock"] != nil {
		t.Fatalf("a failed migration leaves the lock %v", cf["lock"])
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/migrate", form("target", "pve2", "online", "1", "with-local-disks", "1",
		"targetstorage", "fast"))
	cf := c.config("pve2", "qemu", 100)
	if !strings.HasPrefix(cf["scsi0"].(string), "fast:vm-100-disk-0") {
		t.Fatalf("scsi0 %v: want the disk on fast", cf["scsi0"])
	}
	if c.guestList("pve2", "qemu")[100]["status"] != "running" {
		t.Fatal("the VM does not run on pve2")
	}
}

// PVE's refusals, with its texts: a local ISO, a passthrough device, a storage the target lacks, a locked
// VM, the local node as target.
func TestMigrationRefusals(t *testing.T) {
	c := migrationCluster(t, nil, pvesim.Faults{}, pvesim.GuestSpec{VMID: 101, Type: "qemu", Node: "pve1",
		Config: "scsi0: ceph:vm-101-disk-0,size=4G\nhostpci0: 0000:01:00.0\n"})
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "ceph:4", "ide2", "local:iso/debian-12.iso,media=cdrom"))
	pre := c.do("GET", "/nodes/pve1/qemu/100/migrate", nil).obj(t)
	disks := pre["local_disks"].([]any)
	if len(disks) != 1 || disks[0].(map[string]any)["cdrom"] != true {
		t.Fatalf("local_disks %v: want the ISO as a cdrom", disks)
	}
	upid, st := c.taskOf("POST", "/nodes/pve1/qemu/100/migrate", form("target", "pve2"))
	if !strings.Contains(c.taskLog(upid), "can't migrate local disk 'local:iso/debian-12.iso': local cdrom image") || st == "OK" {
		t.Fatalf("task %s\n%s", st, c.taskLog(upid))
	}
	if g := c.guestList("pve1", "qemu")[100]; g == nil {
		t.Fatal("the refused VM left pve1")
	}

	pre = c.do("GET", "/nodes/pve1/qemu/101/migrate", nil).obj(t)
	if res := pre["local_resources"].([]any); len(res) != 1 || res[0] != "hostpci0" {
		t.Fatalf("local_resources %v", res)
	}
	_, st = c.taskOf("POST", "/nodes/pve1/qemu/101/migrate", form("target", "pve2"))
	if st != "can't migrate VM which uses local devices: hostpci0" {
		t.Fatalf("task %q", st)
	}

	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "102", "scsi0", "fast:4"))
	pre = c.do("GET", "/nodes/pve1/qemu/102/migrate", nil).obj(t)
	na := pre["not_allowed_nodes"].(map[string]any)["pve3"].(map[string]any)["unavailable_storages"].([]any)
	if len(na) != 1 || na[0] != "fast" {
		t.Fatalf("not_allowed_nodes %v", pre["not_allowed_nodes"])
	}
	expectErr(t, c.do("POST", "/nodes/pve1/qemu/102/migrate", form("target", "pve3")), 500, "",
		"storage 'fast' is not available on node 'pve3'")

	if err := c.sim.SetLock(102, "backup"); err != nil {
		t.Fatal(err)
	}
	expectErr(t, c.do("POST", "/nodes/pve1/qemu/102/migrate", form("target", "pve2")), 500, "", "VM 102 is locked (backup)")
	expectErr(t, c.do("POST", "/nodes/pve1/qemu/100/migrate", form("target", "pve1")), 400, "target", "target is local node.")
	expectErr(t, c.do("POST", "/nodes/pve1/qemu/100/migrate", form("target", "pve9")), 500, "", "no such cluster node 'pve9'")
}

// A running container moves in restart mode: it is shut down, its local volume copied, and it is started on
// the target. Online is refused, as PVE has no live migration for containers.
func TestContainerRestartMigration(t *testing.T) {
	c := migrationCluster(t, nil, pvesim.Faults{})
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
		"rootfs", "local-lvm:4"))
	c.mustTask("POST", "/nodes/pve1/lxc/200/status/start", nil)
	expectErr(t, c.do("POST", "/nodes/pve1/lxc/200/migrate", form("target", "pve2")), 500, "",
		"can't migrate running container without --online or --restart")
	_, st := c.taskOf("POST", "/nodes/pve1/lxc/200/migrate", form("target", "pve2", "online", "1"))
	if st != "lxc live migration is currently not implemented" {
		t.Fatalf("online: %q", st)
	}
	upid, st := c.taskOf("POST", "/nodes/pve1/lxc/200/migrate", form("target", "pve2", "restart", "1", "timeout", "30"))
	log := c.taskLog(upid)
	if st != "OK" || !strings.Contains(upid, ":vzmigrate:200:") || !strings.Contains(log, "shutdown CT 200") ||
		!strings.Contains(log, "start container on target node") {
		t.Fatalf("task %s %s\n%s", upid, st, log)
	}
	if g := c.guestList("pve2", "lxc")[200]; g == nil || g["status"] != "running" {
		t.Fatalf("pve2 lists %v", g)
	}
	if _, ok := c.content("pve2", "local-lvm", nil)["local-lvm:vm-200-disk-0"]; !ok {
		t.Fatal("the rootfs is not on pve2")
	}
}

// A migration failing half way (a seeded task fault) leaves the guest on the source, unlocked.
func TestFailedMigrationLeavesTheGuestOnTheSourceUnlocked(t *testing.T) {
	c := migrationCluster(t, nil, pvesim.Faults{TaskFailureRate: 1, TaskTypes: []string{"qmigrate"},
		TaskFailureMessage: "migration problems"})
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:4"))
	_, st := c.taskOf("POST", "/nodes/pve1/qemu/100/migrate", form("target", "pve2"))
	if st != "migration problems" {
		t.Fatalf("task %q", st)
	}
	cf := c.config("pve1", "qemu", 100)
	if cf["lock"] != nil {
		t.Fatalf("lock %v", cf["lock"])
	}
	if _, ok := c.content("pve1", "local-lvm", nil)["local-lvm:vm-100-disk-0"]; !ok {
		t.Fatal("the disk left pve1")
	}
}

// The time a migration takes grows with the local data it copies.
func TestMigrationDurationFollowsDiskSize(t *testing.T) {
	c := migrationCluster(t, map[string]pvesim.Duration{"qmigrate": pvesim.Duration(20 * time.Millisecond)}, pvesim.Faults{})
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "ceph:1"))
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "101", "scsi0", "local-lvm:64"))
	took := func(vmid string) time.Duration {
		start := time.Now()
		c.mustTask("POST", "/nodes/pve1/qemu/"+vmid+"/migrate", form("target", "pve2"))
		return time.Since(start)
	}
	small, large := took("100"), took("101")
	if large < small+50*time.Millisecond {
		t.Fatalf("a 64 GiB local disk took %v, a shared one %v", large, small)
	}
}

// A snapshot holds a VM's local disk where PVE cannot copy snapshots: offline on LVM-thin the worker logs
// "non-migratable snapshot exists" for the disk and fails, a running VM's live copy refuses any snapshot,
// and the VM stays on its node unlocked. Once the snapshot is gone the same migration succeeds; a snapshot of
// a disk on shared storage never blocks.
func TestSnapshotsBlockTheMigrationOfLocalDisks(t *testing.T) {
	c := migrationCluster(t, nil, pvesim.Faults{})
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:4"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "before-upgrade"))
	upid, st := c.taskOf("POST", "/nodes/pve1/qemu/100/migrate", form("target", "pve2"))
	if st != "Problem found while scanning volumes - can't migrate VM - check log" ||
		!strings.Contains(c.taskLog(upid), "can't migrate local disk 'local-lvm:vm-100-disk-0': non-migratable snapshot exists") {
		t.Fatalf("offline with a snapshot: task %q\n%s", st, c.taskLog(upid))
	}
	if cf := c.config("pve1", "qemu", 100); cf["lock"] != nil {
		t.Fatalf("a refused migration leaves the lock %v", cf["lock"])
	}

	c.mustTask("POST", "/nodes/pve1/qemu/100/status/start", nil)
	upid, st = c.taskOf("POST", "/nodes/pve1/qemu/100/migrate", form("target", "pve2", "online", "1", "with-local-disks", "1"))
	if !strings.Contains(st, "Problem found while scanning volumes") ||
		!strings.Contains(c.taskLog(upid), "can't migrate local disk 'local-lvm:vm-100-disk-0': online storage migration not possible if non-replicated snapshot exists") {
		t.Fatalf("online with a snapshot: task %q\n%s", st, c.taskLog(upid))
	}
	if g := c.guestList("pve1", "qemu")[100]; g == nil || g["status"] != "running" {
		t.Fatalf("the refused VM: pve1 lists %v", g)
	}

	c.mustTask("DELETE", "/nodes/pve1/qemu/100/snapshot/before-upgrade", nil)
	c.mustTask("POST", "/nodes/pve1/qemu/100/migrate", form("target", "pve2", "online", "1", "with-local-disks", "1"))
	if g := c.guestList("pve2", "qemu")[100]; g == nil || g["status"] != "running" {
		t.Fatalf("without the snapshot: pve2 lists %v", g)
	}

	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "101", "scsi0", "ceph:4"))
	c.mustTask("POST", "/nodes/pve1/qemu/101/snapshot", form("snapname", "kept"))
	c.mustTask("POST", "/nodes/pve1/qemu/101/migrate", form("target", "pve3"))
	if g := c.guestList("pve3", "qemu")[101]; g == nil {
		t.Fatal("a VM on shared storage with a snapshot did not move")
	}
}

// A container's snapshot holds its local volume: in restart mode the container is shut down, the worker
// logs "non-migratable snapshot exists" for the volume, fails with "can't migrate CT - check log" and starts
// the container again on its node.
func TestSnapshotsBlockTheMigrationOfAContainersLocalVolumes(t *testing.T) {
	c := migrationCluster(t, nil, pvesim.Faults{})
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
		"rootfs", "local-lvm:4"))
	c.mustTask("POST", "/nodes/pve1/lxc/200/snapshot", form("snapname", "clean"))
	c.mustTask("POST", "/nodes/pve1/lxc/200/status/start", nil)
	upid, st := c.taskOf("POST", "/nodes/pve1/lxc/200/migrate", form("target", "pve2", "restart", "1"))
	log := c.taskLog(upid)
	if st != "can't migrate CT - check log" || !strings.Contains(log, "can't migrate local volume 'local-lvm:vm-200-disk-0': non-migratable snapshot exists") ||
		!strings.Contains(log, "start container on source node") {
		t.Fatalf("task %q\n%s", st, log)
	}
	if g := c.guestList("pve1", "lxc")[200]; g == nil || g["status"] != "running" {
		t.Fatalf("the refused container: pve1 lists %v", g)
	}
	if cf := c.config("pve1", "lxc", 200); cf["lock"] != nil {
		t.Fatalf("lock %v", cf["lock"])
	}
	c.mustTask("DELETE", "/nodes/pve1/lxc/200/snapshot/clean", nil)
	c.mustTask("POST", "/nodes/pve1/lxc/200/migrate", form("target", "pve2", "restart", "1"))
	if g := c.guestList("pve2", "lxc")[200]; g == nil || g["status"] != "running" {
		t.Fatalf("without the snapshot: pve2 lists %v", g)
	}
}
