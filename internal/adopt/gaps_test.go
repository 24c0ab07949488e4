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
