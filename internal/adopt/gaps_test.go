package adopt_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pvewire"
)

// The continuous gap report covers managed and unmanaged guests: managed ones under their declared name,
// the others under the name adoption would give them; secrets are redacted; the order is total.
func TestGapReportCoversManagedAndUnmanagedGuests(t *testing.T) {
	c := inventory.Cluster{Name: "lab", Nodes: []inventory.Node{
		{Node: "pve2", Guests: []inventory.Guest{guestOn("pve2", 300, inventory.LXC, "hostname: cache", "cores: 1", "cpuunits: 512")}},
		{Node: "pve1", Guests: []inventory.Guest{
			guestOn("pve1", 101, inventory.QEMU, "name: web", "balloon: 0", "cicustom: user=local:snippets/u.yaml", "api_token_x: abc",
				"net0: virtio=BC:24:11:00:00:01,bridge=vmbr0,mtu=1400"),
			guestOn("pve1", 100, inventory.QEMU, "name: app", "args: -no-hpet"),
		}},
	}}
	rep := adopt.Gaps(c, map[int]manifest.Ref{100: {Kind: manifest.KindVM, Name: "application"}})
	var got []string
	for _, g := range rep.Gaps {
		m := "unmanaged"
		if g.Managed {
			m = "managed"
		}
		got = append(got, strings.Join([]string{g.Node, g.Kind + "/" + g.Name, g.Key + "=" + g.Value, m}, " "))
	}
	want := []string{
		"pve1 VM/application args=-no-hpet managed",
		"pve1 VM/web api_token_x=<redacted> unmanaged",
		"pve1 VM/web balloon=0 unmanaged",
		"pve1 VM/web cicustom=user=local:snippets/u.yaml unmanaged",
		"pve1 VM/web net0.mtu=1400 unmanaged",
		"pve2 LXC/cache cpuunits=512 unmanaged",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("gaps (-want +got):\n%s", d)
	}
	for _, g := range rep.Gaps {
		if g.Note == "" {
			t.Errorf("gap %s has no note", g.Key)
		}
	}
}

// Every key in the table of known gaps is really one: neither modelled nor PVE's bookkeeping.
func TestKnownGapsAreNeitherModelledNorBookkeeping(t *testing.T) {
	for _, g := range adopt.KnownGaps() {
		key := g.Key
		if g.Indexed {
			key += "1"
		}
		if pvewire.IsModelled(g.Type, key) || pvewire.IsBookkeeping(g.Type, key) {
			t.Errorf("%s %s is listed as a gap but the model or the bookkeeping covers it", g.Type, key)
		}
		if g.Note == "" {
			t.Errorf("%s %s has no note", g.Type, g.Key)
		}
	}
}

// Values of unmodelled keys that are shown whole (LXC env, raw lxc keys, qemu args) reach the gap report
// with their secret-looking parts redacted and the rest readable, identically on every run.
func TestGapReportRedactsSecretsInsideValues(t *testing.T) {
	c := oneNode(
		guestOn("pve1", 200, inventory.LXC, "hostname: db", "env: POSTGRES_PASSWORD=Sup3r\x00PGDATA=/var/lib/pg",
			"lxc: lxc.environment=VAULT_TOKEN=s.9f8e7d"),
		guestOn("pve1", 100, inventory.QEMU, "name: app", "args: -fw_cfg name=opt/com.example/api-key,string=ak_live_123 -no-hpet"),
	)
	rep := adopt.Gaps(c, nil)
	if again := adopt.Gaps(c, nil); !cmp.Equal(rep, again) {
		t.Fatalf("two reports differ:\n%s", cmp.Diff(rep, again))
	}
	var got []string
	for _, g := range rep.Gaps {
		got = append(got, g.Key+"="+g.Value)
	}
	want := []string{
		"args=-fw_cfg name=<redacted>,string=<redacted> -no-hpet",
		"env=POSTGRES_PASSWORD=<redacted>\x00PGDATA=/var/lib/pg",
		"lxc=lxc.environment=VAULT_TOKEN=<redacted>",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("gaps (-want +got):\n%s", d)
	}
	for _, secret := range []string{"Sup3r", "s.9f8e7d", "ak_live_123"} {
		if strings.Contains(strings.Join(got, "\n"), secret) {
			t.Errorf("the gap report carries %q", secret)
		}
	}
}

// The SMBIOS settings an operator set are gaps, one per setting; the uuid is the guest's identity and never
// one.
func TestSMBIOSOperatorFieldsAreGapsAndTheUUIDIsNot(t *testing.T) {
	c := inventory.Cluster{Name: "lab", Nodes: []inventory.Node{{Node: "pve1", Guests: []inventory.Guest{
		guestOn("pve1", 100, inventory.QEMU, "name: app",
			"smbios1: uuid=6f1b2c3d-0000-4000-8000-000000000100,manufacturer=QWNtZQ==,serial=U04tMQ==,base64=1"),
		guestOn("pve1", 101, inventory.QEMU, "name: web", "smbios1: uuid=6f1b2c3d-0000-4000-8000-000000000101"),
	}}}}
	var got []string
	for _, g := range adopt.Gaps(c, nil).Gaps {
		got = append(got, g.Key+"="+g.Value)
		if !strings.Contains(g.Note, "SMBIOS") {
			t.Errorf("gap %s: note %q", g.Key, g.Note)
		}
	}
	want := []string{"smbios1.base64=1", "smbios1.manufacturer=QWNtZQ==", "smbios1.serial=U04tMQ=="}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("gaps (-want +got):\n%s", d)
	}
}
