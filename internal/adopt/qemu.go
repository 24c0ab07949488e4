package adopt

import (
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvewire"
)

// diskBuses are the qemu disk buses, in the order adopted disks are listed.
var diskBuses = []string{"scsi", "virtio", "sata", "ide"}

// machineRE is what spec.hardware.machine accepts besides i440fx and q35.
var machineRE = regexp.MustCompile(`^(pc(-i440fx)?-\d+\.\d+(\+pve\d+)?|pc-q35-\d+\.\d+(\+pve\d+)?)$`)

// machineVersionRE finds the version of a machine type.
var machineVersionRE = regexp.MustCompile(`^pc(?:-i440fx|-q35)?-(\d+)\.(\d+)`)

// pciRE is what spec.hardware.pci-devices[].device accepts.
var pciRE = regexp.MustCompile(`^([0-9a-f]{2,5}:)?[0-9a-f]{2}:[0-9a-f]{2}(\.[0-7])?$`)

const cdromNote = "the model manages one CD/DVD drive, on ide2 (ide3 beside a cloud-init drive); ProxOps leaves this one as PVE has it"

// qemu builds a VM or TemplateVM manifest from a qemu guest's config.
func (c *guest) qemu() *manifest.Resource {
	s := &manifest.VMSpec{Node: c.g.Node, VMID: c.g.VMID, State: c.state(), Tags: c.tags(),
		PVEDescription: c.description()}
	if live, ok := liveName(c.g); ok && live != c.name {
		s.PVEName = live
	}
	c.cpu(s)
	s.CPU.Cores = c.cores()
	s.Memory = c.memory()
	h := &manifest.Hardware{}
	c.machine(h)
	if v, ok := c.cfg["bios"]; ok {
		h.BIOS = v
	}
	if v, ok := c.cfg["vga"]; ok {
		h.Display = pveformat.ParseProps(v, "type").Value("type")
	}
	if v, ok := c.cfg["sockets"]; ok {
		if n, ok := pvewire.Int(v); ok && n > 0 {
			h.Sockets = int(n)
		} else {
			c.incomplete("sockets", "sockets %q is not a positive number", v)
		}
	}
	h.NUMA = boolPtr(c.cfg["numa"], c.has("numa"))
	if v, ok := c.cfg["serial0"]; ok && v != "none" {
		h.Serial0 = v
	}
	c.drives(s, h)
	c.efi(h)
	c.tpm(s, h)
	c.pci(h)
	c.refuseMachine()
	c.refuseUSB()
	s.Networks = c.nics()
	s.Options = c.qemuOptions(s)
	s.CloudInitData = c.cloudInitData()
	if h.Machine != "" || h.BIOS != "" || h.Display != "" || h.Sockets != 0 || h.NUMA != nil || h.Serial0 != "" ||
		h.TPM != nil || h.EFIDisk != nil || h.CloudInit != nil || h.CDROM != nil || len(h.PCIDevices) > 0 {
		s.Hardware = h
	}
	return &manifest.Resource{APIVersion: manifest.APIVersion, Kind: c.kind, Metadata: manifest.Metadata{Name: c.name}, Spec: s}
}

// cpu reads the processor type and the hidden flag; an absent cpu key is PVE's default type.
func (c *guest) cpu(s *manifest.VMSpec) {
	v, ok := c.cfg["cpu"]
	if !ok {
		s.CPU.Type = pvewire.DefaultCPUType(c.cfg["arch"])
		return
	}
	p := pveformat.ParseProps(v, "cputype")
	s.CPU.Type = p.Value("cputype")
	if hv, ok := p.Get("hidden"); ok {
		if s.Options == nil {
			s.Options = &manifest.VMOptions{}
		}
		s.Options.Hidden = manifest.Bool(pvewire.Bool(hv))
	}
}

// machine reads the machine type: pc is i440fx, a versioned type is kept as it is.
func (c *guest) machine(h *manifest.Hardware) {
	v, ok := c.cfg["machine"]
	if !ok {
		return
	}
	t := pveformat.ParseProps(v, "type").Value("type")
	switch {
	case t == "":
	case t == "pc" || t == "i440fx":
		h.Machine = "i440fx"
	case t == "q35":
		h.Machine = "q35"
	case machineRE.MatchString(t):
		h.Machine = t
	default:
		c.gap("machine", v, "machine type "+t+" is not one the model covers (i440fx, q35, or a versioned pc-i440fx-X.Y / pc-q35-X.Y); ProxOps leaves it as PVE has it")
	}
}

// drives adopts the disk slots: data disks, the cloud-init drive on ide2 and the CD/DVD drive on ide2 (ide3
// beside a cloud-init drive). Other CD/DVD drives and cloud-init drives are gaps.
func (c *guest) drives(s *manifest.VMSpec, h *manifest.Hardware) {
	slots := indexedKeys(c.cfg, diskBuses...)
	if ci, ok := c.cfg[manifest.CloudInitSlot]; ok && pvewire.ParseDrive(ci).IsCloudInit() {
		dr := pvewire.ParseDrive(ci)
		ciDrive := &manifest.CloudInitDrive{Enabled: manifest.Bool(true), Storage: dr.Storage()}
		if b, ok := dr.Size(); ok {
			ciDrive.Size = manifest.FormatBytes(b)
		}
		h.CloudInit = ciDrive
	}
	cdSlot := "ide2"
	if h.CloudInit != nil {
		cdSlot = "ide3"
	}
	for _, slot := range slots {
		v := c.cfg[slot]
		dr := pvewire.ParseDrive(v)
		switch {
		case dr.IsCloudInit():
			if slot != manifest.CloudInitSlot {
				c.gap(slot, v, "the model manages the cloud-init drive on ide2 only; ProxOps leaves this one as PVE has it")
			}
		case dr.IsCDROM():
			if slot == cdSlot {
				c.cdrom(h, slot, dr, v)
			} else if !dr.IsEmpty() {
				c.gap(slot, v, cdromNote)
			}
		case dr.IsEmpty():
		default:
			c.disk(s, slot, dr, v)
		}
	}
	if hw, ok := c.cfg["scsihw"]; ok && hw != "" && len(s.Disks) > 0 {
		s.Disks[0].Controller = hw
	}
}

// cdrom adopts the CD/DVD drive: empty, or an ISO a manifest places on the guest's node.
func (c *guest) cdrom(h *manifest.Hardware, slot string, dr pvewire.Drive, v string) {
	if dr.IsEmpty() {
		h.CDROM = &manifest.CDROM{ISO: manifest.CDROMNone}
		return
	}
	name, ok := c.r.artifacts[artifactKey{kind: manifest.KindISO, node: c.g.Node, volid: dr.File}]
	if !ok {
		c.gap(slot, v, "the ISO is not a file adoption found on a storage of "+c.g.Node+" (or a physical drive); ProxOps leaves the drive as PVE has it")
		return
	}
	h.CDROM = &manifest.CDROM{ISO: name}
}

// isoVolume reports whether a volume id names an ISO image (<storage>:iso/<file>).
func isoVolume(volid string) bool {
	_, rest, ok := strings.Cut(volid, ":")
	return ok && strings.HasPrefix(rest, "iso/")
}

// disk adopts one data disk.
func (c *guest) disk(s *manifest.VMSpec, slot string, dr pvewire.Drive, v string) {
	if isoVolume(dr.File) && !dr.Props.Has("media") {
		c.refuse("%s: explicit media parameter is required for iso images", slot)
		return
	}
	storage := dr.Storage()
	if storage == "" {
		c.gap(slot, v, "a pass-through disk or file path is not a storage volume the model covers; ProxOps leaves it as PVE has it")
		return
	}
	c.storageHolds(slot, storage, diskContent(dr.File))
	d := manifest.Disk{Storage: storage, Interface: slot}
	token, hasToken := dr.Size()
	if b, ok := c.size(dr.File, token, hasToken); ok {
		d.Size = manifest.FormatBytes(b)
	} else {
		c.incompleteField("spec.disks", "disk %s (%s) has no size= and the storage listing of %s does not show it: set its size", slot, dr.File, storage)
		d.Size = ""
	}
	d.IOThread = boolPtr(dr.Props.Get("iothread"))
	if v, ok := dr.Props.Get("discard"); ok {
		d.Discard = v
	}
	if v, ok := dr.Props.Get("ssd"); ok {
		if strings.HasPrefix(slot, "virtio") {
			c.gap(slot+".ssd", v, "ssd emulation is not modelled on virtio disks; ProxOps keeps it as PVE has it")
		} else {
			d.SSD = manifest.Bool(pvewire.Bool(v))
		}
	}
	if v, ok := dr.Props.Get("aio"); ok {
		d.AIO = v
	}
	s.Disks = append(s.Disks, d)
}

// diskContent is the content type a disk's storage must hold: images, or iso for an ISO attached as a disk.
func diskContent(volid string) string {
	if isoVolume(volid) {
		return "iso"
	}
	return "images"
}

// stateDisk reads a state volume (efidisk0, tpmstate0) to adopt: its drive and storage, which must hold
// images; false when the slot is empty, or when the volume lies outside a storage (what, as "an EFI
// disk", is then a gap).
func (c *guest) stateDisk(key, what string) (pvewire.Drive, string, bool) {
	v, ok := c.cfg[key]
	if !ok {
		return pvewire.Drive{}, "", false
	}
	dr := pvewire.ParseDrive(v)
	if dr.IsEmpty() {
		return pvewire.Drive{}, "", false
	}
	storage := dr.Storage()
	if storage == "" {
		c.gap(key, v, what+" outside a storage is not modelled; ProxOps leaves it as PVE has it")
		return pvewire.Drive{}, "", false
	}
	c.storageHolds(key, storage, "images")
	return dr, storage, true
}

// efi adopts the EFI vars disk: storage, size (reported or listed; else PVE's default applies at create),
// type and pre-enrolled keys as reported.
func (c *guest) efi(h *manifest.Hardware) {
	dr, storage, ok := c.stateDisk("efidisk0", "an EFI disk")
	if !ok {
		return
	}
	e := &manifest.EFIDisk{Storage: storage}
	token, hasToken := dr.Size()
	if b, ok := c.size(dr.File, token, hasToken); ok {
		e.Size = manifest.FormatBytes(b)
	}
	if t, ok := dr.Props.Get("efitype"); ok {
		e.Template = t
	}
	if k, ok := dr.Props.Get("pre-enrolled-keys"); ok {
		e.SecureBoot = "disabled"
		if pvewire.Bool(k) {
			e.SecureBoot = "enabled"
		}
	}
	h.EFIDisk = e
}

// tpm adopts the TPM state: its version (PVE's default v1.2 when not reported) and its storage when that
// is not the one ProxOps would pick.
func (c *guest) tpm(s *manifest.VMSpec, h *manifest.Hardware) {
	dr, storage, ok := c.stateDisk("tpmstate0", "a TPM state")
	if !ok {
		return
	}
	version := dr.Props.Value("version")
	if version == "" {
		version = "v1.2"
	}
	h.TPM = &manifest.TPM{Version: version}
	probe := *s
	probe.Hardware = h
	if probe.TPMStorage() != storage {
		h.TPM.Storage = storage
	}
}

// pci adopts the PCI devices given by address; mapped devices and address lists are gaps.
func (c *guest) pci(h *manifest.Hardware) {
	for _, slot := range indexedKeys(c.cfg, "hostpci") {
		v := c.cfg[slot]
		p := pvewire.ParsePCI(v)
		host := strings.ToLower(p.Host)
		if host == "" || !pciRE.MatchString(host) {
			c.gap(slot, v, "a mapped PCI device or a list of addresses is not modelled; ProxOps leaves it as PVE has it")
			continue
		}
		dev := manifest.PCIDevice{Slot: slot, Device: host}
		dev.PCIe = boolPtr(p.Props.Get("pcie"))
		h.PCIDevices = append(h.PCIDevices, dev)
	}
}

// nics adopts the network devices; the MAC is never pinned.
func (c *guest) nics() []manifest.NIC {
	var out []manifest.NIC
	for _, slot := range indexedKeys(c.cfg, "net") {
		v := c.cfg[slot]
		n := pvewire.ParseNIC(v)
		nic := manifest.NIC{Model: n.Model, Bridge: n.Props.Value("bridge"), Slot: slot}
		tag, ok := n.Props.Get("tag")
		if !ok {
			tag, ok = n.Props.Get("vlan")
		}
		if ok {
			if t, err := strconv.Atoi(tag); err == nil {
				nic.VLAN = manifest.Int(t)
			}
		}
		c.rate(slot, n.Props, &nic.RateLimit)
		nic.Firewall = boolPtr(n.Props.Get("firewall"))
		out = append(out, nic)
	}
	return out
}

// rate adopts a NIC's rate limit when it is a whole number of MB/s.
func (c *guest) rate(slot string, p pveformat.Props, into **int) {
	v, ok := p.Get("rate")
	if !ok {
		return
	}
	f, ok := pvewire.Float(v)
	if !ok || f != float64(int(f)) || f < 0 {
		c.gap(slot+".rate", v, "a rate limit that is not a whole number of MB/s is not modelled; ProxOps keeps it as PVE has it")
		return
	}
	*into = manifest.Int(int(f))
}

// qemuOptions adopts the options as reported (booleans tri-state: an explicit 0 stays false).
func (c *guest) qemuOptions(s *manifest.VMSpec) *manifest.VMOptions {
	o := s.Options
	if o == nil {
		o = &manifest.VMOptions{}
	}
	o.OnBoot = boolPtr(c.cfg["onboot"], c.has("onboot"))
	o.Protection = boolPtr(c.cfg["protection"], c.has("protection"))
	o.ACPI = boolPtr(c.cfg["acpi"], c.has("acpi"))
	o.Tablet = boolPtr(c.cfg["tablet"], c.has("tablet"))
	if v, ok := c.cfg["agent"]; ok {
		p := pveformat.ParseProps(v, "enabled")
		o.Agent = boolPtr(p.Get("enabled"))
	}
	if v, ok := c.cfg["startup"]; ok && v != "" {
		o.Startup = v
	}
	if v, ok := c.cfg["hotplug"]; ok && v != "" {
		o.Hotplug = strings.Split(v, ",")
	}
	if v, ok := c.cfg["boot"]; ok {
		if order := pveformat.ParseProps(v, "legacy").Value("order"); order != "" {
			o.BootOrder = strings.Split(order, ";")
		}
	}
	if o.OnBoot == nil && o.Protection == nil && o.ACPI == nil && o.Tablet == nil && o.Agent == nil && o.Hidden == nil &&
		o.Startup == "" && len(o.Hotplug) == 0 && len(o.BootOrder) == 0 {
		return nil
	}
	return o
}

// cloudInitData adopts the cloud-init settings: user, DNS and static addresses as reported; SSH keys as
// ssh-key-refs when every key is in the secrets file, else left to PVE; a password only counted.
func (c *guest) cloudInitData() *manifest.CloudInitData {
	d := &manifest.CloudInitData{}
	if v, ok := c.cfg["ciuser"]; ok && v != "" {
		d.CIUser = v
	}
	if v, ok := c.cfg["nameserver"]; ok {
		d.Nameservers = strings.Fields(v)
	}
	if v, ok := c.cfg["searchdomain"]; ok {
		d.SearchDomains = strings.Fields(v)
	}
	for _, key := range indexedKeys(c.cfg, "ipconfig") {
		v := c.cfg[key]
		p := pveformat.ParseProps(v, "")
		ip, gw := p.Value("ip"), p.Value("gw")
		if _, err := netip.ParsePrefix(ip); err != nil {
			if ip != "" {
				c.gap(key+".ip", ip, "a DHCP or other non-static cloud-init address is not modelled; ProxOps leaves it as PVE has it")
			}
			continue
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(key, "ipconfig"))
		d.IPConfigs = append(d.IPConfigs, manifest.IPConfig{NIC: n, IP: ip, Gateway: gw})
	}
	if v, ok := c.cfg["sshkeys"]; ok && v != "" {
		digest := pvewire.LiveSSHKeysDigest(v)
		c.r.res.Census.SSHKeyGuests++
		c.r.ciDigests[digest] = true
		if refs := c.r.keys.match(digest); len(refs) > 0 {
			d.SSHKeyRefs = refs
			c.sshDigest = digest
			c.r.res.Census.SSHKeyRefs++
		} else {
			d.SSHKeys = []string{manifest.SSHKeysPVEOwned}
			c.r.res.Census.SSHKeysPVE++
		}
	}
	if v, ok := c.cfg["cipassword"]; ok && v != "" {
		c.r.res.Census.Passwords++
		c.gap("cipassword", pvewire.Redacted, "a cloud-init password is never adopted; PVE keeps it (declare ci-password-ref to let ProxOps own it)")
	}
	if d.CIUser == "" && len(d.Nameservers) == 0 && len(d.SearchDomains) == 0 && len(d.IPConfigs) == 0 &&
		len(d.SSHKeys) == 0 && len(d.SSHKeyRefs) == 0 {
		return nil
	}
	return d
}

// refuseMachine finds machine settings PVE refuses at start.
func (c *guest) refuseMachine() {
	v, ok := c.cfg["machine"]
	if !ok {
		return
	}
	p := pveformat.ParseProps(v, "type")
	t := p.Value("type")
	q35 := t == "q35" || strings.HasPrefix(t, "pc-q35-")
	viommu, hasIOMMU := p.Get("viommu")
	if hasIOMMU && viommu == "intel" && !q35 {
		c.refuse("machine: to use Intel vIOMMU please set the machine type to q35")
	}
	if p.Has("aw-bits") && !hasIOMMU {
		c.refuse("machine: cannot set aw-bits if no vIOMMU is configured")
	}
}

// refuseUSB finds USB ports PVE cannot give the guest: usb5 and above need the qemu-xhci controller, which
// needs machine version 7.1 or newer and a Linux or Windows 8+ OS type.
func (c *guest) refuseUSB() {
	for _, key := range indexedKeys(c.cfg, "usb") {
		n, _ := strconv.Atoi(strings.TrimPrefix(key, "usb"))
		if n <= 4 {
			continue
		}
		if !c.machineAtLeast(7, 1) || !slices.Contains([]string{"l26", "win8", "win10", "win11"}, c.ostype()) {
			c.refuse("using %s is only possible with machine type >= 7.1 and ostype l26 or windows > 7", key)
		}
	}
}

// ostype is the guest's OS type (PVE's default: other).
func (c *guest) ostype() string {
	if v, ok := c.cfg["ostype"]; ok {
		return v
	}
	return "other"
}

// machineAtLeast reports whether the machine version is at least major.minor; an unversioned machine runs
// the node's newest.
func (c *guest) machineAtLeast(major, minor int) bool {
	t := pveformat.ParseProps(c.cfg["machine"], "type").Value("type")
	m := machineVersionRE.FindStringSubmatch(t)
	if m == nil {
		return true
	}
	maj, _ := strconv.Atoi(m[1])
	mnr, _ := strconv.Atoi(m[2])
	return maj > major || maj == major && mnr >= minor
}
