package planner

import (
	"maps"
	"slices"
	"testing"

	"github.com/proxops/proxops/internal/inventory"
)

func sameLists(a, b map[string][]string) bool {
	return maps.EqualFunc(a, b, func(x, y []string) bool { return slices.Equal(x, y) })
}

func TestSharedStoragesAreAskedOfOneNodeOnly(t *testing.T) {
	cases := []struct {
		name     string
		content  map[string][]string
		sharedOn map[string][]string
		want     map[string][]string
	}{{
		name:     "shared on every node: the first in name order lists it",
		content:  map[string][]string{"pve3": {"nfs"}, "pve1": {"local", "nfs"}, "pve2": {"local", "nfs"}},
		sharedOn: map[string][]string{"nfs": {"pve1", "pve2", "pve3"}},
		want:     map[string][]string{"pve3": {}, "pve1": {"local", "nfs"}, "pve2": {"local"}},
	}, {
		name:     "the first node asked that holds it, not the first of the cluster",
		content:  map[string][]string{"pve2": {"nfs"}, "pve3": {"nfs"}},
		sharedOn: map[string][]string{"nfs": {"pve1", "pve3"}},
		want:     map[string][]string{"pve2": {}, "pve3": {"nfs"}},
	}, {
		name:     "not known to be shared: asked of every node",
		content:  map[string][]string{"pve1": {"local", "nfs"}, "pve2": {"local", "nfs"}},
		sharedOn: map[string][]string{},
		want:     map[string][]string{"pve1": {"local", "nfs"}, "pve2": {"local", "nfs"}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			listSharedOnce(c.content, c.sharedOn)
			if !sameLists(c.want, c.content) {
				t.Fatalf("content storages = %v; want %v", c.content, c.want)
			}
		})
	}
}

func TestAStorageTheFirstNodeListedAsSharedIsNotAskedAgain(t *testing.T) {
	content := map[string][]string{"pve1": {"local", "nfs", "cephfs"}, "pve2": {"local", "nfs", "cephfs"}, "pve3": {"nfs"}}
	if got := multiNode(content, nil); !slices.Equal(got, []string{"pve1", "pve2", "pve3"}) {
		t.Fatalf("multiNode = %v", got)
	}
	first := inventory.Node{Node: "pve1", Storages: []inventory.Storage{{ID: "local"}, {ID: "nfs", Shared: true},
		{ID: "cephfs", Shared: true}}, ListedStorages: []string{"local", "nfs"}}
	listedOnce(content, first)
	// cephfs is shared but its listing failed on pve1: the others are still asked.
	want := map[string][]string{"pve1": {"local", "nfs", "cephfs"}, "pve2": {"local", "cephfs"}, "pve3": {}}
	if !sameLists(want, content) {
		t.Fatalf("content storages = %v; want %v", content, want)
	}
}
