package adopt_test

import (
	"fmt"

	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/render"
)

// Public keys and a password of the representative cluster: none of them may appear in anything adoption
// produces.
const (
	keyAdmin  = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAdminAdminAdminAdminAdminAdminAdmin01 admin@ops"
	keyDeploy = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDeployDeployDeployDeployDeployDeploy02 deploy@ci"
	keyStray  = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQStrayStrayStrayStrayStrayStray03 someone@laptop"
	password  = "Sup3r-Secret-Passw0rd"
)

// keyStore stands for a cluster's SOPS file: cloud-init.ssh-keys entries by name.
type keyStore map[string]string

func (s keyStore) SSHKeyRefs() []string {
	var out []string
	for name := range s {
		out = append(out, "cloud-init.ssh-keys."+name)
	}
	slices.Sort(out)
	return out
}

func (s keyStore) SSHKeysDigest(refs []string) (string, error) {
	var keys []string
	for _, r := range refs {
		k, ok := s[strings.TrimPrefix(r, "cloud-init.ssh-keys.")]
		if !ok {
			return "", fmt.Errorf("%s is not in the secrets file", r)
		}
		keys = append(keys, k)
	}
	return inventory.SSHKeysDigest(keys), nil
}

func (s keyStore) CheckPassword(string) error { return nil }

var _ adopt.KeyStore = keyStore{}
var _ plan.SecretResolver = keyStore{}

func sshkeys(keys ...string) string { return pveformat.EncodeSSHKeys(keys) }

// representativeSpec is a small cluster with one of each thing adoption handles.
func representativeSpec() pvesim.Spec {
	s := pvesim.DefaultSpec()
	s.Nodes = []pvesim.NodeSpec{{Name: "pve1"}, {Name: "pve2"}}
	s.Storages = append(s.Storages, pvesim.StorageSpec{ID: "nfs-iso", Type: "nfs", Content: []string{"iso", "vztmpl"}})
	s.Files = []pvesim.FileSpec{
		{VolID: "nfs-iso:iso/debian-12.7.0-amd64-netinst.iso", Size: 630 << 20},
		{VolID: "local:iso/virtio-win.iso", Size: 700 << 20, Node: "pve1"},
		{VolID: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", Size: 120 << 20, Node: "pve1"},
		{VolID: "local:import/debian-12-genericcloud-amd64.qcow2", Size: 300 << 20, Node: "pve2"},
		{VolID: "local:100/vm-100-disk-0.raw", Size: 528 << 10, Node: "pve1"},
	}
	s.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Running: true, Config: `#Web front end.
#Owner: web team
agent: 1,fstrim_cloned_disks=1
args: -device intel-hda
bios: ovmf
boot: order=scsi0;ide3;net0
cipassword: ` + password + `
ciuser: deploy
cores: 4
cpu: host,hidden=1,flags=+aes
efidisk0: local:100/vm-100-disk-0.raw,efitype=4m,pre-enrolled-keys=1
hostpci0: 0000:01:00.0,pcie=1,x-vga=1
hostpci1: mapping=gpu0
ide2: local-lvm:vm-100-cloudinit,media=cdrom,size=4M
ide3: nfs-iso:iso/debian-12.7.0-amd64-netinst.iso,media=cdrom,size=630M
ipconfig0: ip=192.0.2.10/24,gw=192.0.2.1
ipconfig1: ip=dhcp
machine: q35
memory: 8192
name: web-01
nameserver: 192.0.2.53 192.0.2.54
net0: virtio=BC:24:11:AA:00:01,bridge=vmbr0,firewall=1,tag=20,rate=125,mtu=9000
net1: e1000=BC:24:11:AA:00:02,bridge=vmbr1
numa: 1
onboot: 0
ostype: l26
scsi0: local-lvm:vm-100-disk-1,cache=none,discard=on,iothread=1,size=32G,ssd=1
scsi1: local-lvm:vm-100-disk-2,size=512G,backup=0
scsihw: virtio-scsi-single
searchdomain: example.com
serial0: socket
smbios1: uuid=2f6c1a0e-0000-4000-8000-000000000100
sockets: 1
sshkeys: ` + sshkeys(keyAdmin, keyDeploy) + `
tags: prod;web
tpmstate0: local-lvm:vm-100-disk-3,size=4M,version=v2.0
vga: std
`},
		{VMID: 101, Type: "qemu", Node: "pve2", Config: `cores: 2
cpu: x86-64-v2-AES
memory: 2048
name: Build-Runner.Lab
net0: virtio=BC:24:11:AA:01:01,bridge=vmbr0
ostype: l26
scsi0: local-lvm:vm-101-disk-0,size=20G
sshkeys: ` + sshkeys(keyAdmin, keyStray) + `
tablet: 0
tags: proxops;ci
`},
		{VMID: 102, Type: "qemu", Node: "pve2", Config: `cores: 1
memory: 1024
name: web-01
net0: virtio=BC:24:11:AA:02:01,bridge=vmbr0
scsi0: local-lvm:vm-102-disk-0,size=8G
`},
		{VMID: 200, Type: "lxc", Node: "pve1", Running: true, Config: `#Postgres
arch: amd64
cores: 2
cpulimit: 1.5
features: nesting=1,keyctl=1
hostname: db-01
memory: 4096
mp0: local-lvm:vm-200-disk-1,mp=/var/lib/postgresql,backup=0,size=64G
mp1: /srv/backups,mp=/backups,ro=1
nameserver: 192.0.2.53
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:BB:00:01,ip=192.0.2.20/24,gw=192.0.2.1,type=veth,ip6=auto
onboot: 1
ostype: debian
protection: 0
rootfs: local-lvm:vm-200-disk-0,size=8G
searchdomain: example.com
swap: 512
tags: db
unprivileged: 1
`},
		{VMID: 201, Type: "lxc", Node: "pve2", Config: `arch: amd64
cores: 1
hostname: cache-01
memory: 512
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:BB:01:01,ip=dhcp,type=veth
ostype: debian
rootfs: local-lvm:vm-201-disk-0,size=4G
`},
		{VMID: 900, Type: "qemu", Node: "pve1", Config: `bios: ovmf
cores: 2
efidisk0: local-lvm:base-900-disk-0,efitype=4m,size=4M
memory: 2048
name: debian-12-tpl
net0: virtio=BC:24:11:CC:00:01,bridge=vmbr0
scsi0: local-lvm:base-900-disk-1,size=10G
scsihw: virtio-scsi-single
template: 1
`},
		{VMID: 910, Type: "lxc", Node: "pve1", Config: `arch: amd64
cores: 1
hostname: debian-ct-tpl
memory: 512
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:DD:00:01,type=veth
ostype: debian
rootfs: local-lvm:base-910-disk-0,size=4G
template: 1
`},
	}
	return s
}

// operatorTemplates are the CTTemplates an operator named in the adopted container files.
var operatorTemplates = map[int]string{200: "debian-12-standard-12-7-1-amd64-tar-zst", 910: "debian-12-standard-12-7-1-amd64-tar-zst"}

func adoptRepresentative(t *testing.T) (*lab, inventory.Cluster, adopt.Result) {
	t.Helper()
	l := newLab(t, representativeSpec())
	if w := l.sim.Warnings(); len(w) > 0 {
		t.Fatalf("parser warnings: %q", w)
	}
	observed := l.observe(t, "lab", "pve1", "pve2")
	res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: observed, Templates: operatorTemplates,
		Keys: keyStore{"admin": keyAdmin, "deploy": keyDeploy, "unused": keyStray + "x"}})
	if err != nil {
		t.Fatal(err)
	}
	return l, observed, res
}

// The rendered manifests of representative guests and files (a VM with EFI, TPM, cloud-init, a CD, PCI
// devices and SSH keys from the secrets file; a VM whose keys stay PVE's; LXCs with volume and bind mounts;
// templates; an ISO, a CTTemplate and a disk image) are pinned by golden files, and so is the report.
func TestRepresentativeGuestsRenderAsTheGoldenManifests(t *testing.T) {
	l, _, res := adoptRepresentative(t)
	var paths []string
	for _, m := range res.Manifests {
		paths = append(paths, m.Path)
		checkGolden(t, filepath.Join("testdata", "representative", filepath.FromSlash(m.Path)), m.Content)
		back, diags := manifest.Parse(m.Path, m.Content)
		if m.Complete() && (diags.HasErrors() || len(back) != 1) {
			t.Errorf("%s does not parse back: %s", m.Path, diags.Error())
		}
	}
	want := []string{
		"ctt/lab/debian-12-standard-12-7-1-amd64-tar-zst.yaml",
		"diskimage/lab/debian-12-genericcloud-amd64-qcow2.yaml",
		"iso/lab/debian-12-7-0-amd64-netinst-iso.yaml",
		"iso/lab/virtio-win-iso.yaml",
		"lxc/lab/cache-01.yaml",
		"lxc/lab/db-01.yaml",
		"templatect/lab/debian-ct-tpl.yaml",
		"templatevm/lab/debian-12-tpl.yaml",
		"vm/lab/build-runner-lab.yaml",
		"vm/lab/web-01-102.yaml",
		"vm/lab/web-01.yaml",
	}
	if d := cmp.Diff(want, paths); d != "" {
		t.Errorf("paths (-want +got):\n%s", d)
	}
	text := render.AdoptionText(render.Adoption{Result: res, CompositionFile: "clusters/lab/resources.yaml", Missing: res.Composition()})
	checkGolden(t, filepath.Join("testdata", "representative", "report.txt"), []byte(text))
	js, err := render.AdoptionJSONBytes(render.Adoption{Result: res, CompositionFile: "clusters/lab/resources.yaml", Missing: res.Composition()})
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, filepath.Join("testdata", "representative", "report.json"), js)
	if w := l.writes(); len(w) > 0 {
		t.Errorf("adoption wrote to PVE: %v", w)
	}
}

// The representative manifests, committed with their composition, plan to one claim of the ownership tag per
// untagged adopted guest and nothing else; the tagged guest needs nothing at all.
func TestRepresentativeAdoptionPlansToTheClaimOnly(t *testing.T) {
	_, observed, res := adoptRepresentative(t)
	dir := t.TempDir()
	writeRepository(t, dir, "lab", []string{"pve1", "pve2"}, res)
	p := planRepository(t, dir, "lab", observed, keyStore{"admin": keyAdmin, "deploy": keyDeploy})
	var got []string
	for _, op := range p.Operations {
		got = append(got, string(op.Action)+" "+op.Ref)
	}
	want := []string{
		"claim-tag LXC/cache-01", "claim-tag LXC/db-01", "claim-tag TemplateCT/debian-ct-tpl",
		"claim-tag TemplateVM/debian-12-tpl", "claim-tag VM/web-01", "claim-tag VM/web-01-102",
	}
	slices.Sort(got)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("operations (-want +got):\n%s", d)
	}
	if inc := res.Incomplete(); len(inc) != 0 {
		t.Errorf("INCOMPLETE = %+v, want none", inc)
	}
	// The container whose template nobody named is adopted without one, and the unknown template is a gap.
	if !slices.ContainsFunc(res.Gaps, func(g inventory.Gap) bool {
		return g.Name == "cache-01" && g.Key == "template" && g.Value == "unknown"
	}) {
		t.Errorf("no gap says the template of LXC/cache-01 is unknown: %+v", res.Gaps)
	}
}

// Nothing adoption produces carries a key or the password: the keys become references or stay PVE's, the
// password is only counted and shown redacted.
func TestAdoptionNeverCarriesKeyMaterialOrPasswords(t *testing.T) {
	_, _, res := adoptRepresentative(t)
	var all strings.Builder
	for _, m := range res.Manifests {
		all.Write(m.Content)
	}
	all.WriteString(render.AdoptionText(render.Adoption{Result: res, CompositionFile: "clusters/lab/resources.yaml"}))
	js, _ := render.AdoptionJSONBytes(render.Adoption{Result: res})
	all.Write(js)
	for _, secret := range []string{password, "AdminAdmin", "DeployDeploy", "StrayStray", "AAAAC3Nz", "AAAAB3Nz"} {
		if strings.Contains(all.String(), secret) {
			t.Errorf("adoption output contains %q", secret)
		}
	}
	web := find(t, res, "vm/lab/web-01.yaml").Resource.VM()
	if d := cmp.Diff([]string{"cloud-init.ssh-keys.admin", "cloud-init.ssh-keys.deploy"}, web.CloudInitData.SSHKeyRefs); d != "" {
		t.Errorf("ssh-key-refs (-want +got):\n%s", d)
	}
	runner := find(t, res, "vm/lab/build-runner-lab.yaml").Resource.VM()
	if d := cmp.Diff([]string{"*"}, runner.CloudInitData.SSHKeys); d != "" {
		t.Errorf("a guest with a key outside the secrets file: ssh-keys (-want +got):\n%s", d)
	}
	if c := res.Census; c != (adopt.Census{SSHKeyGuests: 2, SSHKeySets: 2, SSHKeyRefs: 1, SSHKeysPVE: 1, Passwords: 1}) {
		t.Errorf("census = %+v", c)
	}
}

func find(t *testing.T, res adopt.Result, path string) adopt.Manifest {
	t.Helper()
	for _, m := range res.Manifests {
		if m.Path == path {
			return m
		}
	}
	t.Fatalf("no manifest %s", path)
	return adopt.Manifest{}
}

// Adopting an unchanged cluster twice gives the same files and the same report, byte for byte.
func TestAdoptingTwiceIsByteIdentical(t *testing.T) {
	_, observed, first := adoptRepresentative(t)
	// The observed state in another order must not matter.
	shuffled := observed
	shuffled.Nodes = slices.Clone(observed.Nodes)
	slices.Reverse(shuffled.Nodes)
	second, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: shuffled, Templates: operatorTemplates,
		Keys: keyStore{"unused": keyStray + "x", "deploy": keyDeploy, "admin": keyAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	a := render.AdoptionText(render.Adoption{Result: first})
	b := render.AdoptionText(render.Adoption{Result: second})
	if a != b {
		t.Errorf("reports differ:\n%s\n---\n%s", a, b)
	}
	if len(first.Manifests) != len(second.Manifests) {
		t.Fatalf("%d manifests, then %d", len(first.Manifests), len(second.Manifests))
	}
	for i := range first.Manifests {
		if string(first.Manifests[i].Content) != string(second.Manifests[i].Content) {
			t.Errorf("%s differs between runs", first.Manifests[i].Path)
		}
	}
}
