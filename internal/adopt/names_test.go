package adopt_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
)

func TestNamesFollowThePredecessorsRules(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"web-01", "web-01"},
		{"Web_01.Example.COM", "web-01-example-com"},
		{"--db  primary--", "db-primary"},
		{"ünïcode", "n-code"},
		{"!!!", ""},
		{strings.Repeat("a", 70), strings.Repeat("a", 63)},
		{strings.Repeat("a", 62) + "-b", strings.Repeat("a", 62)},
	} {
		if got := adopt.Name(tc.in); got != tc.want {
			t.Errorf("Name(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := adopt.GuestName(false, "", 105); got != "vm-105" {
		t.Errorf("a nameless VM is %q", got)
	}
	if got := adopt.GuestName(true, "...", 205); got != "ct-205" {
		t.Errorf("a container without a usable hostname is %q", got)
	}
	if got := adopt.ArtifactName("debian-12.7.0-amd64-netinst.iso"); got != "debian-12-7-0-amd64-netinst-iso" {
		t.Errorf("ArtifactName = %q", got)
	}
	if got := adopt.Path(manifest.KindCTTemplate, "lab", "x"); got != "ctt/lab/x.yaml" {
		t.Errorf("Path = %q", got)
	}
}

// guestOn builds an observed guest from config lines.
func guestOn(node string, vmid int, typ inventory.GuestType, lines ...string) inventory.Guest {
	g := inventory.Guest{VMID: vmid, Type: typ, Node: node, Status: "stopped"}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, ": ")
		g.Config = append(g.Config, inventory.Entry{Key: k, Value: v, HasValue: true})
	}
	return g
}

func vmLines(name string) []string {
	return []string{"name: " + name, "cores: 1", "memory: 1024", "scsi0: local-lvm:vm-1-disk-0,size=8G", "net0: virtio=BC:24:11:00:00:01,bridge=vmbr0"}
}

func oneNode(guests ...inventory.Guest) inventory.Cluster {
	return inventory.Cluster{Name: "lab", Nodes: []inventory.Node{{Cluster: "lab", Node: "pve1", Guests: guests,
		Storages: []inventory.Storage{{ID: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}}}}}}
}

func paths(res adopt.Result) []string {
	var out []string
	for _, m := range res.Manifests {
		out = append(out, m.Path)
	}
	return out
}

// Colliding names are resolved by vmid order: the lowest keeps the name, the others get -<vmid>; a name a
// declared resource has, or a path an operator's file occupies, is never given out.
func TestNameCollisionsAreResolvedDeterministically(t *testing.T) {
	declared := &manifest.Resource{APIVersion: manifest.APIVersion, Kind: manifest.KindVM, Metadata: manifest.Metadata{Name: "app"},
		Spec: &manifest.VMSpec{Node: "pve1", VMID: 999}, Source: manifest.Source{File: "vm/base/app.yaml"}}
	res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: oneNode(
		guestOn("pve1", 102, inventory.QEMU, vmLines("web")...),
		guestOn("pve1", 101, inventory.QEMU, vmLines("web")...),
		guestOn("pve1", 103, inventory.QEMU, vmLines("app")...),
		guestOn("pve1", 104, inventory.QEMU, vmLines("db")...),
	), Declared: []*manifest.Resource{declared}, Occupied: []string{"vm/lab/db.yaml"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "vm/lab/app-103.yaml vm/lab/db-104.yaml vm/lab/web-102.yaml vm/lab/web.yaml"
	if got := strings.Join(paths(res), " "); got != want {
		t.Errorf("paths = %s, want %s", got, want)
	}
	if web := res.Manifests[3]; web.VMID != 101 {
		t.Errorf("web.yaml is vmid %d, want the lowest, 101", web.VMID)
	}
}

// A guest the repository already declares in an operator's file is not adopted again; a file the
// repository declares is referenced by its manifest's name.
func TestDeclaredGuestsAreSkippedAndDeclaredISOsReferenced(t *testing.T) {
	iso := &manifest.Resource{APIVersion: manifest.APIVersion, Kind: manifest.KindISO, Metadata: manifest.Metadata{Name: "installer"},
		Spec:   &manifest.ArtifactSpec{Nodes: []string{"pve1"}, Storage: "local", Filename: "debian.iso", URL: "https://example.org/debian.iso"},
		Source: manifest.Source{File: "iso/base/installer.yaml"}}
	vm := &manifest.Resource{APIVersion: manifest.APIVersion, Kind: manifest.KindVM, Metadata: manifest.Metadata{Name: "mine"},
		Spec: &manifest.VMSpec{Node: "pve1", VMID: 100}, Source: manifest.Source{File: "vm/lab/mine.yaml"}}
	c := oneNode(guestOn("pve1", 100, inventory.QEMU, vmLines("mine")...),
		guestOn("pve1", 101, inventory.QEMU, append(vmLines("other"), "ide2: local:iso/debian.iso,media=cdrom")...))
	c.Nodes[0].Storages = append(c.Nodes[0].Storages, inventory.Storage{ID: "local", Type: "dir", Content: []string{"iso"}})
	c.Nodes[0].Volumes = []inventory.Volume{{Storage: "local", Volid: "local:iso/debian.iso", Content: "iso", Size: 1 << 20}}
	c.Nodes[0].ListedStorages = []string{"local", "local-lvm"}
	res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: c, Declared: []*manifest.Resource{iso, vm}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(paths(res), " "); got != "vm/lab/other.yaml" {
		t.Fatalf("paths = %s", got)
	}
	if cd := res.Manifests[0].Resource.VM().Hardware.CDROM; cd == nil || cd.ISO != "installer" {
		t.Errorf("cdrom = %+v, want the declared ISO installer", cd)
	}
	var reasons []string
	for _, s := range res.Skipped {
		reasons = append(reasons, s.Reason)
	}
	want := "declared in git as ISO/installer | declared in git as VM/mine (vm/lab/mine.yaml)"
	if got := strings.Join(reasons, " | "); got != want {
		t.Errorf("skipped = %s, want %s", got, want)
	}
}

// What makes a guest INCOMPLETE is said precisely: a volume without a size, a pending change (one reason
// per key), a lock (with what releases it), a value that is not UTF-8 text (one reason per key); and such a
// manifest is not part of the composition. What PVE lets a guest lack (memory, cores, disks) is left out of
// the manifest, which is complete; a guest without a name gets the generated one, which the first apply
// writes.
func TestIncompleteGuestsSayWhatIsMissing(t *testing.T) {
	pending := guestOn("pve1", 104, inventory.QEMU, vmLines("pend")...)
	pending.Config = append(pending.Config, inventory.Entry{Key: "cores", Value: "1", HasValue: true, Pending: "2", HasPending: true},
		inventory.Entry{Key: "onboot", Value: "1", HasValue: true, Delete: 1})
	locked := guestOn("pve1", 105, inventory.QEMU, vmLines("busy")...)
	locked.Lock = "backup"
	latin := guestOn("pve1", 106, inventory.QEMU, "name: latin", "cores: 1", "memory: 1024", "scsi0: local-lvm:vm-106-disk-0,size=8G",
		"net0: virtio=BC:24:11:00:00:06,bridge=vmbr\xe9")
	res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: oneNode(
		guestOn("pve1", 100, inventory.QEMU, "cores: 1", "memory: 512", "scsi0: local-lvm:vm-100-disk-0,size=1G"),
		guestOn("pve1", 101, inventory.QEMU, "name: nomem", "cores: 1", "scsi0: local-lvm:vm-101-disk-0,size=1G"),
		guestOn("pve1", 102, inventory.QEMU, "name: nosize", "cores: 1", "memory: 512", "scsi0: local-lvm:vm-102-disk-0"),
		guestOn("pve1", 103, inventory.QEMU, "name: nodisk", "cores: 1", "memory: 512"),
		pending,
		locked,
		latin,
	)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"vm/lab/vm-100.yaml": "",
		"vm/lab/nomem.yaml":  "",
		"vm/lab/nosize.yaml": "disk scsi0 (local-lvm:vm-102-disk-0) has no size= and the storage listing of local-lvm does not show it: set its size",
		"vm/lab/nodisk.yaml": "",
		"vm/lab/pend.yaml": "pending change to cores: apply or revert it on PVE first (a restart applies it), then adopt again; " +
			"pending change to onboot: apply or revert it on PVE first (a restart applies it), then adopt again",
		"vm/lab/busy.yaml":  "locked (backup): wait for the backup to finish (a lock a failed backup left behind: qm unlock), then adopt again",
		"vm/lab/latin.yaml": "net0: its value is not UTF-8 text, which a manifest cannot hold: correct it on PVE, then adopt again",
	}
	for _, m := range res.Manifests {
		if got := strings.Join(m.Incomplete, "; "); got != want[m.Path] {
			t.Errorf("%s: INCOMPLETE %q, want %q", m.Path, got, want[m.Path])
		}
		if want[m.Path] == "" {
			if strings.Contains(string(m.Content), "INCOMPLETE") {
				t.Errorf("%s is complete, but its file says INCOMPLETE:\n%s", m.Path, m.Content)
			}
			continue
		}
		for why := range strings.SplitSeq(want[m.Path], "; ") {
			if !strings.Contains(string(m.Content), "# INCOMPLETE: "+why+"\n") {
				t.Errorf("%s does not say %q in its header:\n%s", m.Path, why, m.Content)
			}
		}
	}
	if c := strings.Join(res.Composition(), " "); c != "../../vm/lab/nodisk.yaml ../../vm/lab/nomem.yaml ../../vm/lab/vm-100.yaml" {
		t.Errorf("composition = %s, want the complete manifests only", c)
	}
	// The nameless VM gets the generated name, and the report says the first apply writes it.
	if w := strings.Join(res.Warnings, "\n"); !strings.Contains(w, "pve1#100 has no name on PVE: its manifest names it vm-100, and the first apply writes name: vm-100") {
		t.Errorf("warnings do not announce the name write:\n%s", w)
	}
}

// Adopted files are recognised by their first line: an operator's file never is.
func TestAdoptedFilesAreRecognisedByTheirHeader(t *testing.T) {
	res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: oneNode(guestOn("pve1", 100, inventory.QEMU, vmLines("web")...))})
	if err != nil {
		t.Fatal(err)
	}
	if !adopt.IsAdopted(res.Manifests[0].Content) {
		t.Errorf("an adopted file is not recognised:\n%s", res.Manifests[0].Content)
	}
	for _, other := range []string{"apiVersion: proxops/v1alpha1\n", "# my notes\n# Adopted by proxops from lab\n", ""} {
		if adopt.IsAdopted([]byte(other)) {
			t.Errorf("%q is taken for an adopted file", other)
		}
	}
}
