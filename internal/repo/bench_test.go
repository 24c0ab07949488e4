package repo_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/proxops/proxops/internal/repo"
)

// syntheticRepo builds an in-memory repository with one cluster of n guests (three VMs for each container)
// on 8 nodes, each VM attached to a shared ISO and each container created from a shared CTTemplate.
func syntheticRepo(n int) fstest.MapFS {
	fsys := fstest.MapFS{}
	nodes := "[pve1, pve2, pve3, pve4, pve5, pve6, pve7, pve8]"
	fsys["clusters/bench/config.yaml"] = &fstest.MapFile{Data: []byte(
		"pve:\n  clusters:\n    bench:\n      base-url: https://pve.bench.invalid:8006\n      nodes: " + nodes + "\n")}
	fsys["iso/base/installer.yaml"] = &fstest.MapFile{Data: []byte(`apiVersion: proxops/v1alpha1
kind: ISO
metadata: {name: installer}
spec: {nodes: ` + nodes + `, storage: local, filename: installer.iso, url: "https://example.invalid/installer.iso"}
`)}
	fsys["ctt/base/debian.yaml"] = &fstest.MapFile{Data: []byte(`apiVersion: proxops/v1alpha1
kind: CTTemplate
metadata: {name: debian}
spec: {nodes: ` + nodes + `, storage: local, filename: debian.tar.zst, url: "https://example.invalid/debian.tar.zst"}
`)}
	var res strings.Builder
	res.WriteString("resources:\n  - ../../iso/base/installer.yaml\n  - ../../ctt/base/debian.yaml\n")
	for i := range n {
		node := fmt.Sprintf("pve%d", i%8+1)
		var path, body string
		if i%4 == 3 {
			path = fmt.Sprintf("lxc/bench/ct-%05d.yaml", i)
			body = fmt.Sprintf(`apiVersion: proxops/v1alpha1
kind: LXC
metadata:
  name: ct-%05d
  labels: {tier: cache}
spec:
  node: %s
  vmid: %d
  template: debian
  memory: 512MiB
  swap: 256MiB
  cpu:
    cores: 1
  root:
    storage: local-lvm
    size: 8GiB
  networks:
    - bridge: vmbr0
      ip: 10.%d.%d.%d/16
      gw: 10.%d.0.1
  dns:
    nameservers: [192.0.2.53]
  options:
    unprivileged: true
    onboot: true
`, i, node, 1000+i, i%200, (i/200)%250, i%250+1, i%200)
		} else {
			path = fmt.Sprintf("vm/bench/vm-%05d.yaml", i)
			body = fmt.Sprintf(`apiVersion: proxops/v1alpha1
kind: VM
metadata:
  name: vm-%05d
  labels: {tier: web}
spec:
  node: %s
  vmid: %d
  memory: 4GiB
  tags: [web, bench]
  cpu:
    type: host
    cores: 2
  disks:
    - storage: local-lvm
      size: 32GiB
      controller: virtio-scsi-single
      iothread: true
  networks:
    - bridge: vmbr0
      vlan: 20
  hardware:
    machine: q35
    cdrom:
      iso: installer
  options:
    agent: true
    onboot: true
  cloud-init-data:
    ci-user: ops
    ipconfigs:
      - nic: 0
        ip: 10.20.%d.%d/16
        gateway: 10.20.0.1
`, i, node, 1000+i, i/250, i%250+1)
		}
		fsys[path] = &fstest.MapFile{Data: []byte(body)}
		res.WriteString("  - ../../" + path + "\n")
	}
	fsys["clusters/bench/resources.yaml"] = &fstest.MapFile{Data: []byte(res.String())}
	return fsys
}

func TestSyntheticRepositoryIsValid(t *testing.T) {
	r := repo.Load(syntheticRepo(200))
	if diags := r.AllDiagnostics(); len(diags) != 0 {
		t.Fatalf("synthetic repository has diagnostics:\n%s", diags.Error())
	}
	if got := len(r.Cluster("bench").Resources); got != 202 {
		t.Errorf("resources = %d, want 202", got)
	}
}

// BenchmarkLoad parses and validates a repository of 1,000 and 10,000 guests; the ratio of the two shows
// how loading scales (near-linear is about 10).
func BenchmarkLoad(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		fsys := syntheticRepo(n)
		b.Run(fmt.Sprintf("guests=%d", n), func(b *testing.B) {
			for b.Loop() {
				r := repo.Load(fsys)
				if len(r.Cluster("bench").Resources) != n+2 || r.AllDiagnostics().HasErrors() {
					b.Fatal("synthetic repository did not load cleanly")
				}
			}
		})
	}
}
