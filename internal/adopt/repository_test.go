package adopt_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/repo"
)

func ctLines(name string) []string {
	return []string{"hostname: " + name, "cores: 1", "memory: 512", "rootfs: local-lvm:vm-1-disk-0,size=4G",
		"net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:09,type=veth"}
}

// The adopt-review-adopt cycle on a work tree: a template an operator names in an adopted file is kept by
// the next adoption; a file whose header the operator deleted is theirs (its guest is not adopted again and
// the file is never written); an adopted file nothing maps to any more is reported.
func TestReadoptionKeepsWhatTheOperatorDidToTheFiles(t *testing.T) {
	dir := t.TempDir()
	c := oneNode(
		guestOn("pve1", 100, inventory.QEMU, vmLines("web")...),
		guestOn("pve1", 101, inventory.QEMU, vmLines("app")...),
		guestOn("pve1", 200, inventory.LXC, ctLines("cache")...),
	)
	c.Nodes[0].Volumes = []inventory.Volume{{Storage: "local", Volid: "local:vztmpl/debian-12.tar.zst", Content: "vztmpl", Size: 1 << 20}}
	c.Nodes[0].Storages = append(c.Nodes[0].Storages, inventory.Storage{ID: "local", Type: "dir", Content: []string{"vztmpl"}})
	first, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: c})
	if err != nil {
		t.Fatal(err)
	}
	writeRepository(t, dir, "lab", []string{"pve1"}, first)
	write(t, filepath.Join(dir, "vm", "lab", "gone.yaml"), adopt.HeaderPrefix+"lab vmid 150 on pve1.\n")
	// The operator names the container's template, keeping the header...
	ct := filepath.Join(dir, "lxc", "lab", "cache.yaml")
	raw, err := os.ReadFile(ct)
	if err != nil {
		t.Fatal(err)
	}
	write(t, ct, strings.Replace(string(raw), "  vmid: 200\n", "  vmid: 200\n  template: debian-12-tar-zst\n", 1))
	// ...and takes over app.yaml: header gone, memory changed.
	app := filepath.Join(dir, "vm", "lab", "app.yaml")
	raw, err = os.ReadFile(app)
	if err != nil {
		t.Fatal(err)
	}
	body := string(raw[strings.Index(string(raw), "apiVersion"):])
	write(t, app, strings.Replace(body, "memory: 1GiB", "memory: 2GiB", 1))

	st, err := adopt.FromRepository(os.DirFS(dir), repo.Load(os.DirFS(dir)), "lab")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[int]string{200: "debian-12-tar-zst"}, st.Templates); d != "" {
		t.Errorf("templates (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"vm/lab/app.yaml"}, st.Occupied); d != "" {
		t.Errorf("occupied (-want +got):\n%s", d)
	}
	second, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: c, Declared: st.Declared, Occupied: st.Occupied,
		Templates: st.Templates, Adopted: st.Adopted})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(paths(second), " "); got != "ctt/lab/debian-12-tar-zst.yaml lxc/lab/cache.yaml vm/lab/web.yaml" {
		t.Errorf("second adoption writes %s", got)
	}
	if m := find(t, second, "lxc/lab/cache.yaml"); !m.Complete() || m.Resource.LXC().Template != "debian-12-tar-zst" {
		t.Errorf("the named template was not kept: %v", m.Incomplete)
	}
	if len(second.Skipped) != 1 || second.Skipped[0].VMID != 101 || !strings.Contains(second.Skipped[0].Reason, "vm/lab/app.yaml") {
		t.Errorf("skipped = %+v, want vmid 101 declared in vm/lab/app.yaml", second.Skipped)
	}
	if len(second.Warnings) != 1 || !strings.HasPrefix(second.Warnings[0], "vm/lab/gone.yaml was adopted earlier") {
		t.Errorf("warnings = %q", second.Warnings)
	}
}
