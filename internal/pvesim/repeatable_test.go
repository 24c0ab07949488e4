package pvesim_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
)

// With a clock in the spec, the times the simulator writes into state (a VM's meta ctime, a new volume's
// ctime, a snapshot's snaptime) are the clock's, so two identical runs leave identical configs; the spec
// file takes it as an RFC 3339 time.
func TestClockFixesTheTimesWrittenIntoState(t *testing.T) {
	parsed, err := pvesim.ParseSpec("spec.yaml", []byte("clock: 2026-01-02T03:04:05Z\n"))
	if err != nil {
		t.Fatal(err)
	}
	spec := pvesim.DefaultSpec()
	spec.Clock = parsed.Clock
	want := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Unix()
	if !spec.Clock.Equal(time.Unix(want, 0)) {
		t.Fatalf("clock parsed as %v", spec.Clock)
	}
	stamp := strconv.FormatInt(want, 10)
	c := newCluster(t, spec)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:1"))
	if meta, _ := c.config("pve1", "qemu", 100)["meta"].(string); !strings.HasSuffix(meta, ",ctime="+stamp) {
		t.Errorf("meta %q, want ctime=%s", meta, stamp)
	}
	vols := c.content("pve1", "local-lvm", nil)
	if len(vols) == 0 {
		t.Fatal("the create left no volume on local-lvm")
	}
	for volid, v := range vols {
		if ctime, _ := v["ctime"].(float64); int64(ctime) != want {
			t.Errorf("%s: ctime %v, want %d", volid, v["ctime"], want)
		}
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/snapshot", form("snapname", "before"))
	raw, _ := c.sim.RawConfig(100)
	if !strings.Contains(raw, "snaptime: "+stamp+"\n") {
		t.Errorf("snapshot section without snaptime %s:\n%s", stamp, raw)
	}
}

// With a seed, the MAC and UUIDs a guest gets depend on the guest, not on the order in which guests on
// other nodes were created: two creates in either order give each guest the same identifiers.
func TestSeededIdentifiersDoNotDependOnTheOrderOfCreates(t *testing.T) {
	identity := func(order []string) map[string]string {
		spec := pvesim.DefaultSpec()
		spec.Seed = 42
		c := newCluster(t, spec)
		for _, vmid := range order {
			c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", vmid, "net0", "virtio,bridge=vmbr0"))
		}
		out := map[string]string{}
		for _, vmid := range order {
			id, _ := strconv.Atoi(vmid)
			cfg := c.config("pve1", "qemu", id)
			out[vmid] = fmt.Sprint(cfg["net0"], " ", cfg["smbios1"], " ", cfg["vmgenid"])
		}
		return out
	}
	first, second := identity([]string{"100", "101"}), identity([]string{"101", "100"})
	if first["100"] != second["100"] || first["101"] != second["101"] {
		t.Errorf("identifiers follow the order of creates:\n%v\n%v", first, second)
	}
	if first["100"] == first["101"] {
		t.Errorf("two guests got the same identifiers: %v", first)
	}
}
