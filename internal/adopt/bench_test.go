package adopt_test

import (
	"fmt"
	"testing"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
)

// syntheticCluster is a cluster of n guests spread over four nodes, each VM with two disks, a NIC, cloud-init
// and a couple of unmodelled keys; every fifth guest a container.
func syntheticCluster(n int) inventory.Cluster {
	c := inventory.Cluster{Name: "lab"}
	for i := range 4 {
		c.Nodes = append(c.Nodes, inventory.Node{Node: fmt.Sprintf("pve%d", i+1),
			Storages: []inventory.Storage{{ID: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}}}})
	}
	for i := range n {
		vmid := 1000 + i
		node := &c.Nodes[i%4]
		var g inventory.Guest
		if i%5 == 4 {
			g = guestOn(node.Node, vmid, inventory.LXC, fmt.Sprintf("hostname: ct-%d", i), "cores: 2", "memory: 1024", "swap: 512",
				fmt.Sprintf("rootfs: local-lvm:vm-%d-disk-0,size=8G", vmid), "cpuunits: 512",
				fmt.Sprintf("net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:%02X:%02X:01,ip=dhcp,type=veth", i/256, i%256))
		} else {
			g = guestOn(node.Node, vmid, inventory.QEMU, fmt.Sprintf("name: vm-%d.example.com", i), "cores: 4", "memory: 8192",
				"cpu: x86-64-v2-AES", "ostype: l26", "balloon: 0", "agent: 1", "onboot: 1", "scsihw: virtio-scsi-single",
				fmt.Sprintf("scsi0: local-lvm:vm-%d-disk-0,iothread=1,discard=on,size=32G", vmid),
				fmt.Sprintf("scsi1: local-lvm:vm-%d-disk-1,iothread=1,size=100G,cache=writeback", vmid),
				fmt.Sprintf("ide2: local-lvm:vm-%d-cloudinit,media=cdrom,size=4M", vmid), "ciuser: ops",
				fmt.Sprintf("ipconfig0: ip=10.0.%d.%d/16,gw=10.0.0.1", i/250, i%250+1), "tags: prod;web",
				fmt.Sprintf("net0: virtio=BC:24:11:%02X:%02X:00,bridge=vmbr0,tag=20,firewall=1", i/256, i%256))
		}
		node.Guests = append(node.Guests, g)
	}
	return c
}

// BenchmarkAdopt300Guests measures one adoption of a 300-guest cluster (manifests, gaps, self-checks,
// rendering); BenchmarkGapReport300Guests the continuous gap report of the same cluster.
func BenchmarkAdopt300Guests(b *testing.B) {
	c := syntheticCluster(300)
	b.ReportAllocs()
	for b.Loop() {
		res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: c})
		if err != nil || len(res.Manifests) != 300 {
			b.Fatalf("%d manifests, %v", len(res.Manifests), err)
		}
	}
}

func BenchmarkGapReport300Guests(b *testing.B) {
	c := syntheticCluster(300)
	b.ReportAllocs()
	for b.Loop() {
		if rep := adopt.Gaps(c, nil); len(rep.Gaps) == 0 {
			b.Fatal("no gaps")
		}
	}
}
