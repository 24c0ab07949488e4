package pvesim_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// suspend pauses a VM (qmpstatus paused in status/current and in listings with full=1), a paused VM
// refuses a shutdown unless forceStop, resume continues it.
func TestSuspendResumeAndPausedShutdown(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "start", "1"))
	upid, st := c.taskOf("POST", "/nodes/pve1/qemu/100/status/suspend", nil)
	if st != "OK" || !strings.Contains(upid, ":qmpause:100:") {
		t.Fatalf("suspend %s %s", upid, st)
	}
	if cur := c.do("GET", "/nodes/pve1/qemu/100/status/current", nil).obj(t); cur["qmpstatus"] != "paused" || cur["status"] != "running" {
		t.Fatalf("status/current %v", cur)
	}
	var list []map[string]any
	_ = json.Unmarshal(c.do("GET", "/nodes/pve1/qemu", form("full", "1")).Data, &list)
	if len(list) != 1 || list[0]["qmpstatus"] != "paused" {
		t.Fatalf("listing %v", list)
	}
	if r := c.do("POST", "/nodes/pve1/qemu/100/status/shutdown", nil); r.Status != 500 || r.Message != "VM is paused - cannot shutdown\n" {
		t.Fatalf("shutdown of a paused VM: %d %q", r.Status, r.Message)
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/resume", nil)
	if cur := c.do("GET", "/nodes/pve1/qemu/100/status/current", nil).obj(t); cur["qmpstatus"] != "running" {
		t.Fatalf("after resume %v", cur)
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/suspend", nil)
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/shutdown", form("forceStop", "1"))
	if c.sim.Running(100) {
		t.Fatal("forceStop must stop a paused VM")
	}
	if r := c.do("POST", "/nodes/pve1/qemu/100/status/resume", nil); r.Status != 500 || r.Message != "VM 100 not running\n" {
		t.Fatalf("resume of a stopped VM: %d %q", r.Status, r.Message)
	}
}

// A guest that ignores ACPI makes a shutdown time out with PVE's message; forceStop stops it anyway.
func TestShutdownTimesOutWhenACPIIsIgnored(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	spec.ShutdownWait = pvesim.Duration(20 * time.Millisecond)
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Running: true, IgnoreACPI: true, Config: "cores: 1\n"}}
	c := newCluster(t, spec)
	if _, st := c.taskOf("POST", "/nodes/pve1/qemu/100/status/shutdown", form("timeout", "5")); st != "VM quit/powerdown failed - got timeout" {
		t.Fatalf("shutdown: %q", st)
	}
	if !c.sim.Running(100) {
		t.Fatal("the VM must still run")
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/shutdown", form("timeout", "5", "forceStop", "1"))
	if c.sim.Running(100) {
		t.Fatal("forceStop must stop the VM")
	}
	// Stop of a stopped VM is a no-op; LXC power errors are synchronous.
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/stop", nil)
	if err := c.sim.SetIgnoreACPI(100, false); err != nil {
		t.Fatal(err)
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/start", nil)
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/shutdown", nil)
}

// An HA-managed guest is started by a hastart task that ends before the guest runs; stop is hastop;
// destroy without purge is refused while HA references the guest.
func TestHAStartIsAHastartTask(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	spec.HADelay = pvesim.Duration(100 * time.Millisecond)
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", HA: true, Config: "cores: 1\n"}}
	c := newCluster(t, spec)
	upid, st := c.taskOf("POST", "/nodes/pve1/qemu/100/status/start", nil)
	if st != "OK" || !strings.Contains(upid, ":hastart:100:") {
		t.Fatalf("start of an HA guest: %s %s", upid, st)
	}
	if c.sim.Running(100) {
		t.Fatal("the guest must start only after the HA manager acts")
	}
	cur := c.do("GET", "/nodes/pve1/qemu/100/status/current", nil).obj(t)
	if ha := cur["ha"].(map[string]any); ha["managed"] != float64(1) || ha["state"] != "started" {
		t.Fatalf("ha %v", cur["ha"])
	}
	testkit.Eventually(t, 10*time.Second, "the HA manager to start the VM", func() bool { return c.sim.Running(100) })
	upid, _ = c.taskOf("POST", "/nodes/pve1/qemu/100/status/shutdown", nil)
	if !strings.Contains(upid, ":hastop:100:") {
		t.Fatalf("shutdown of an HA guest: %s", upid)
	}
	testkit.Eventually(t, 10*time.Second, "the HA manager to stop the VM", func() bool { return !c.sim.Running(100) })
	if r := c.do("DELETE", "/nodes/pve1/qemu/100", nil); r.Status != 500 || r.Message != "unable to remove VM 100 - used in HA resources and purge parameter not set.\n" {
		t.Fatalf("destroy without purge: %d %q", r.Status, r.Message)
	}
	c.mustTask("DELETE", "/nodes/pve1/qemu/100", form("purge", "1"))
}

// A config flock held by someone else makes writes wait and then fail with PVE's message, for qemu and
// lxc, synchronous handlers and workers alike; a task holding the flock blocks a second write.
func TestLockTimeoutUnderContention(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Files = []pvesim.FileSpec{{VolID: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}}
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0, "qmconfig": pvesim.Duration(400 * time.Millisecond)}
	spec.LockTimeouts = map[string]pvesim.Duration{"default": pvesim.Duration(50 * time.Millisecond)}
	c := newCluster(t, spec)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100"))
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "rootfs", "local-lvm:1", "ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"))

	release, err := c.sim.HoldFlock("qemu", 100)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := c.do("PUT", "/nodes/pve1/qemu/100/config", form("cores", "2"))
	if r.Status != 500 || r.Message != "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout\n" {
		t.Fatalf("PUT under contention: %d %q", r.Status, r.Message)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("the write gave up after %v, before the lock timeout", waited)
	}
	if _, st := c.taskOf("POST", "/nodes/pve1/qemu/100/status/start", nil); st != "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout" {
		t.Fatalf("start under contention: %q", st)
	}
	release()
	if r := c.do("PUT", "/nodes/pve1/qemu/100/config", form("cores", "2")); r.Status != 200 {
		t.Fatalf("PUT after release: %d %s", r.Status, r.Message)
	}
	// A POST config worker keeps the flock for its whole run; a concurrent write times out.
	r = c.do("POST", "/nodes/pve1/qemu/100/config", form("cores", "3"))
	if r.Status != 200 {
		t.Fatalf("POST config: %d %s", r.Status, r.Message)
	}
	if r2 := c.do("PUT", "/nodes/pve1/qemu/100/config", form("cores", "4")); r2.Status != 500 || !strings.Contains(r2.Message, "got timeout") {
		t.Fatalf("PUT while a qmconfig task runs: %d %q", r2.Status, r2.Message)
	}
	if st := c.waitTask(r.str(t)); st != "OK" {
		t.Fatalf("qmconfig: %s", st)
	}
	release, err = c.sim.HoldFlock("lxc", 200)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if r := c.do("PUT", "/nodes/pve1/lxc/200/config", form("cores", "2")); r.Status != 500 || r.Message != "can't lock file '/run/lock/lxc/pve-config-200.lock' - got timeout\n" {
		t.Fatalf("lxc PUT under contention: %d %q", r.Status, r.Message)
	}
}

// A guest locked as by a backup refuses writes with "VM <id> is locked (backup)" until the lock is gone.
func TestBackupLockRefusesWritesUntilCleared(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100"))
	if err := c.sim.LockFor(100, "backup", 150*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if r := c.do("PUT", "/nodes/pve1/qemu/100/config", form("cores", "2")); r.Status != 500 || r.Message != "VM 100 is locked (backup)\n" {
		t.Fatalf("write to a locked VM: %d %q", r.Status, r.Message)
	}
	if _, st := c.taskOf("POST", "/nodes/pve1/qemu/100/status/start", nil); st != "VM 100 is locked (backup)" {
		t.Fatalf("start of a locked VM: %q", st)
	}
	testkit.Eventually(t, 10*time.Second, "the backup lock to clear", func() bool {
		cfg, _ := c.sim.Config(100)
		return cfg["lock"] == ""
	})
	if r := c.do("PUT", "/nodes/pve1/qemu/100/config", form("cores", "2")); r.Status != 200 {
		t.Fatalf("write after the lock: %d %s", r.Status, r.Message)
	}
}

// Resize grows only: "+N" grows by N, a bare number is bytes, the same size is a no-op for qemu and an
// error for lxc; shrinking is refused (qemu in the task, lxc synchronously).
func TestResizeGrowsOnly(t *testing.T) {
	c := cloneCluster(t, nil)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:4", "ide2", "local:iso/debian-12.iso,media=cdrom"))
	upid, st := c.taskOf("PUT", "/nodes/pve1/qemu/100/resize", form("disk", "scsi0", "size", "+1G"))
	if st != "OK" || !strings.Contains(upid, ":resize:100:") {
		t.Fatalf("grow: %s %s", upid, st)
	}
	if got := c.config("pve1", "qemu", 100)["scsi0"]; got != "local-lvm:vm-100-disk-0,size=5G" {
		t.Fatalf("after +1G: %v", got)
	}
	c.mustTask("PUT", "/nodes/pve1/qemu/100/resize", form("disk", "scsi0", "size", "6442450944"))
	if got := c.config("pve1", "qemu", 100)["scsi0"]; got != "local-lvm:vm-100-disk-0,size=6G" {
		t.Fatalf("after 6442450944 bytes: %v", got)
	}
	digest := c.config("pve1", "qemu", 100)["digest"]
	c.mustTask("PUT", "/nodes/pve1/qemu/100/resize", form("disk", "scsi0", "size", "6G"))
	if c.config("pve1", "qemu", 100)["digest"] != digest {
		t.Fatal("a same-size resize must not change the config")
	}
	for _, tc := range []struct{ disk, size, want string }{
		{"scsi0", "5G", "shrinking disks is not supported"},
		{"ide2", "+1G", "you can't resize a cdrom"},
		{"scsi3", "+1G", "disk 'scsi3' does not exist"},
	} {
		if _, st := c.taskOf("PUT", "/nodes/pve1/qemu/100/resize", form("disk", tc.disk, "size", tc.size)); st != tc.want {
			t.Errorf("resize %s to %s: %q, want %q", tc.disk, tc.size, st, tc.want)
		}
	}
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "rootfs", "local-lvm:2", "ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"))
	for _, tc := range []struct{ size, want string }{
		{"1G", "unable to shrink disk size\n"},
		{"2G", "disk is already at specified size\n"},
	} {
		if r := c.do("PUT", "/nodes/pve1/lxc/200/resize", form("disk", "rootfs", "size", tc.size)); r.Status != 500 || r.Message != tc.want {
			t.Errorf("lxc resize to %s: %d %q", tc.size, r.Status, r.Message)
		}
	}
	c.mustTask("PUT", "/nodes/pve1/lxc/200/resize", form("disk", "rootfs", "size", "+512M"))
	if got := c.config("pve1", "lxc", 200)["rootfs"]; got != "local-lvm:vm-200-disk-0,size=2560M" {
		t.Fatalf("lxc rootfs %v", got)
	}
}

// /cluster/resources shows a new guest with status unknown and no name until the lag has passed.
func TestClusterResourcesLagForNewGuests(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	spec.ResourcesLag = pvesim.Duration(200 * time.Millisecond)
	c := newCluster(t, spec)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "name", "web"))
	entry := func() map[string]any {
		var list []map[string]any
		_ = json.Unmarshal(c.do("GET", "/cluster/resources", form("type", "vm")).Data, &list)
		if len(list) != 1 {
			t.Fatalf("resources %v", list)
		}
		return list[0]
	}
	if e := entry(); e["status"] != "unknown" || e["name"] != nil {
		t.Fatalf("fresh guest %v", e)
	}
	testkit.Eventually(t, 10*time.Second, "the name to appear", func() bool { return entry()["name"] == "web" })
	if e := entry(); e["status"] != "stopped" {
		t.Fatalf("after the lag %v", e)
	}
}
