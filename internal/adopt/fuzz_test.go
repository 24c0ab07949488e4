package adopt_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pvewire"
)

// Any live config, however odd, adopts without a panic; a manifest adoption calls complete parses back
// without an error and plans no write but the tag's against the config it came from, and the name of a
// guest that had none (adoption gives it a generated name, which the first apply writes).
func FuzzAdoptGuestConfig(f *testing.F) {
	f.Add("qemu", "name: web\ncores: 2\nmemory: 2048\nscsi0: local-lvm:vm-100-disk-0,size=8G,iothread=1\nnet0: virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=5")
	f.Add("qemu", "name: x\ncores: 1\nmemory: 512\nscsi0: local-lvm:vm-1-disk-0,size=1G\nide2: local-lvm:vm-1-cloudinit,media=cdrom\nipconfig0: ip=10.0.0.2/24,gw=10.0.0.1\nhostpci0: 01:00.0,pcie=1")
	f.Add("lxc", "hostname: ct\ncores: 1\nmemory: 512\nrootfs: local-lvm:vm-2-disk-0,size=4G\nmp0: /srv,mp=/srv,ro=1\nfeatures: nesting=1")
	f.Add("qemu", "name: a\ncores: 0\nmemory: x\nboot: order=\nmachine: pc-q35-99.9+pve9,viommu=virtio\nnet0: bridge=vmbr0,rate=1.5")
	f.Fuzz(func(t *testing.T, typ, config string) {
		gt := inventory.QEMU
		if typ == "lxc" {
			gt = inventory.LXC
		}
		g := inventory.Guest{VMID: 100, Type: gt, Node: "pve1", Status: "stopped"}
		seen := map[string]bool{}
		for line := range strings.SplitSeq(config, "\n") {
			k, v, ok := strings.Cut(line, ": ")
			if !ok || k == "" || seen[k] || k == "template" {
				continue
			}
			seen[k] = true
			g.Config = append(g.Config, inventory.Entry{Key: k, Value: v, HasValue: true})
		}
		c := inventory.Cluster{Name: "lab", Nodes: []inventory.Node{{Node: "pve1", Guests: []inventory.Guest{g},
			Storages: []inventory.Storage{{ID: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}}}}}}
		res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: c, Templates: map[int]string{100: "missing"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range res.Manifests {
			if !m.Complete() {
				continue
			}
			back, diags := manifest.Parse(m.Path, m.Content)
			if diags.HasErrors() || len(back) != 1 {
				t.Fatalf("%s does not parse back: %s\n%s", m.Path, diags.Error(), m.Content)
			}
			d := pvewire.Desired{Resource: manifest.Resolve(back[0])}
			var diff pvewire.Diff
			if gt == inventory.LXC {
				diff, err = pvewire.LXC(d, g.Current(), false)
			} else {
				diff, err = pvewire.QEMU(d, g.Current(), false)
			}
			if err != nil {
				t.Fatalf("diff: %v", err)
			}
			for _, ch := range diff.Changes {
				namesNameless := (ch.Key == "name" || ch.Key == "hostname") && ch.Before == ""
				if ch.Key != "tags" && !namesNameless {
					t.Fatalf("a complete manifest writes %s=%s over %q\n%s", ch.Key, ch.After(), ch.Before, m.Content)
				}
			}
			if len(diff.Resizes) > 0 {
				t.Fatalf("a complete manifest resizes %v", diff.Resizes)
			}
		}
	})
}
