package pvewire

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
)

// ArtifactVolid is the volume id of an artifact on its storage: <storage>:iso/<file>, <storage>:vztmpl/<file>
// or <storage>:import/<file>.
func ArtifactVolid(r *manifest.Resource) string {
	a := r.Artifact()
	if a == nil {
		return ""
	}
	return a.Storage + ":" + r.Kind.Content() + "/" + a.Filename
}

func (g Desired) vm() (*manifest.VMSpec, error) {
	if g.Resource == nil || g.Resource.VM() == nil {
		return nil, errors.New("not a VM or TemplateVM")
	}
	return g.Resource.VM(), nil
}

func (g Desired) artifact(kind manifest.Kind, name string) (string, error) {
	if g.Lookup == nil {
		return "", fmt.Errorf("%s %q cannot be resolved", kind, name)
	}
	r := g.Lookup(manifest.Ref{Kind: kind, Name: name})
	if r == nil || r.Artifact() == nil {
		return "", fmt.Errorf("%s %q is not defined in the cluster", kind, name)
	}
	return ArtifactVolid(r), nil
}

// cpuValue is the cpu key: the type, and hidden= when declared.
func cpuValue(s *manifest.VMSpec) string {
	v := s.CPU.Type
	if s.Options != nil && s.Options.Hidden != nil {
		v += ",hidden=" + boolString(*s.Options.Hidden)
	}
	return v
}

func memoryMiB(q manifest.Quantity) (int64, error) {
	n, err := q.MiB()
	if err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	return n, nil
}

// diskOptions sets the disk tokens a manifest owns on a drive's tokens.
func diskOptions(p pveformat.Props, d manifest.Disk) pveformat.Props {
	if d.IOThread != nil {
		p = p.With("iothread", boolString(*d.IOThread))
	}
	if d.Discard != "" {
		p = p.With("discard", d.Discard)
	}
	if d.SSD != nil {
		p = p.With("ssd", boolString(*d.SSD))
	}
	if d.AIO != "" {
		p = p.With("aio", d.AIO)
	}
	return p
}

// diskCreate is a disk's create form: <storage>:<GiB>, or <storage>:0,import-from=<image volid> for an
// image-seeded disk (PVE takes the image's size and refuses any other number), then the options inline.
func (g Desired) diskCreate(d manifest.Disk) (string, error) {
	var dr Drive
	if d.Image != "" {
		src, err := g.artifact(manifest.KindDiskImage, d.Image)
		if err != nil {
			return "", err
		}
		dr = Drive{File: d.Storage + ":0", Props: pveformat.Props{{Key: "import-from", Value: src}}}
	} else {
		b, err := d.Size.Bytes()
		if err != nil {
			return "", fmt.Errorf("disk %s: %w", d.Interface, err)
		}
		dr = Drive{File: d.Storage + ":" + CreateSize(b)}
	}
	dr.Props = diskOptions(dr.Props, d)
	return dr.String(), nil
}

func efiCreate(e *manifest.EFIDisk) (string, error) {
	b, err := e.SizeOrDefault().Bytes()
	if err != nil {
		return "", fmt.Errorf("efi-disk: %w", err)
	}
	return efiOptions(Drive{File: e.Storage + ":" + CreateSize(b)}, e).String(), nil
}

func efiOptions(d Drive, e *manifest.EFIDisk) Drive {
	if e.Template != "" {
		d.Props = d.Props.With("efitype", strings.ToLower(e.Template))
	}
	if e.SecureBoot != "" {
		d.Props = d.Props.With("pre-enrolled-keys", boolString(e.SecureBoot == "enabled"))
	}
	return d
}

func tpmCreate(s *manifest.VMSpec) string {
	return s.TPMStorage() + ":1,version=" + s.Hardware.TPM.VersionOrDefault()
}

func cloudInitCreate(c *manifest.CloudInitDrive) string { return c.Storage + ":cloudinit" }

func (g Desired) cdromValue(c *manifest.CDROM) (string, error) {
	file := "none"
	if c.ISO != manifest.CDROMNone {
		v, err := g.artifact(manifest.KindISO, c.ISO)
		if err != nil {
			return "", err
		}
		file = v
	}
	return file + ",media=" + c.MediaOrDefault(), nil
}

// nicCreate is a NIC's create form: the bare model (PVE picks a MAC) or model=MAC, then its settings.
func nicCreate(n manifest.NIC) string {
	return nicSettings(NIC{Model: n.ModelOrDefault(), MAC: strings.ToLower(n.MAC)}, n).String()
}

func nicSettings(live NIC, n manifest.NIC) NIC {
	live.Props = live.Props.With("bridge", n.Bridge)
	if n.VLAN != nil {
		if *n.VLAN > 0 {
			live.Props = live.Props.With("tag", itoa(*n.VLAN))
		} else {
			live.Props = live.Props.Without("tag", "vlan")
		}
	}
	if n.RateLimit != nil {
		if *n.RateLimit > 0 {
			live.Props = live.Props.With("rate", itoa(*n.RateLimit))
		} else {
			live.Props = live.Props.Without("rate")
		}
	}
	if n.Firewall != nil {
		live.Props = live.Props.With("firewall", boolString(*n.Firewall))
	}
	return live
}

func pciValue(p manifest.PCIDevice) string {
	v := PCI{Host: strings.ToLower(p.Device)}
	if p.PCIe != nil {
		v.Props = pveformat.Props{{Key: "pcie", Value: boolString(*p.PCIe)}}
	}
	return v.String()
}

func bootValue(order []string) string { return "order=" + strings.Join(order, ";") }

func ipconfigValue(ip manifest.IPConfig) string {
	v := "ip=" + ip.IP
	if ip.Gateway != "" {
		v += ",gw=" + ip.Gateway
	}
	return v
}

// sshKeysOwned reports whether the manifest owns sshkeys ("*" leaves them to PVE).
func sshKeysOwned(c *manifest.CloudInitData) bool {
	if c == nil {
		return false
	}
	if len(c.SSHKeyRefs) > 0 {
		return true
	}
	return len(c.SSHKeys) > 0 && !(len(c.SSHKeys) == 1 && c.SSHKeys[0] == manifest.SSHKeysPVEOwned)
}

func sshKeysValue(c *manifest.CloudInitData) Value {
	if len(c.SSHKeyRefs) > 0 {
		return Value{Key: "sshkeys", SecretRefs: slices.Clone(c.SSHKeyRefs)}
	}
	return Value{Key: "sshkeys", Value: pveformat.EncodeSSHKeys(c.SSHKeys)}
}

// sshKeysDigest is the digest the desired keys compare with.
func (g Desired) sshKeysDigest(c *manifest.CloudInitData) string {
	if len(c.SSHKeyRefs) > 0 {
		return g.SSHKeysDigest
	}
	return inventory.SSHKeysDigest(c.SSHKeys)
}

// QEMUCreate returns the parameters of POST /nodes/{node}/qemu for a VM or TemplateVM: every owned key, then
// spec.extra, pool (spec.pool), then start (1 only for a VM whose desired state is started). The vmid is the operation's.
func QEMUCreate(g Desired) (Values, error) {
	s, vs, err := g.vmConfig(nil)
	if err != nil {
		return nil, err
	}
	out := append(vs, extraValues(s.Extra, QEMUCreateOnly, true)...)
	if s.Pool != "" {
		out = append(out, Value{Key: "pool", Value: s.Pool})
	}
	if _, ok := s.Extra["start"]; !ok {
		out = append(out, Value{Key: "start", Value: boolString(g.Resource.Kind == manifest.KindVM && g.Resource.DesiredState() == manifest.StateStarted)})
	}
	return out, nil
}

// QEMUClone returns the config a full clone is given right after PVE made it: every owned key except the
// volumes the template already carries in the same slots (disks, EFI and TPM state, the cloud-init drive
// are inherited, never rewritten), then spec.extra. templateSlots lists the template's volume slots.
func QEMUClone(g Desired, templateSlots []string) (Values, error) {
	s, vs, err := g.vmConfig(templateSlots)
	if err != nil {
		return nil, err
	}
	return append(vs, extraValues(s.Extra, QEMUCreateOnly, false)...), nil
}

// vmConfig is the VM's spec and its owned keys, leaving out the volume slots in skip.
func (g Desired) vmConfig(skip []string) (*manifest.VMSpec, Values, error) {
	s, err := g.vm()
	if err != nil {
		return nil, nil, err
	}
	vs, err := g.qemuConfig(s, skip)
	return s, vs, err
}

// qemuConfig lists the owned keys in a fixed order, leaving out the volume slots in skip: identity and
// hardware, volumes, network and PCI devices, options, then cloud-init data.
func (g Desired) qemuConfig(s *manifest.VMSpec, skip []string) (Values, error) {
	out, err := g.qemuHardware(s)
	if err != nil {
		return nil, err
	}
	volumes, err := g.qemuVolumes(s, skip)
	if err != nil {
		return nil, err
	}
	out = append(out, volumes...)
	for _, n := range s.Networks {
		out = append(out, Value{Key: n.Slot, Value: nicCreate(n)})
	}
	if h := s.Hardware; h != nil {
		for _, p := range h.PCIDevices {
			out = append(out, Value{Key: p.Slot, Value: pciValue(p)})
		}
	}
	out = append(out, qemuOptions(s.Options)...)
	return append(out, qemuCloudInitData(s.CloudInitData)...), nil
}

// qemuHardware is the guest's identity (name, description, tags) and its hardware keys up to the serial port.
func (g Desired) qemuHardware(s *manifest.VMSpec) (Values, error) {
	var out Values
	add := func(k, v string) { out = append(out, Value{Key: k, Value: v}) }
	add("name", g.Resource.PVEName())
	if s.PVEDescription != "" {
		add("description", s.PVEDescription)
	}
	add("tags", DesiredTagsIn(g.TagStyle, s.Tags, ""))
	add("cpu", cpuValue(s))
	if s.CPU.Cores > 0 {
		add("cores", itoa(s.CPU.Cores))
	}
	h := s.Hardware
	if h != nil && h.Sockets > 0 {
		add("sockets", itoa(h.Sockets))
	}
	if !s.Memory.IsZero() {
		mem, err := memoryMiB(s.Memory)
		if err != nil {
			return nil, err
		}
		add("memory", itoa(mem))
	}
	if h != nil {
		if h.NUMA != nil {
			add("numa", boolString(*h.NUMA))
		}
		if h.Machine != "" {
			add("machine", h.Machine)
		}
		if h.BIOS != "" {
			add("bios", h.BIOS)
		}
		if h.Display != "" {
			add("vga", h.Display)
		}
	}
	if hw := s.SCSIHW(); hw != "" {
		add("scsihw", hw)
	}
	if h != nil && h.Serial0 != "" {
		add("serial0", h.Serial0)
	}
	return out, nil
}

// qemuVolumes are the disks, the EFI and TPM state volumes, the cloud-init drive and the CD-ROM, leaving out
// the slots in skip.
func (g Desired) qemuVolumes(s *manifest.VMSpec, skip []string) (Values, error) {
	var out Values
	add := func(k, v string) { out = append(out, Value{Key: k, Value: v}) }
	for _, d := range s.Disks {
		if slices.Contains(skip, d.Interface) {
			continue
		}
		v, err := g.diskCreate(d)
		if err != nil {
			return nil, err
		}
		add(d.Interface, v)
	}
	h := s.Hardware
	if h == nil {
		return out, nil
	}
	if h.EFIDisk != nil && !slices.Contains(skip, "efidisk0") {
		v, err := efiCreate(h.EFIDisk)
		if err != nil {
			return nil, err
		}
		add("efidisk0", v)
	}
	if h.TPM != nil && !slices.Contains(skip, "tpmstate0") {
		add("tpmstate0", tpmCreate(s))
	}
	if s.CloudInitEnabled() && !slices.Contains(skip, manifest.CloudInitSlot) {
		add(manifest.CloudInitSlot, cloudInitCreate(h.CloudInit))
	}
	if h.CDROM != nil && !slices.Contains(skip, s.CDROMSlot()) {
		v, err := g.cdromValue(h.CDROM)
		if err != nil {
			return nil, err
		}
		add(s.CDROMSlot(), v)
	}
	return out, nil
}

// qemuOptions are the keys of spec.options that are set.
func qemuOptions(o *manifest.VMOptions) Values {
	if o == nil {
		return nil
	}
	var out Values
	add := func(k, v string) { out = append(out, Value{Key: k, Value: v}) }
	if o.OnBoot != nil {
		add("onboot", boolString(*o.OnBoot))
	}
	if o.Startup != "" {
		add("startup", o.Startup)
	}
	if o.Protection != nil {
		add("protection", boolString(*o.Protection))
	}
	if o.Agent != nil {
		add("agent", boolString(*o.Agent))
	}
	if o.ACPI != nil {
		add("acpi", boolString(*o.ACPI))
	}
	if o.Tablet != nil {
		add("tablet", boolString(*o.Tablet))
	}
	if len(o.Hotplug) > 0 {
		add("hotplug", strings.Join(o.Hotplug, ","))
	}
	if len(o.BootOrder) > 0 {
		add("boot", bootValue(o.BootOrder))
	}
	return out
}

// qemuCloudInitData are the cloud-init keys: user, SSH keys and password (as secret references where they
// are), DNS, and one ipconfig per NIC with an address.
func qemuCloudInitData(c *manifest.CloudInitData) Values {
	if c == nil {
		return nil
	}
	var out Values
	add := func(k, v string) { out = append(out, Value{Key: k, Value: v}) }
	if c.CIUser != "" {
		add("ciuser", c.CIUser)
	}
	if sshKeysOwned(c) {
		out = append(out, sshKeysValue(c))
	}
	if c.CIPasswordRef != "" {
		out = append(out, Value{Key: "cipassword", SecretRefs: []string{c.CIPasswordRef}})
	}
	if len(c.Nameservers) > 0 {
		add("nameserver", strings.Join(c.Nameservers, " "))
	}
	if len(c.SearchDomains) > 0 {
		add("searchdomain", strings.Join(c.SearchDomains, " "))
	}
	for _, ip := range ipconfigs(c) {
		add("ipconfig"+itoa(ip.NIC), ipconfigValue(ip))
	}
	return out
}

// ipconfigs are the owned ipconfig entries (those with an ip), by NIC number.
func ipconfigs(c *manifest.CloudInitData) []manifest.IPConfig {
	var out []manifest.IPConfig
	for _, ip := range c.IPConfigs {
		if ip.IP != "" {
			out = append(out, ip)
		}
	}
	slices.SortStableFunc(out, func(a, b manifest.IPConfig) int { return a.NIC - b.NIC })
	return out
}

// CloudInitIdentityKeys are the cloud-init keys a full clone inherits from its template and must not keep
// unless the clone declares them (besides every ipconfigN).
var CloudInitIdentityKeys = []string{"ciuser", "sshkeys", "cipassword", "cicustom", "nameserver", "searchdomain"}

// IsCloudInitIdentityKey reports whether a key is inherited cloud-init identity (including ipconfigN).
func IsCloudInitIdentityKey(k string) bool {
	return slices.Contains(CloudInitIdentityKeys, k) || isIndexed(k, "ipconfig")
}

// ownedIdentity reports whether the manifest owns an identity key.
func ownedIdentity(s *manifest.VMSpec, k string) bool {
	if _, ok := s.Extra[k]; ok {
		return true
	}
	c := s.CloudInitData
	if c == nil {
		return false
	}
	switch {
	case k == "ciuser":
		return c.CIUser != ""
	case k == "sshkeys":
		// ["*"] leaves the keys to PVE: they are neither written nor cleared.
		return len(c.SSHKeys) > 0 || len(c.SSHKeyRefs) > 0
	case k == "cipassword":
		return c.CIPasswordRef != ""
	case k == "nameserver":
		return len(c.Nameservers) > 0
	case k == "searchdomain":
		return len(c.SearchDomains) > 0
	case isIndexed(k, "ipconfig"):
		n, _ := strconv.Atoi(strings.TrimPrefix(k, "ipconfig"))
		return slices.ContainsFunc(ipconfigs(c), func(ip manifest.IPConfig) bool { return ip.NIC == n })
	}
	return false
}

// CloneIdentityDeletes lists the inherited cloud-init identity keys a clone must drop: those the template
// has (templateKeys) or that are always candidates, which the clone's manifest does not own. Sorted.
func CloneIdentityDeletes(g Desired, templateKeys []string) []string {
	s, err := g.vm()
	if err != nil {
		return nil
	}
	cands := slices.Clone(CloudInitIdentityKeys)
	for _, k := range templateKeys {
		if isIndexed(k, "ipconfig") && !slices.Contains(cands, k) {
			cands = append(cands, k)
		}
	}
	var out []string
	for _, k := range cands {
		if !ownedIdentity(s, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// isIndexed reports whether key is prefix<N> (N one or more digits).
func isIndexed(key, prefix string) bool {
	n, ok := strings.CutPrefix(key, prefix)
	return ok && n != "" && strings.Trim(n, "0123456789") == ""
}

// isDiskSlot reports whether a key is a qemu disk bus slot (ideN, sataN, scsiN, virtioN).
func isDiskSlot(k string) bool {
	return isIndexed(k, "scsi") || isIndexed(k, "virtio") || isIndexed(k, "sata") || isIndexed(k, "ide")
}

// machineMatches compares a declared machine with the live one: an unversioned i440fx or q35 matches any
// version of that machine type (PVE pins versions, e.g. for Windows guests).
func machineMatches(want, live string) bool {
	have := pveformat.ParseProps(live, "type").Value("type")
	if have == want {
		return true
	}
	switch want {
	case "i440fx":
		return have == "" || have == "pc" || strings.HasPrefix(have, "pc-i440fx-")
	case "q35":
		return strings.HasPrefix(have, "pc-q35-")
	}
	return false
}

// QEMU compares a VM's or TemplateVM's manifest with its live config (pending values applied) and returns
// the keys to write, the disks to grow and the anomalies. clone marks a VM created from a template: its
// inherited disks are not reported as live-only and its inherited cloud-init identity is cleared. template
// marks a live PVE template (its disks are base volumes and are never resized).
func QEMU(g Desired, live map[string]string, template bool) (Diff, error) {
	s, err := g.vm()
	if err != nil {
		return Diff{}, err
	}
	x := &differ{live: live, tagStyle: g.TagStyle}
	clone := s.Clone != ""
	x.scalar("name", "spec.pve-name", g.Resource.PVEName())
	x.description("spec.pve-description", s.PVEDescription)
	x.tags(s.Tags)
	if err := x.qemuHardware(s); err != nil {
		return Diff{}, err
	}
	if err := x.qemuVolumes(g, s, template, clone); err != nil {
		return Diff{}, err
	}
	x.qemuDevices(s)
	x.qemuOptions(s.Options)
	x.cloudInitData(g, s)
	x.extra(s.Extra, QEMUCreateOnly)
	if clone {
		x.clearIdentity(s)
	}
	x.holdGrowth()
	return x.d, nil
}

// qemuHardware compares the processor, memory and the hardware keys up to the SCSI controller. An absent
// count or size is not owned: PVE gives the guest its default (one core per socket, 512 MiB).
func (x *differ) qemuHardware(s *manifest.VMSpec) error {
	live := x.live
	x.qemuCPU(s)
	if s.CPU.Cores > 0 {
		x.intValue("cores", "spec.cpu.cores", int64(s.CPU.Cores), 1)
	}
	if !s.Memory.IsZero() {
		mem, err := memoryMiB(s.Memory)
		if err != nil {
			return err
		}
		haveMem := int64(512) // PVE's default
		if v, ok := live["memory"]; ok {
			haveMem, _ = Memory(v)
		}
		if haveMem != mem {
			x.setString("memory", "spec.memory", itoa(mem))
		}
	}
	if h := s.Hardware; h != nil {
		x.qemuBoard(h)
	}
	if hw := s.SCSIHW(); hw != "" {
		have := live["scsihw"]
		if have == "" {
			have = "lsi"
		}
		if have != hw {
			x.setString("scsihw", "spec.disks[].controller", hw)
		}
	}
	return nil
}

// qemuBoard compares sockets, NUMA, machine type, firmware, display and serial port.
func (x *differ) qemuBoard(h *manifest.Hardware) {
	live := x.live
	if h.Sockets > 0 {
		x.intValue("sockets", "spec.hardware.sockets", int64(h.Sockets), 1)
	}
	x.boolean("numa", "spec.hardware.numa", h.NUMA, false)
	if h.Machine != "" && !machineMatches(h.Machine, live["machine"]) {
		x.setString("machine", "spec.hardware.machine", h.Machine)
	}
	if h.BIOS != "" {
		have := live["bios"]
		if have == "" {
			have = "seabios"
		}
		if have != h.BIOS {
			x.setString("bios", "spec.hardware.bios", h.BIOS)
		}
	}
	if h.Display != "" {
		vga := pveformat.ParseProps(live["vga"], "type")
		if vga.Value("type") != h.Display {
			if _, ok := live["vga"]; ok {
				x.setString("vga", "spec.hardware.display", vga.With("type", h.Display).Canonical("type"))
			} else {
				x.setString("vga", "spec.hardware.display", h.Display)
			}
		}
	}
	if h.Serial0 != "" {
		x.scalar("serial0", "spec.hardware.serial0", h.Serial0)
	}
}

// qemuVolumes compares the declared disks, EFI and TPM state, cloud-init drive and CD-ROM, then reports the
// live volumes nobody declares (a clone keeps its template's).
func (x *differ) qemuVolumes(g Desired, s *manifest.VMSpec, template, clone bool) error {
	owned := map[string]bool{}
	for i, d := range s.Disks {
		owned[d.Interface] = true
		if err := x.qemuDisk(g, yamlIndex("spec.disks", i), d, template); err != nil {
			return err
		}
	}
	if h := s.Hardware; h != nil {
		if h.EFIDisk != nil {
			owned["efidisk0"] = true
			if err := x.efi(h.EFIDisk); err != nil {
				return err
			}
		}
		if h.TPM != nil {
			owned["tpmstate0"] = true
			x.tpm(s)
		}
		if s.CloudInitEnabled() {
			owned[manifest.CloudInitSlot] = true
			x.cloudInitDrive(h.CloudInit)
		}
		if h.CDROM != nil {
			owned[s.CDROMSlot()] = true
			if err := x.cdrom(g, s.CDROMSlot(), h.CDROM); err != nil {
				return err
			}
		}
	}
	x.liveOnlyDisks(owned, clone)
	return nil
}

// qemuDevices compares the declared NICs and PCI devices and reports the live ones nobody declares.
func (x *differ) qemuDevices(s *manifest.VMSpec) {
	declaredNICs := map[string]bool{}
	for i, n := range s.Networks {
		declaredNICs[n.Slot] = true
		x.qemuNIC(yamlIndex("spec.networks", i), n)
	}
	x.liveOnly("net", declaredNICs, "NIC")
	declaredPCI := map[string]bool{}
	if h := s.Hardware; h != nil {
		for i, p := range h.PCIDevices {
			declaredPCI[p.Slot] = true
			x.pci(yamlIndex("spec.hardware.pci-devices", i), p)
		}
	}
	x.liveOnly("hostpci", declaredPCI, "PCI device")
}

// DefaultCPUType is the processor type qemu-server runs a VM with when its config has no cpu key: kvm64, or
// cortex-a57 for an aarch64 VM (CPUConfig get_default_cpu_type).
func DefaultCPUType(arch string) string {
	if arch == "aarch64" {
		return "cortex-a57"
	}
	return "kvm64"
}

func (x *differ) qemuCPU(s *manifest.VMSpec) {
	var hidden *bool
	if s.Options != nil {
		hidden = s.Options.Hidden
	}
	live, ok := x.get("cpu")
	if !ok {
		// An absent key runs PVE's default type, which a manifest naming that type already matches.
		if s.CPU.Type != DefaultCPUType(x.live["arch"]) || manifest.IsTrue(hidden) {
			x.setString("cpu", "spec.cpu.type", cpuValue(s))
		}
		return
	}
	p := pveformat.ParseProps(live, "cputype")
	if p.Value("cputype") == s.CPU.Type && (hidden == nil || propBool(p, "hidden", false) == *hidden) {
		return
	}
	p = p.With("cputype", s.CPU.Type)
	if hidden != nil {
		p = p.With("hidden", boolString(*hidden))
	}
	x.setString("cpu", "spec.cpu.type", p.Canonical("cputype"))
}

func (x *differ) qemuDisk(g Desired, field string, d manifest.Disk, template bool) error {
	slot := d.Interface
	lv, ok := x.get(slot)
	dr := ParseDrive(lv)
	switch {
	case !ok || dr.IsEmpty():
		v, err := g.diskCreate(d)
		if err != nil {
			return err
		}
		x.setString(slot, field, v)
		return nil
	case dr.IsCloudInit():
		x.anomaly(slot, field, "%s holds a cloud-init drive on PVE (%s); ProxOps does not put a disk over it", slot, dr.File)
		return nil
	case dr.IsCDROM():
		x.anomaly(slot, field, "%s holds a CD/DVD drive on PVE (%s); ProxOps does not replace it with a disk", slot, dr.File)
		return nil
	}
	if st := dr.Storage(); st != d.Storage {
		x.volumeMismatch = true
		x.anomaly(slot, field, "disk %s is on storage %s on PVE, the manifest says %s; ProxOps never moves or recreates a disk", slot, st, d.Storage)
		return nil
	}
	if d.Image == "" {
		want, err := d.Size.Bytes()
		if err != nil {
			return fmt.Errorf("disk %s: %w", slot, err)
		}
		have, known := dr.Size()
		x.sizeCheck(slot, field, lv, want, have, known, template)
	}
	if diskOptionsDiffer(dr.Props, d) {
		dr.Props = diskOptions(dr.Props, d)
		x.setString(slot, field, dr.String())
	}
	return nil
}

// diskOptionsDiffer compares the owned disk tokens; an absent token holds PVE's default (iothread and ssd
// off, discard ignore; aio has no fixed default, so a declared aio is written once when absent).
func diskOptionsDiffer(p pveformat.Props, d manifest.Disk) bool {
	if d.IOThread != nil && propBool(p, "iothread", false) != *d.IOThread {
		return true
	}
	if d.Discard != "" {
		have := p.Value("discard")
		if have == "" {
			have = "ignore"
		}
		if have != d.Discard {
			return true
		}
	}
	if d.SSD != nil && propBool(p, "ssd", false) != *d.SSD {
		return true
	}
	return d.AIO != "" && p.Value("aio") != d.AIO
}

func (x *differ) efi(e *manifest.EFIDisk) error {
	const field = "spec.hardware.efi-disk"
	lv, ok := x.get("efidisk0")
	dr := ParseDrive(lv)
	if !ok || dr.IsEmpty() {
		v, err := efiCreate(e)
		if err != nil {
			return err
		}
		x.setString("efidisk0", field, v)
		return nil
	}
	if st := dr.Storage(); st != e.Storage {
		x.anomaly("efidisk0", field, "the EFI disk is on storage %s on PVE, the manifest says %s; ProxOps never moves it", st, e.Storage)
		return nil
	}
	typ := dr.Props.Value("efitype")
	if typ == "" {
		typ = "2m"
	}
	keys := propBool(dr.Props, "pre-enrolled-keys", false)
	if (e.Template != "" && typ != strings.ToLower(e.Template)) || (e.SecureBoot != "" && keys != (e.SecureBoot == "enabled")) {
		// The live form keeps the volume, its size and every token ProxOps does not own (ms-cert).
		x.setString("efidisk0", field, efiOptions(dr, e).String())
	}
	return nil
}

func (x *differ) tpm(s *manifest.VMSpec) {
	const field = "spec.hardware.tpm"
	lv, ok := x.get("tpmstate0")
	dr := ParseDrive(lv)
	if !ok || dr.IsEmpty() {
		x.setString("tpmstate0", field, tpmCreate(s))
		return
	}
	have := dr.Props.Value("version")
	if have == "" {
		have = "v1.2"
	}
	if want := s.Hardware.TPM.VersionOrDefault(); have != want {
		x.anomaly("tpmstate0", field+".version", "the TPM state is version %s on PVE, the manifest says %s; changing it means recreating the TPM state, which ProxOps never does", have, want)
	}
}

func (x *differ) cloudInitDrive(c *manifest.CloudInitDrive) {
	const field, slot = "spec.hardware.cloud-init", manifest.CloudInitSlot
	for _, k := range x.keys() {
		if k != slot && isDiskSlot(k) && ParseDrive(x.live[k]).IsCloudInit() {
			x.anomaly(k, field, "the cloud-init drive is on %s on PVE; ProxOps manages it on %s only and does not add a second one", k, slot)
			return
		}
	}
	lv, ok := x.get(slot)
	dr := ParseDrive(lv)
	switch {
	case !ok || dr.IsEmpty() || (dr.IsCDROM() && !dr.IsCloudInit()):
		x.setString(slot, field, cloudInitCreate(c))
	case dr.IsCloudInit():
		if st := dr.Storage(); st != c.Storage {
			x.anomaly(slot, field+".storage", "the cloud-init drive is on storage %s on PVE, the manifest says %s; ProxOps never rewrites a live cloud-init drive", st, c.Storage)
			return
		}
		want, err := c.SizeOrDefault().Bytes()
		if have, known := dr.Size(); known && err == nil && have != want {
			x.anomaly(slot, field+".size", "the cloud-init drive is %s on PVE, the manifest says %s; ProxOps never rewrites a live cloud-init drive", pveformat.FormatSize(have), c.SizeOrDefault())
		}
	default:
		x.anomaly(slot, field, "%s holds a disk on PVE (%s); ProxOps does not put the cloud-init drive over it", slot, dr.File)
	}
}

func (x *differ) cdrom(g Desired, slot string, c *manifest.CDROM) error {
	const field = "spec.hardware.cdrom"
	want, err := g.cdromValue(c)
	if err != nil {
		return err
	}
	lv, ok := x.get(slot)
	if !ok {
		x.setString(slot, field, want)
		return nil
	}
	dr := ParseDrive(lv)
	switch {
	case dr.IsCloudInit():
		x.anomaly(slot, field, "%s holds a cloud-init drive on PVE; ProxOps does not put the CD/DVD drive over it", slot)
		return nil
	case !dr.IsCDROM() && !dr.IsEmpty():
		x.anomaly(slot, field, "%s holds a disk on PVE (%s); ProxOps does not replace it with a CD/DVD drive", slot, dr.File)
		return nil
	}
	w := ParseDrive(want)
	if dr.File != w.File || dr.Media() != w.Media() {
		x.setString(slot, field, want)
	}
	return nil
}

// liveOnlyDisks reports volumes in disk slots the manifest does not declare. A clone's inherited disks are
// expected; CD drives and empty slots are not disks; a cloud-init drive is not a data disk.
func (x *differ) liveOnlyDisks(owned map[string]bool, clone bool) {
	if clone {
		return
	}
	for _, k := range x.keys() {
		if !isDiskSlot(k) || owned[k] {
			continue
		}
		dr := ParseDrive(x.live[k])
		if dr.IsEmpty() || dr.IsCDROM() || dr.IsCloudInit() {
			continue
		}
		x.anomaly(k, "spec.disks", "live-only disk slot %s (%s); ProxOps will not automatically remove it", k, dr.File)
	}
}

// liveOnly reports live prefixN keys the manifest does not declare.
func (x *differ) liveOnly(prefix string, declared map[string]bool, what string) {
	for _, k := range x.keys() {
		if isIndexed(k, prefix) && !declared[k] {
			x.anomaly(k, liveOnlyField(prefix), "live-only %s %s (%s); ProxOps will not automatically remove it", what, k, x.live[k])
		}
	}
}

func liveOnlyField(prefix string) string {
	switch prefix {
	case "net":
		return "spec.networks"
	case "hostpci":
		return "spec.hardware.pci-devices"
	case "mp":
		return "spec.mount-points"
	}
	return "spec"
}

func (x *differ) qemuNIC(field string, n manifest.NIC) {
	lv, ok := x.get(n.Slot)
	if !ok {
		x.setString(n.Slot, field, nicCreate(n))
		return
	}
	live := ParseNIC(lv)
	if nicMatches(live, n) {
		return
	}
	want := nicSettings(live, n)
	want.Model = n.ModelOrDefault()
	if n.MAC != "" {
		want.MAC = strings.ToLower(n.MAC)
	}
	// PVE reads vlan= as an alias of tag=; it is dropped in favour of tag=.
	if v, ok := want.Props.Get("vlan"); ok {
		want.Props = want.Props.Without("vlan")
		if n.VLAN == nil {
			want.Props = want.Props.With("tag", v)
		}
	}
	x.setString(n.Slot, field, want.String())
}

func nicMatches(live NIC, n manifest.NIC) bool {
	if live.Model != n.ModelOrDefault() || live.Props.Value("bridge") != n.Bridge {
		return false
	}
	if n.MAC != "" && !strings.EqualFold(live.MAC, n.MAC) {
		return false
	}
	tag, ok := live.Props.Get("tag")
	if !ok {
		tag = live.Props.Value("vlan")
	}
	if n.VLAN != nil {
		if want := *n.VLAN; (want == 0 && tag != "") || (want > 0 && tag != itoa(want)) {
			return false
		}
	}
	if n.RateLimit != nil {
		rate, has := live.Props.Get("rate")
		f, _ := Float(rate)
		if want := *n.RateLimit; (want == 0 && has) || (want > 0 && f != float64(want)) {
			return false
		}
	}
	return n.Firewall == nil || propBool(live.Props, "firewall", false) == *n.Firewall
}

func (x *differ) pci(field string, p manifest.PCIDevice) {
	lv, ok := x.get(p.Slot)
	if !ok {
		x.setString(p.Slot, field, pciValue(p))
		return
	}
	live := ParsePCI(lv)
	if NormalizePCIAddress(live.Host) == NormalizePCIAddress(p.Device) && (p.PCIe == nil || propBool(live.Props, "pcie", false) == *p.PCIe) {
		return
	}
	live.Host = strings.ToLower(p.Device)
	if p.PCIe != nil {
		live.Props = live.Props.With("pcie", boolString(*p.PCIe))
	}
	// Tokens ProxOps does not model (x-vga, rombar, mdev) are kept.
	x.setString(p.Slot, field, live.String())
}

func (x *differ) qemuOptions(o *manifest.VMOptions) {
	if o == nil {
		return
	}
	x.boolean("onboot", "spec.options.onboot", o.OnBoot, false)
	if o.Startup != "" {
		x.scalar("startup", "spec.options.startup", o.Startup)
	}
	x.boolean("protection", "spec.options.protection", o.Protection, false)
	if o.Agent != nil {
		lv, ok := x.get("agent")
		p := pveformat.ParseProps(lv, "enabled")
		if !ok {
			x.setString("agent", "spec.options.agent", boolString(*o.Agent))
		} else if propBool(p, "enabled", false) != *o.Agent {
			x.setString("agent", "spec.options.agent", p.With("enabled", boolString(*o.Agent)).Canonical("enabled"))
		}
	}
	x.boolean("acpi", "spec.options.acpi", o.ACPI, true)
	x.boolean("tablet", "spec.options.tablet", o.Tablet, true)
	if len(o.Hotplug) > 0 {
		want := strings.Join(o.Hotplug, ",")
		if have, ok := x.get("hotplug"); !ok || !sameTokenSet(have, want) {
			x.setString("hotplug", "spec.options.hotplug", want)
		}
	}
	if len(o.BootOrder) > 0 {
		have := pveformat.ParseProps(x.live["boot"], "legacy").Value("order")
		if have != strings.Join(o.BootOrder, ";") {
			x.setString("boot", "spec.options.boot-order", bootValue(o.BootOrder))
		}
	}
}

func (x *differ) cloudInitData(g Desired, s *manifest.VMSpec) {
	c := s.CloudInitData
	if c == nil {
		return
	}
	const p = "spec.cloud-init-data"
	if c.CIUser != "" {
		x.scalar("ciuser", p+".ci-user", c.CIUser)
	}
	if sshKeysOwned(c) {
		have, ok := x.get("sshkeys")
		if !ok || LiveSSHKeysDigest(have) != g.sshKeysDigest(c) {
			field := p + ".ssh-keys"
			if len(c.SSHKeyRefs) > 0 {
				field = p + ".ssh-key-refs"
			}
			x.set("sshkeys", field, sshKeysValue(c))
		}
	}
	if c.CIPasswordRef != "" {
		// PVE shows only a mask; writing it back would overwrite the password. Written once, never compared.
		if _, ok := x.get("cipassword"); !ok {
			x.set("cipassword", p+".ci-password-ref", Value{SecretRefs: []string{c.CIPasswordRef}})
		}
	}
	x.wordSet("nameserver", p+".nameservers", c.Nameservers)
	x.wordSet("searchdomain", p+".search-domains", c.SearchDomains)
	for i, ip := range c.IPConfigs {
		if ip.IP == "" {
			continue
		}
		key := "ipconfig" + itoa(ip.NIC)
		field := yamlIndex(p+".ipconfigs", i)
		lv, ok := x.get(key)
		if !ok {
			x.setString(key, field, ipconfigValue(ip))
			continue
		}
		live := pveformat.ParseProps(lv, "")
		if live.Value("ip") == ip.IP && live.Value("gw") == ip.Gateway {
			continue
		}
		live = live.With("ip", ip.IP)
		if ip.Gateway != "" {
			live = live.With("gw", ip.Gateway)
		} else {
			live = live.Without("gw")
		}
		x.setString(key, field, live.Canonical("", "ip", "gw"))
	}
}

// clearIdentity deletes the cloud-init identity a clone inherited and its manifest does not own.
func (x *differ) clearIdentity(s *manifest.VMSpec) {
	for _, k := range x.keys() {
		if !IsCloudInitIdentityKey(k) || ownedIdentity(s, k) {
			continue
		}
		if v := x.live[k]; v == "" || v == "none" {
			continue
		}
		x.del(k, "spec.cloud-init-data")
	}
}

func yamlIndex(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// VolumeSlots lists the keys of a live qemu config that hold volumes (disks, the cloud-init drive, the EFI
// disk, the TPM state), sorted: what a full clone inherits.
func VolumeSlots(config map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(config)) {
		switch {
		case k == "efidisk0" || k == "tpmstate0":
			if !ParseDrive(config[k]).IsEmpty() {
				out = append(out, k)
			}
		case isDiskSlot(k):
			if d := ParseDrive(config[k]); d.IsVolume() || d.IsCloudInit() {
				out = append(out, k)
			}
		}
	}
	return out
}

// DesiredVolumeSlots lists the volume slots a VM or TemplateVM manifest creates, sorted.
func DesiredVolumeSlots(s *manifest.VMSpec) []string {
	var out []string
	for _, d := range s.Disks {
		out = append(out, d.Interface)
	}
	if h := s.Hardware; h != nil {
		if h.EFIDisk != nil {
			out = append(out, "efidisk0")
		}
		if h.TPM != nil {
			out = append(out, "tpmstate0")
		}
		if s.CloudInitEnabled() {
			out = append(out, manifest.CloudInitSlot)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
