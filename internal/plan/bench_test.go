package plan_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/repo"
)

// benchCluster is a parsed repository of n guests (a quarter of them containers) on four nodes, and its
// observed state: converged, or with every tenth guest drifted (memory and a NIC's VLAN).
func benchCluster(tb testing.TB, n int, drifted bool) plan.Input {
	tb.Helper()
	nodes := []string{"pve1", "pve2", "pve3", "pve4"}
	fsys := fstest.MapFS{}
	var res strings.Builder
	res.WriteString("resources:\n")
	obs := inventory.Cluster{Name: "bench"}
	for _, nd := range nodes {
		obs.Nodes = append(obs.Nodes, inventory.Node{Cluster: "bench", Node: nd,
			Storages: []inventory.Storage{{ID: "local", Type: "dir", Content: []string{"iso", "vztmpl", "images"}, Active: true, Enabled: true},
				{ID: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}, Active: true, Enabled: true}},
			ListedStorages: []string{"local"},
			Volumes:        []inventory.Volume{{Storage: "local", Volid: "local:vztmpl/debian-13.tar.zst", Content: "vztmpl"}}})
	}
	fsys["ctt/base/debian.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: proxops/v1alpha1\nkind: CTTemplate\nmetadata: {name: debian}\nspec:\n  nodes: [pve1, pve2, pve3, pve4]\n  storage: local\n  filename: debian-13.tar.zst\n  url: https://example.invalid/debian-13.tar.zst\n")}
	res.WriteString("  - ../../ctt/base/debian.yaml\n")
	for i := range n {
		vmid := 1000 + i
		ni := i % len(nodes)
		node := nodes[ni]
		mem := 1024 + 512*(i%4)
		drift := drifted && i%10 == 0
		var path, body string
		var g inventory.Guest
		entry := func(k, v string) { g.Config = append(g.Config, inventory.Entry{Key: k, Value: v, HasValue: true}) }
		liveMem := mem
		if drift {
			liveMem = mem + 512
		}
		if i%4 == 3 {
			name := fmt.Sprintf("ct-%05d", i)
			path = "lxc/base/" + name + ".yaml"
			body = fmt.Sprintf("apiVersion: proxops/v1alpha1\nkind: LXC\nmetadata: {name: %s}\nspec:\n  node: %s\n  vmid: %d\n  template: debian\n"+
				"  memory: %dMiB\n  cpu: {cores: 2}\n  root: {storage: local-lvm, size: 8GiB}\n  tags: [bench]\n"+
				"  networks:\n    - {bridge: vmbr0, ip: 10.0.%d.%d/16, gw: 10.0.0.1}\n  options: {unprivileged: true, onboot: true}\n",
				name, node, vmid, mem, i/250, i%250+1)
			g = inventory.Guest{VMID: vmid, Type: inventory.LXC, Node: node, Name: name, Status: "running", Tags: "bench;proxops", Digest: fmt.Sprintf("%040x", vmid)}
			entry("arch", "amd64")
			entry("cores", "2")
			entry("hostname", name)
			entry("memory", fmt.Sprint(liveMem))
			entry("net0", fmt.Sprintf("name=net0,bridge=vmbr0,gw=10.0.0.1,hwaddr=BC:24:11:%02X:%02X:%02X,ip=10.0.%d.%d/16,type=veth", vmid>>16&255, vmid>>8&255, vmid&255, i/250, i%250+1))
			entry("onboot", "1")
			entry("ostype", "debian")
			entry("rootfs", fmt.Sprintf("local-lvm:vm-%d-disk-0,size=8G", vmid))
			entry("swap", "512")
			entry("tags", "bench;proxops")
			entry("unprivileged", "1")
		} else {
			name := fmt.Sprintf("vm-%05d", i)
			path = "vm/base/" + name + ".yaml"
			body = fmt.Sprintf("apiVersion: proxops/v1alpha1\nkind: VM\nmetadata: {name: %s}\nspec:\n  node: %s\n  vmid: %d\n"+
				"  memory: %dMiB\n  cpu: {type: host, cores: 2}\n  tags: [bench]\n"+
				"  disks:\n    - {storage: local-lvm, size: 32GiB, controller: virtio-scsi-single, iothread: true}\n"+
				"  networks:\n    - {bridge: vmbr0, vlan: 20}\n  options: {agent: true, onboot: true}\n",
				name, node, vmid, mem)
			g = inventory.Guest{VMID: vmid, Type: inventory.QEMU, Node: node, Name: name, Status: "running", QMPStatus: "running",
				Tags: "bench;proxops", Digest: fmt.Sprintf("%040x", vmid)}
			tag := "20"
			if drift {
				tag = "30"
			}
			entry("agent", "1")
			entry("boot", "order=scsi0;net0")
			entry("cores", "2")
			entry("cpu", "host")
			entry("memory", fmt.Sprint(liveMem))
			entry("meta", "creation-qemu=9.2.0,ctime=1700000000")
			entry("name", name)
			entry("net0", fmt.Sprintf("virtio=BC:24:11:%02X:%02X:%02X,bridge=vmbr0,tag=%s", vmid>>16&255, vmid>>8&255, vmid&255, tag))
			entry("onboot", "1")
			entry("scsi0", fmt.Sprintf("local-lvm:vm-%d-disk-0,iothread=1,size=32G", vmid))
			entry("scsihw", "virtio-scsi-single")
			entry("smbios1", fmt.Sprintf("uuid=00000000-0000-4000-8000-%012d", vmid))
			entry("tags", "bench;proxops")
			entry("vmgenid", fmt.Sprintf("11111111-0000-4000-8000-%012d", vmid))
		}
		fsys[path] = &fstest.MapFile{Data: []byte(body)}
		res.WriteString("  - ../../" + path + "\n")
		obs.Nodes[ni].Guests = append(obs.Nodes[ni].Guests, g)
	}
	fsys["clusters/bench/config.yaml"] = &fstest.MapFile{Data: []byte("pve:\n  clusters:\n    bench:\n      base-url: https://pve.example.invalid:8006\n      nodes: [pve1, pve2, pve3, pve4]\n")}
	fsys["clusters/bench/resources.yaml"] = &fstest.MapFile{Data: []byte(res.String())}
	rp := repo.Load(fsys)
	if ds := rp.ClusterDiagnostics("bench"); ds.HasErrors() {
		tb.Fatalf("benchmark repository is invalid: %v", ds)
	}
	for i := range obs.Nodes {
		obs.Nodes[i].Sort()
	}
	var owned []plan.Owned
	for _, g := range obs.Guests() {
		owned = append(owned, plan.Owned{VMID: g.VMID, Ref: "x", Node: g.Node, Fingerprint: inventory.Fingerprint(g)})
	}
	cl := rp.Cluster("bench")
	return plan.Input{Cluster: cl, Observed: obs, Owned: owned, Settings: plan.SettingsFor(rp.Config, cl.Config), Tree: "bench"}
}

func TestBenchmarkClusterIsConverged(t *testing.T) {
	p, err := plan.Diff(benchCluster(t, 200, false))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Operations) != 0 || len(p.Findings) != 0 {
		t.Fatalf("the converged benchmark cluster has %d operations and %d findings", len(p.Operations), len(p.Findings))
	}
	p, err = plan.Diff(benchCluster(t, 200, true))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Operations) == 0 {
		t.Fatal("the drifted benchmark cluster has nothing to do")
	}
}

// BenchmarkDiff diffs 1,000 and 10,000 parsed guests against their observed state, converged and with 10 %
// drifted (quality bar P1(b): under 0.3 s for 10,000, near-linear).
func BenchmarkDiff(b *testing.B) {
	for _, drifted := range []bool{false, true} {
		for _, n := range []int{1000, 10000} {
			in := benchCluster(b, n, drifted)
			state := "converged"
			if drifted {
				state = "drift10"
			}
			b.Run(fmt.Sprintf("guests=%d/%s", n, state), func(b *testing.B) {
				for b.Loop() {
					if _, err := plan.Diff(in); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDiffScaling times a converged diff of 1,000 and of 10,000 guests in each iteration and reports
// their ratio (near-linear is about 10; the bar is 12).
func BenchmarkDiffScaling(b *testing.B) {
	small, large := benchCluster(b, 1000, false), benchCluster(b, 10000, false)
	var ts, tl time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := plan.Diff(small); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if _, err := plan.Diff(large); err != nil {
			b.Fatal(err)
		}
		ts += mid.Sub(start)
		tl += time.Since(mid)
	}
	b.ReportMetric(float64(tl)/float64(ts), "ratio-10k/1k")
	b.ReportMetric(tl.Seconds()/float64(b.N), "s-10k")
}
