package adopt_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
)

// Adoption writes a Pool manifest for each live pool that git does not declare (the id kept in spec.id when
// the manifest name cannot carry it, the comment without the ownership marker) and puts each adopted guest's
// pool in its spec.pool.
func TestAdoptionWritesPoolsAndTheGuestsPool(t *testing.T) {
	g := inventory.Guest{VMID: 100, Type: inventory.QEMU, Node: "pve1", Status: "stopped", Name: "web",
		Config: []inventory.Entry{{Key: "name", Value: "web", HasValue: true}, {Key: "memory", Value: "512", HasValue: true}}}
	declared := &manifest.Resource{APIVersion: manifest.APIVersion, Kind: manifest.KindPool,
		Metadata: manifest.Metadata{Name: "ops"}, Spec: &manifest.PoolSpec{}}
	in := adopt.Input{Cluster: "lab", Declared: []*manifest.Resource{declared}, Observed: inventory.Cluster{Name: "lab", Nodes: []inventory.Node{{
		Cluster: "lab", Node: "pve1", Guests: []inventory.Guest{g}, PoolsObserved: true,
		Pools: []inventory.Pool{{ID: "Web.Servers", Comment: "front ends [proxops]", Members: []int{100}}, {ID: "ops"}},
	}}}}
	res, err := adopt.Adopt(in)
	if err != nil {
		t.Fatal(err)
	}
	var pool, vm *adopt.Manifest
	for i, m := range res.Manifests {
		switch m.Kind {
		case manifest.KindPool:
			if pool != nil {
				t.Fatalf("a second pool manifest %s: the declared pool ops is adopted again", m.Path)
			}
			pool = &res.Manifests[i]
		case manifest.KindVM:
			vm = &res.Manifests[i]
		default:
			t.Errorf("unexpected %s manifest %s", m.Kind, m.Path)
		}
	}
	if pool == nil || vm == nil {
		t.Fatalf("manifests %+v: want a pool and a VM", res.Manifests)
	}
	if pool.Path != "pool/lab/web-servers.yaml" || !pool.Complete() {
		t.Fatalf("pool manifest %s (incomplete: %v)", pool.Path, pool.Incomplete)
	}
	for _, want := range []string{"kind: Pool", "id: Web.Servers", "comment: front ends\n"} {
		if !strings.Contains(string(pool.Content), want) {
			t.Errorf("pool manifest lacks %q:\n%s", want, pool.Content)
		}
	}
	if got := vm.Resource.GuestPool(); got != "Web.Servers" {
		t.Fatalf("the adopted VM's spec.pool is %q, want Web.Servers", got)
	}
	if !strings.Contains(string(vm.Content), "pool: Web.Servers") {
		t.Errorf("the VM manifest does not say its pool:\n%s", vm.Content)
	}
}
