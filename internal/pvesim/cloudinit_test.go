package pvesim_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/pvesim"
)

const ciVM = `ciuser: root
ide2: local-lvm:vm-100-cloudinit,media=cdrom
ipconfig0: ip=192.0.2.10/24,gw=192.0.2.1
memory: 1024
name: ci
nameserver: 192.0.2.53
scsi0: local-lvm:vm-100-disk-0,size=8G
`

// cloudInitState reads GET …/cloudinit as key → "value|pending|delete".
func cloudInitState(t *testing.T, c *testCluster, vmid string) map[string]string {
	t.Helper()
	r := c.do("GET", "/nodes/pve1/qemu/"+vmid+"/cloudinit", nil)
	if r.Status != 200 {
		t.Fatalf("get cloudinit: %d %s", r.Status, r.Message)
	}
	var items []map[string]any
	if err := json.Unmarshal(r.Data, &items); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, it := range items {
		s := func(k string) string {
			if v, ok := it[k]; ok {
				b, _ := json.Marshal(v)
				return strings.Trim(string(b), `"`)
			}
			return "-"
		}
		out[s("key")] = s("value") + "|" + s("pending") + "|" + s("delete")
	}
	return out
}

func ciCluster(t *testing.T, running bool, config string) *testCluster {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Running: running, Config: config}}
	return newCluster(t, spec)
}

// A change to a cloud-init key leaves the drive as it was generated: GET …/cloudinit reports what the drive
// holds and the new value as pending, an added key as pending only and a removed one as a delete, the
// config file keeps the record in [special:cloudinit], and PUT …/cloudinit regenerates the drive.
func TestCloudInitChangesStayPendingUntilTheDriveIsRegenerated(t *testing.T) {
	c := ciCluster(t, true, ciVM)
	want := map[string]string{"ciuser": "root|-|-", "ipconfig0": "ip=192.0.2.10/24,gw=192.0.2.1|-|-", "nameserver": "192.0.2.53|-|-"}
	if got := cloudInitState(t, c, "100"); !equalMaps(got, want) {
		t.Fatalf("a freshly seeded drive: %v, want %v", got, want)
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("ciuser", "deploy", "searchdomain", "example.org", "delete", "nameserver"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("ciuser", "admin"))
	want = map[string]string{"ciuser": "root|admin|-", "ipconfig0": "ip=192.0.2.10/24,gw=192.0.2.1|-|-",
		"nameserver": "-|-|1", "searchdomain": "-|example.org|-"}
	if got := cloudInitState(t, c, "100"); !equalMaps(got, want) {
		t.Errorf("after the changes: %v, want %v", got, want)
	}
	raw, _ := c.sim.RawConfig(100)
	if !strings.Contains(raw, "\n[special:cloudinit]\n") || !strings.Contains(raw, "ciuser: root\n") || !strings.Contains(raw, "added: searchdomain\n") {
		t.Errorf("the config file does not record what the drive holds:\n%s", raw)
	}
	if r := c.do("PUT", "/nodes/pve1/qemu/100/cloudinit", nil); r.Status != 200 || string(r.Data) != "null" {
		t.Fatalf("regenerate: %d %s %s", r.Status, r.Message, r.Data)
	}
	want = map[string]string{"ciuser": "admin|-|-", "ipconfig0": "ip=192.0.2.10/24,gw=192.0.2.1|-|-", "searchdomain": "example.org|-|-"}
	if got := cloudInitState(t, c, "100"); !equalMaps(got, want) {
		t.Errorf("after the regeneration: %v, want %v", got, want)
	}
	if raw, _ := c.sim.RawConfig(100); strings.Contains(raw, "special:cloudinit") {
		t.Errorf("the regeneration kept the record:\n%s", raw)
	}
}

// Starting a VM generates its cloud-init drive from the config; a locked VM's drive is not regenerated.
func TestStartingAVMRegeneratesItsCloudInitDrive(t *testing.T) {
	c := ciCluster(t, false, ciVM+"\n[special:cloudinit]\nciuser: admin\n")
	if got := cloudInitState(t, c, "100")["ciuser"]; got != "admin|root|-" {
		t.Fatalf("seeded stale drive: ciuser %s", got)
	}
	if err := c.sim.SetLock(100, "backup"); err != nil {
		t.Fatal(err)
	}
	if r := c.do("PUT", "/nodes/pve1/qemu/100/cloudinit", nil); r.Status != 500 || !strings.Contains(r.Message, "VM 100 is locked (backup)") {
		t.Errorf("regenerating a locked VM's drive: %d %q", r.Status, r.Message)
	}
	if err := c.sim.SetLock(100, ""); err != nil {
		t.Fatal(err)
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/start", nil)
	if got := cloudInitState(t, c, "100")["ciuser"]; got != "root|-|-" {
		t.Errorf("after the start: ciuser %s, want the config's value generated", got)
	}
}

// GET /cluster/options reports the datacenter's tag-style as an object, and PUT …/config stores tags by it:
// lower-cased by default, with their case under case-sensitive=1.
func TestTagsFollowTheClustersTagStyle(t *testing.T) {
	for _, tc := range []struct {
		style, want string
	}{{"", "prod;proxops;web"}, {"case-sensitive=1", "Prod;proxops;web"}} {
		spec := pvesim.DefaultSpec()
		spec.TagStyle = tc.style
		spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: "memory: 512\nname: a\n"}}
		c := newCluster(t, spec)
		opts := c.do("GET", "/cluster/options", nil).obj(t)
		ts, _ := opts["tag-style"].(map[string]any)
		if tc.style == "" && ts != nil || tc.style != "" && ts["case-sensitive"] != float64(1) {
			t.Errorf("tag-style %q: options %v", tc.style, opts)
		}
		c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("tags", "web;Prod;proxops;PROD"))
		got := c.config("pve1", "qemu", 100)["tags"]
		if tc.style == "case-sensitive=1" {
			tc.want = "PROD;Prod;proxops;web"
		}
		if got != tc.want {
			t.Errorf("tag-style %q: tags %v, want %s", tc.style, got, tc.want)
		}
	}
}

// A container without a rootfs: update_lxc_config refuses it after every config write (the write is kept,
// the request fails) and before every start.
func TestAContainerWithoutRootfsCanNeitherBeChangedNorStarted(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 200, Type: "lxc", Node: "pve1", Config: "arch: amd64\nhostname: bare\nmemory: 512\nostype: debian\n"}}
	c := newCluster(t, spec)
	r := c.do("PUT", "/nodes/pve1/lxc/200/config", form("tags", "proxops"))
	if r.Status != 500 || r.Message != "missing 'rootfs' configuration\n" {
		t.Errorf("config write: %d %q", r.Status, r.Message)
	}
	if got := c.config("pve1", "lxc", 200)["tags"]; got != "proxops" {
		t.Errorf("the write before the failure was not kept: tags %v", got)
	}
	if _, st := c.taskOf("POST", "/nodes/pve1/lxc/200/status/start", nil); st != "missing 'rootfs' configuration" {
		t.Errorf("start ended %q", st)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
