package manifest_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/manifest"
)

func parseOne(t *testing.T, src string) *manifest.Resource {
	t.Helper()
	rs, diags := manifest.Parse("vm/base/x.yaml", []byte(src))
	if diags.HasErrors() || len(rs) != 1 {
		t.Fatalf("Parse() = %d resources, diagnostics:\n%s", len(rs), diags.Error())
	}
	return rs[0]
}

const head = "apiVersion: proxops/v1alpha1\n"

// TestResolveAppliesEveryDefault is the table of manifests and the values ProxOps resolves for them.
func TestResolveAppliesEveryDefault(t *testing.T) {
	type vmWant struct {
		state, name, scsihw, cdromSlot, efiSize, ciSize, tpmVersion, tpmStorage, media string
		diskSlots, nicModels, nicSlots, pci, tags                                      []string
	}
	vmCases := []struct {
		name string
		src  string
		want vmWant
	}{{
		name: "bare VM",
		src: head + `kind: VM
metadata: {name: web}
spec:
  node: pve1
  vmid: 100
  memory: 1GiB
  cpu: {type: host, cores: 1}
  disks:
    - {storage: local-lvm, size: 8GiB}
    - {storage: local-lvm, size: 8GiB, interface: virtio3}
    - {storage: local-lvm, size: 8GiB}
  networks:
    - {bridge: vmbr0}
    - {bridge: vmbr1, model: e1000, slot: net5}
`,
		want: vmWant{state: "started", name: "web", cdromSlot: "ide2", diskSlots: []string{"scsi0", "virtio3", "scsi2"},
			nicModels: []string{"virtio", "e1000"}, nicSlots: []string{"net0", "net5"}},
	}, {
		name: "template with firmware, cloud-init, cdrom and PCI",
		src: head + `kind: TemplateVM
metadata: {name: tpl}
spec:
  node: pve1
  vmid: 900
  pve-name: golden.tpl
  tags: ["Web;db", "web, Prod"]
  memory: 1GiB
  cpu: {type: host, cores: 1}
  disks:
    - {storage: fast, size: 8GiB}
    - {storage: slow, size: 8GiB, controller: virtio-scsi-single}
  hardware:
    bios: ovmf
    efi-disk: {storage: efi-store, template: 4M}
    tpm: {}
    cloud-init: {enabled: true, storage: local-lvm}
    cdrom: {iso: none}
    pci-devices:
      - {slot: hostpci10, device: "0000:0A:00"}
      - {slot: hostpci2, device: "01:00.0"}
`,
		want: vmWant{state: "stopped", name: "golden.tpl", scsihw: "virtio-scsi-single", cdromSlot: "ide3", efiSize: "4MiB",
			ciSize: "4M", tpmVersion: "v2.0", tpmStorage: "efi-store", media: "cdrom", diskSlots: []string{"scsi0", "scsi1"},
			pci: []string{"hostpci2=01:00.0", "hostpci10=0000:0a:00"}, tags: []string{"db", "prod", "web"}},
	}, {
		name: "TPM storage from the first disk, explicit sizes kept",
		src: head + `kind: VM
metadata: {name: tpm}
spec:
  node: pve1
  vmid: 101
  state: stopped
  memory: 1GiB
  cpu: {type: host, cores: 1}
  disks: [{storage: first, size: 8GiB}]
  hardware:
    tpm: {version: v1.2}
    cloud-init: {enabled: true, storage: local, size: 8M}
    cdrom: {iso: talos, media: disk}
`,
		want: vmWant{state: "stopped", name: "tpm", cdromSlot: "ide3", ciSize: "8M", tpmVersion: "v1.2", tpmStorage: "first",
			media: "disk", diskSlots: []string{"scsi0"}},
	}}
	for _, c := range vmCases {
		t.Run(c.name, func(t *testing.T) {
			r := parseOne(t, c.src)
			res := manifest.Resolve(r)
			s := res.VM()
			got := vmWant{state: string(s.State), name: s.PVEName, scsihw: s.SCSIHW(), cdromSlot: s.CDROMSlot(),
				diskSlots: s.DiskSlots(), tags: s.Tags}
			if got.name != r.PVEName() || string(r.DesiredState()) != got.state {
				t.Errorf("functions and Resolve disagree: %s/%s vs %s/%s", r.PVEName(), r.DesiredState(), got.name, got.state)
			}
			for _, n := range s.Networks {
				got.nicModels = append(got.nicModels, n.Model)
				got.nicSlots = append(got.nicSlots, n.Slot)
			}
			if h := s.Hardware; h != nil {
				if h.EFIDisk != nil {
					got.efiSize = string(h.EFIDisk.Size)
					if h.EFIDisk.Template != "4m" {
						t.Errorf("efi template = %q, want 4m", h.EFIDisk.Template)
					}
				}
				if h.CloudInit != nil {
					got.ciSize = string(h.CloudInit.Size)
				}
				if h.TPM != nil {
					got.tpmVersion, got.tpmStorage = h.TPM.Version, h.TPM.Storage
				}
				if h.CDROM != nil {
					got.media = h.CDROM.Media
				}
				for _, p := range h.PCIDevices {
					got.pci = append(got.pci, p.Slot+"="+p.Device)
				}
			}
			if diff := cmp.Diff(c.want, got, cmp.AllowUnexported(vmWant{})); diff != "" {
				t.Errorf("resolved values (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveContainerDefaults(t *testing.T) {
	r := parseOne(t, head+`kind: LXC
metadata: {name: cache}
spec:
  node: pve1
  vmid: 200
  template: debian
  memory: 512MiB
  cpu: {cores: 1}
  root: {storage: local, size: 8GiB}
  mount-points:
    - {storage: local, size: 1GiB, mount-point: /a}
    - {storage: local, size: 1GiB, mount-point: /b, slot: mp7}
  bind-mounts:
    - {host-path: /srv/a, mount-point: /srv/a}
    - {host-path: /srv/b, mount-point: /srv/b, slot: mp9}
  networks:
    - {bridge: vmbr0, hwaddr: "AA:BB:CC:DD:EE:FF"}
    - {bridge: vmbr1, iface: eth1}
`)
	s := manifest.Resolve(r).LXC()
	var slots []string
	for _, m := range s.MountPoints {
		slots = append(slots, m.Slot)
	}
	for _, b := range s.BindMounts {
		slots = append(slots, b.Slot)
	}
	if diff := cmp.Diff([]string{"mp0", "mp7", "mp2", "mp9"}, slots); diff != "" {
		t.Errorf("mount slots (-want +got):\n%s", diff)
	}
	if s.State != manifest.StateStarted || s.DNS == nil || s.DNS.Hostname != "cache" || r.Hostname() != "cache" {
		t.Errorf("state %q, dns %+v", s.State, s.DNS)
	}
	if s.Networks[0].Slot != "net0" || s.Networks[0].HWAddr != "aa:bb:cc:dd:ee:ff" || s.Networks[0].Iface != "" {
		t.Errorf("nic 0 = %+v (iface stays unowned)", s.Networks[0])
	}
	if got := r.LXC().Networks[1].IfaceOrDefault(1); got != "eth1" {
		t.Errorf("IfaceOrDefault = %q", got)
	}
	if got := r.LXC().Networks[0].IfaceOrDefault(0); got != "net0" {
		t.Errorf("IfaceOrDefault = %q", got)
	}
}

func TestResolveTemplateCTIsStoppedAndArtifactNodesAreDeduplicated(t *testing.T) {
	tct := &manifest.Resource{Kind: manifest.KindTemplateCT, Metadata: manifest.Metadata{Name: "t"}, Spec: &manifest.LXCSpec{}}
	if got := manifest.Resolve(tct).LXC().State; got != manifest.StateStopped {
		t.Errorf("TemplateCT state = %q", got)
	}
	legacy := &manifest.Resource{Kind: manifest.KindISO, Metadata: manifest.Metadata{Name: "i"}, Spec: &manifest.ArtifactSpec{Node: "pve1"}}
	if got := manifest.Resolve(legacy).Artifact().Nodes; !cmp.Equal(got, []string{"pve1"}) {
		t.Errorf("legacy node promoted to %v", got)
	}
	dup := &manifest.Resource{Kind: manifest.KindISO, Metadata: manifest.Metadata{Name: "i"}, Spec: &manifest.ArtifactSpec{Nodes: []string{"b", "a", "b"}}}
	if got := manifest.Resolve(dup).Artifact().Nodes; !cmp.Equal(got, []string{"b", "a"}) {
		t.Errorf("nodes = %v, want [b a]", got)
	}
}

func TestResolveNeverChangesItsInput(t *testing.T) {
	r := parseOne(t, head+`kind: VM
metadata: {name: web, labels: {a: b}}
spec:
  node: pve1
  vmid: 100
  tags: [B, a]
  memory: 1GiB
  cpu: {type: host, cores: 1}
  disks: [{storage: local, size: 8GiB, iothread: true}]
  networks: [{bridge: vmbr0, mac: "AA:BB:CC:DD:EE:FF", vlan: 10}]
  hardware:
    bios: ovmf
    efi-disk: {storage: local}
    tpm: {}
    pci-devices: [{slot: hostpci3, device: "0000:0A:00"}, {slot: hostpci1, device: "0000:0B:00"}]
  options: {onboot: true, boot-order: [scsi0]}
  extra: {watchdog: i6300esb}
`)
	before := manifest.Resolve(r) // a deep copy equal to... the input with defaults; take a second independent copy
	snapshot := *r.VM()
	snapshotHW := *r.VM().Hardware
	res := manifest.Resolve(r)
	res.VM().Disks[0].Storage = "changed"
	*res.VM().Disks[0].IOThread = false
	*res.VM().Networks[0].VLAN = 99
	res.VM().Hardware.PCIDevices[0].Slot = "changed"
	res.VM().Extra["watchdog"] = "changed"
	res.Metadata.Labels["a"] = "changed"
	res.VM().Options.BootOrder[0] = "changed"
	s := r.VM()
	if s.State != "" || s.PVEName != "" || s.Disks[0].Interface != "" || s.Networks[0].Model != "" || s.Networks[0].Slot != "" ||
		s.Hardware.EFIDisk.Size != "" || s.Hardware.TPM.Version != "" || s.Networks[0].MAC != "AA:BB:CC:DD:EE:FF" {
		t.Errorf("Resolve wrote defaults into its input: %+v", s)
	}
	if s.Disks[0].Storage != "local" || !*s.Disks[0].IOThread || *s.Networks[0].VLAN != 10 || s.Hardware.PCIDevices[0].Slot != "hostpci3" ||
		s.Extra["watchdog"] != "i6300esb" || r.Metadata.Labels["a"] != "b" || s.Options.BootOrder[0] != "scsi0" {
		t.Error("changing the resolved copy changed the input")
	}
	if snapshot.Tags[0] != "B" || snapshotHW.BIOS != "ovmf" || before.VM().Tags[0] != "a" {
		t.Errorf("tags: input %v, resolved %v", snapshot.Tags, before.VM().Tags)
	}
}
