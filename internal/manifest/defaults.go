package manifest

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/pveformat"
)

// Default values ProxOps applies when a field is absent.
const (
	DefaultNICModel      = "virtio"
	DefaultEFIDiskSize   = Quantity("4MiB")
	DefaultCloudInitSize = Quantity("4M")
	DefaultTPMVersion    = "v2.0"
	DefaultCDROMMedia    = "cdrom"
	// CloudInitSlot is the slot of the cloud-init drive.
	CloudInitSlot = "ide2"
)

// The functions and methods below compute default values; none of them changes the value it is given.

// DesiredState is the power state a resource should be in: stopped for templates, else the declared state,
// else the one spec.ha's state keeps it in, started when absent. Artifacts have none.
func (r *Resource) DesiredState() State {
	switch {
	case r.Kind.IsTemplate():
		return StateStopped
	case !r.Kind.IsGuest():
		return ""
	}
	s := r.guest().state
	if h := r.GuestHA(); s == "" && h != nil {
		// HA keeps the guest in the run state of its HA state.
		s = h.RunState()
	}
	if s == "" {
		return StateStarted
	}
	return s
}

// PVEName is the qemu name of a VM or TemplateVM: spec.pve-name, else metadata.name.
func (r *Resource) PVEName() string {
	if s := r.VM(); s != nil && s.PVEName != "" {
		return s.PVEName
	}
	return r.Metadata.Name
}

// Hostname is the hostname of an LXC or TemplateCT: spec.dns.hostname, else metadata.name.
func (r *Resource) Hostname() string {
	if s := r.LXC(); s != nil && s.DNS != nil && s.DNS.Hostname != "" {
		return s.DNS.Hostname
	}
	return r.Metadata.Name
}

// SlotAt is the disk's slot when it is the index-th disk: interface, else scsi<index>.
func (d Disk) SlotAt(index int) string {
	if d.Interface != "" {
		return d.Interface
	}
	return "scsi" + strconv.Itoa(index)
}

// DiskSlots lists the slot of every disk in order.
func (s *VMSpec) DiskSlots() []string {
	out := make([]string, len(s.Disks))
	for i, d := range s.Disks {
		out[i] = d.SlotAt(i)
	}
	return out
}

// ModelOrDefault is the NIC model, virtio when absent.
func (n NIC) ModelOrDefault() string {
	if n.Model != "" {
		return n.Model
	}
	return DefaultNICModel
}

// SlotAt is the NIC's slot when it is the index-th NIC: slot, else net<index>.
func (n NIC) SlotAt(index int) string {
	if n.Slot != "" {
		return n.Slot
	}
	return "net" + strconv.Itoa(index)
}

// SCSIHW is the VM-wide SCSI controller: the controller of the first disk that declares one, else "" (not
// owned).
func (s *VMSpec) SCSIHW() string {
	for _, d := range s.Disks {
		if d.Controller != "" {
			return d.Controller
		}
	}
	return ""
}

// CloudInitEnabled reports whether the VM owns a cloud-init drive.
func (s *VMSpec) CloudInitEnabled() bool {
	return s.Hardware != nil && s.Hardware.CloudInit != nil && IsTrue(s.Hardware.CloudInit.Enabled)
}

// CDROMSlot is the slot of the CD/DVD drive: ide2, or ide3 when the cloud-init drive takes ide2.
func (s *VMSpec) CDROMSlot() string {
	if s.CloudInitEnabled() {
		return "ide3"
	}
	return "ide2"
}

// SizeOrDefault is the EFI disk size, 4MiB when absent.
func (e *EFIDisk) SizeOrDefault() Quantity {
	if e.Size.IsZero() {
		return DefaultEFIDiskSize
	}
	return e.Size
}

// SizeOrDefault is the cloud-init drive size, 4M when absent.
func (c *CloudInitDrive) SizeOrDefault() Quantity {
	if c.Size.IsZero() {
		return DefaultCloudInitSize
	}
	return c.Size
}

// VersionOrDefault is the TPM version, v2.0 when absent.
func (t *TPM) VersionOrDefault() string {
	if t.Version == "" {
		return DefaultTPMVersion
	}
	return t.Version
}

// TPMStorage is the storage of the TPM state volume: hardware.tpm.storage, else the EFI disk's storage,
// else the first disk's. It is "" when the VM declares no TPM.
func (s *VMSpec) TPMStorage() string {
	h := s.Hardware
	if h == nil || h.TPM == nil {
		return ""
	}
	switch {
	case h.TPM.Storage != "":
		return h.TPM.Storage
	case h.EFIDisk != nil && h.EFIDisk.Storage != "":
		return h.EFIDisk.Storage
	case len(s.Disks) > 0:
		return s.Disks[0].Storage
	}
	return ""
}

// MediaOrDefault is the CD/DVD media, cdrom when absent.
func (c *CDROM) MediaOrDefault() string {
	if c.Media == "" {
		return DefaultCDROMMedia
	}
	return c.Media
}

// NormalizedDevice is the PCI address in lower case.
func (p PCIDevice) NormalizedDevice() string { return strings.ToLower(p.Device) }

// SlotNumber is the N of a slot key such as hostpci3 or mp12, -1 when it has none.
func SlotNumber(slot string) int {
	i := strings.IndexFunc(slot, func(r rune) bool { return r >= '0' && r <= '9' })
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(slot[i:])
	if err != nil {
		return -1
	}
	return n
}

// SlotAt is the mount point's slot when it is the index-th mount point: slot, else mp<index>.
func (m MountPoint) SlotAt(index int) string {
	if m.Slot != "" {
		return m.Slot
	}
	return "mp" + strconv.Itoa(index)
}

// BindMountSlot is the slot of the index-th bind mount: its slot, else mp<len(mount-points)+index>.
func (s *LXCSpec) BindMountSlot(index int) string {
	if s.BindMounts[index].Slot != "" {
		return s.BindMounts[index].Slot
	}
	return "mp" + strconv.Itoa(len(s.MountPoints)+index)
}

// SlotAt is the container NIC's slot when it is the index-th NIC: slot, else net<index>.
func (n LXCNIC) SlotAt(index int) string {
	if n.Slot != "" {
		return n.Slot
	}
	return "net" + strconv.Itoa(index)
}

// IfaceOrDefault is the interface name inside the container: iface, else the slot name.
func (n LXCNIC) IfaceOrDefault(index int) string {
	if n.Iface != "" {
		return n.Iface
	}
	return n.SlotAt(index)
}

// PlacementNodes are the nodes an artifact must be present on: spec.nodes without duplicates, in order, or
// the single spec.node.
func (a *ArtifactSpec) PlacementNodes() []string {
	if len(a.Nodes) == 0 {
		if a.Node == "" {
			return nil
		}
		return []string{a.Node}
	}
	out := make([]string, 0, len(a.Nodes))
	for _, n := range a.Nodes {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// PlacedOn reports whether an artifact is placed on a node.
func (a *ArtifactSpec) PlacedOn(node string) bool {
	return slices.Contains(a.PlacementNodes(), node)
}

// IDOrName is the pool's PVE id: spec.id, else the manifest's name.
func (s *PoolSpec) IDOrName(name string) string {
	if s.ID != "" {
		return s.ID
	}
	return name
}

// SplitTags splits a tag list on the separators PVE accepts (`;`, `,` and whitespace).
func SplitTags(s string) []string { return pveformat.SplitList(s) }

// NormalizeTags returns tags the way PVE stores them: split on separators, lower case, deduplicated and
// sorted. The ownership tag is not added.
func NormalizeTags(tags []string) []string { return pveformat.NormalizeTags(tags) }

// Resolve returns a deep copy of a resource with every default applied: the state, the PVE name or
// hostname, disk, NIC, mount point and bind mount slots, NIC models, EFI disk and cloud-init drive sizes,
// the TPM version and storage, the CD/DVD media, lower-case PCI addresses sorted by slot, normalised tags,
// and an artifact's node list. Options that are absent stay absent (not owned). r is not changed.
func Resolve(r *Resource) *Resource {
	out := *r
	out.Metadata.Labels = maps.Clone(r.Metadata.Labels)
	out.Metadata.Annotations = maps.Clone(r.Metadata.Annotations)
	switch s := r.Spec.(type) {
	case *VMSpec:
		out.Spec = resolveVM(&out, s)
	case *LXCSpec:
		out.Spec = resolveLXC(&out, s)
	case *PoolSpec:
		p := *s
		p.ID = s.IDOrName(r.Metadata.Name)
		out.Spec = &p
	case *BackupJobSpec:
		j := *s
		j.ID = s.IDOrName(r.Metadata.Name)
		j.Selection.Guests = slices.Clone(s.Selection.Guests)
		j.Selection.Exclude = slices.Clone(s.Selection.Exclude)
		if s.Retention != nil {
			rt := s.Retention
			j.Retention = &BackupRetention{KeepAll: clonePtr(rt.KeepAll), KeepLast: clonePtr(rt.KeepLast), KeepHourly: clonePtr(rt.KeepHourly),
				KeepDaily: clonePtr(rt.KeepDaily), KeepWeekly: clonePtr(rt.KeepWeekly), KeepMonthly: clonePtr(rt.KeepMonthly),
				KeepYearly: clonePtr(rt.KeepYearly)}
		}
		j.Protected, j.Enabled = clonePtr(s.Protected), clonePtr(s.Enabled)
		out.Spec = &j
	case *HARuleSpec:
		out.Spec = resolveHARule(r.Metadata.Name, s)
	case *SecurityGroupSpec, *IPSetSpec, *AliasSpec:
		out.Spec = resolveFirewallObject(r)
	case *ArtifactSpec:
		a := *s
		a.Nodes = s.PlacementNodes()
		a.Node = ""
		if s.Checksum != nil {
			cs := *s.Checksum
			a.Checksum = &cs
		}
		out.Spec = &a
	}
	return &out
}

func resolveVM(r *Resource, s *VMSpec) *VMSpec {
	v := *s
	v.State = r.DesiredState()
	v.PVEName = r.PVEName()
	v.Tags = NormalizeTags(s.Tags)
	v.CPU.Flags = slices.Clone(s.CPU.Flags)
	v.Migrate = cloneMigrate(s.Migrate)
	v.HA = resolveHA(s.HA)
	v.Disks = make([]Disk, len(s.Disks))
	for i, d := range s.Disks {
		d.Interface = d.SlotAt(i)
		d.IOThread, d.SSD = clonePtr(d.IOThread), clonePtr(d.SSD)
		v.Disks[i] = d
	}
	v.Networks = make([]NIC, len(s.Networks))
	for i, n := range s.Networks {
		n.Model = n.ModelOrDefault()
		n.Slot = n.SlotAt(i)
		n.MAC = strings.ToLower(n.MAC)
		n.VLAN, n.RateLimit, n.Firewall = clonePtr(n.VLAN), clonePtr(n.RateLimit), clonePtr(n.Firewall)
		v.Networks[i] = n
	}
	if s.Hardware != nil {
		h := *s.Hardware
		h.NUMA = clonePtr(h.NUMA)
		if s.Hardware.TPM != nil {
			h.TPM = &TPM{Version: s.Hardware.TPM.VersionOrDefault(), Storage: s.TPMStorage()}
		}
		if e := s.Hardware.EFIDisk; e != nil {
			h.EFIDisk = &EFIDisk{Storage: e.Storage, Size: e.SizeOrDefault(), Template: strings.ToLower(e.Template), SecureBoot: e.SecureBoot}
		}
		if ci := s.Hardware.CloudInit; ci != nil {
			c := *ci
			c.Enabled = clonePtr(ci.Enabled)
			if IsTrue(ci.Enabled) {
				c.Size = ci.SizeOrDefault()
			}
			h.CloudInit = &c
		}
		if cd := s.Hardware.CDROM; cd != nil {
			h.CDROM = &CDROM{ISO: cd.ISO, Media: cd.MediaOrDefault()}
		}
		h.PCIDevices = make([]PCIDevice, len(s.Hardware.PCIDevices))
		for i, p := range s.Hardware.PCIDevices {
			p.Device = p.NormalizedDevice()
			p.PCIe = clonePtr(p.PCIe)
			h.PCIDevices[i] = p
		}
		slices.SortStableFunc(h.PCIDevices, func(a, b PCIDevice) int {
			return cmp.Compare(SlotNumber(a.Slot), SlotNumber(b.Slot))
		})
		v.Hardware = &h
	}
	if s.Options != nil {
		o := *s.Options
		o.OnBoot, o.Protection, o.Agent, o.ACPI = clonePtr(o.OnBoot), clonePtr(o.Protection), clonePtr(o.Agent), clonePtr(o.ACPI)
		o.Tablet, o.NestedVirt, o.Hidden = clonePtr(o.Tablet), clonePtr(o.NestedVirt), clonePtr(o.Hidden)
		o.Hotplug, o.BootOrder = slices.Clone(o.Hotplug), slices.Clone(o.BootOrder)
		v.Options = &o
	}
	if s.CloudInitData != nil {
		c := *s.CloudInitData
		c.SSHKeys, c.SSHKeyRefs = slices.Clone(c.SSHKeys), slices.Clone(c.SSHKeyRefs)
		c.Nameservers, c.SearchDomains = slices.Clone(c.Nameservers), slices.Clone(c.SearchDomains)
		c.IPConfigs = slices.Clone(c.IPConfigs)
		v.CloudInitData = &c
	}
	v.Firewall = cloneFirewall(s.Firewall)
	v.Snapshots = clonePtr(s.Snapshots)
	v.Extra = maps.Clone(s.Extra)
	return &v
}

func resolveLXC(r *Resource, s *LXCSpec) *LXCSpec {
	v := *s
	v.State = r.DesiredState()
	v.Tags = NormalizeTags(s.Tags)
	v.Migrate = cloneMigrate(s.Migrate)
	v.HA = resolveHA(s.HA)
	v.MountPoints = make([]MountPoint, len(s.MountPoints))
	for i, m := range s.MountPoints {
		m.Slot = m.SlotAt(i)
		if m.Options != nil {
			o := *m.Options
			o.ReadOnly, o.Backup, o.ACL, o.Quota, o.Shared = clonePtr(o.ReadOnly), clonePtr(o.Backup), clonePtr(o.ACL), clonePtr(o.Quota), clonePtr(o.Shared)
			m.Options = &o
		}
		v.MountPoints[i] = m
	}
	v.BindMounts = make([]BindMount, len(s.BindMounts))
	for i, b := range s.BindMounts {
		b.Slot = s.BindMountSlot(i)
		b.ReadOnly = clonePtr(b.ReadOnly)
		v.BindMounts[i] = b
	}
	v.Networks = make([]LXCNIC, len(s.Networks))
	for i, n := range s.Networks {
		n.Slot = n.SlotAt(i)
		n.HWAddr = strings.ToLower(n.HWAddr)
		n.Tag, n.RateLimit, n.Firewall = clonePtr(n.Tag), clonePtr(n.RateLimit), clonePtr(n.Firewall)
		v.Networks[i] = n
	}
	d := DNS{}
	if s.DNS != nil {
		d = *s.DNS
		d.Nameservers = slices.Clone(s.DNS.Nameservers)
	}
	d.Hostname = r.Hostname()
	v.DNS = &d
	if s.Options != nil {
		o := *s.Options
		o.Unprivileged, o.Protection, o.OnBoot, o.Console = clonePtr(o.Unprivileged), clonePtr(o.Protection), clonePtr(o.OnBoot), clonePtr(o.Console)
		o.Nesting, o.Keyctl, o.Fuse = clonePtr(o.Nesting), clonePtr(o.Keyctl), clonePtr(o.Fuse)
		v.Options = &o
	}
	v.Firewall = cloneFirewall(s.Firewall)
	v.Snapshots = clonePtr(s.Snapshots)
	v.Extra = maps.Clone(s.Extra)
	return &v
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
