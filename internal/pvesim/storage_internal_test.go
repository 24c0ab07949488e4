package pvesim

import "testing"

// The space a storage has in use on a node is the sum of the sizes of the volumes on it (those on shared
// storage count on every node), whatever volumes were added, replaced, resized and removed before.
func TestStorageUsedIsTheSumOfItsVolumesAfterEveryChange(t *testing.T) {
	s, err := New(DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	summed := func(st *storage, nodeName string) int64 {
		var used int64
		for _, v := range s.volumes {
			if v.storage == st.id && (v.node == "" || v.node == nodeName) {
				used += v.size
			}
		}
		return used
	}
	check := func(step string) {
		t.Helper()
		for _, st := range s.storages {
			for _, n := range []string{"", "pve1", "pve2", "elsewhere"} {
				if got, want := s.storageUsed(st, n), summed(st, n); got != want {
					t.Fatalf("%s: storage %s on node %q: %d in use, the volumes sum to %d", step, st.id, n, got, want)
				}
			}
		}
	}
	check("start")
	local, shared := s.storages[0], s.storages[len(s.storages)-1]
	s.putVolume(&volume{volid: local.id + ":vm-100-disk-0", storage: local.id, node: "pve1", content: "images", size: 4 << 30, vmid: 100})
	s.putVolume(&volume{volid: local.id + ":vm-101-disk-0", storage: local.id, node: "pve2", content: "images", size: 8 << 30, vmid: 101})
	s.putVolume(&volume{volid: shared.id + ":vm-102-disk-0", storage: shared.id, node: "", content: "images", size: 2 << 30, vmid: 102})
	check("put")
	// Put again under the same key: the new volume replaces the old one.
	s.putVolume(&volume{volid: local.id + ":vm-100-disk-0", storage: local.id, node: "pve1", content: "images", size: 1 << 30, vmid: 100})
	check("replaced")
	s.resizeVolume(s.lookupVolume("pve2", local.id+":vm-101-disk-0"), 16<<30)
	check("resized")
	s.deleteVolume("pve1", local.id+":vm-100-disk-0")
	s.deleteVolume("pve1", shared.id+":vm-102-disk-0")
	check("deleted")
	s.deleteVolume("pve1", "nothing:here")
	check("deleted what is not there")
}
