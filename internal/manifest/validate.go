package manifest

import (
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/yamldecode"
)

var (
	// nameRE is the metadata.name grammar: lower-case letters and digits, single hyphens between them.
	nameRE = regexp.MustCompile(`^[a-z0-9](-?[a-z0-9])*$`)
	// storageRE is PVE's storage id format.
	storageRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9\-_.]*[a-zA-Z0-9]$`)
	// dnsNameRE is PVE's dns-name format (qemu name, lxc hostname).
	dnsNameRE = regexp.MustCompile(`^(([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)\.)*([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)$`)
	// tagRE is PVE's tag format.
	tagRE = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9_\-+.]*$`)
	// filenameRE is the artifact file name grammar.
	filenameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// secretNameRE is the grammar of cloud-init secret names.
	secretNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	// macRE is a unicast-or-not MAC address.
	macRE = regexp.MustCompile(`^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$`)
	// pciRE is a PCI address, [domain:]bus:device[.function], lower case.
	pciRE = regexp.MustCompile(`^([0-9a-f]{2,5}:)?[0-9a-f]{2}:[0-9a-f]{2}(\.[0-7])?$`)
	// slotRE splits a slot key into bus and number.
	slotRE = regexp.MustCompile(`^([a-z]+)(0|[1-9][0-9]*)$`)
	// startupRE is PVE's startup format.
	startupRE = regexp.MustCompile(`^((order=)?\d+)?(,?(up|down)=\d+)*$`)
	// hexRE is a hex string.
	hexRE = regexp.MustCompile(`^[0-9a-fA-F]+$`)
)

const (
	minVMID = 100
	maxVMID = 999999999
)

// diskBuses are the VM disk buses and their highest slot number.
var diskBuses = map[string]int{"scsi": 30, "virtio": 15, "sata": 5, "ide": 3}

var (
	nicModels = []string{"e1000", "e1000-82540em", "e1000-82544gc", "e1000-82545em", "e1000e", "i82551", "i82557b",
		"i82559er", "ne2k_isa", "ne2k_pci", "pcnet", "rtl8139", "virtio", "vmxnet3"}
	scsiControllers = []string{"lsi", "lsi53c810", "virtio-scsi-pci", "virtio-scsi-single", "megasas", "pvscsi"}
	hotplugValues   = []string{"network", "disk", "cpu", "memory", "usb", "cloudinit", "0", "1"}
	archs           = []string{"amd64", "i386", "arm64", "armhf", "riscv32", "riscv64"}
	checksumLengths = map[string]int{"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}
	// systemDirs may not be bind-mounted into a container.
	systemDirs = []string{"/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root",
		"/run", "/sbin", "/srv", "/sys", "/usr", "/var"}
	artifactExtensions = map[Kind][]string{
		KindISO:        {".iso", ".img"},
		KindCTTemplate: {".tar", ".tar.zst", ".tar.xz", ".tar.gz"},
		KindDiskImage:  {".qcow2", ".vmdk", ".raw"},
	}
)

// Validate checks one resource against its kind's rules and returns every problem, positioned when the
// resource was parsed. It does not look at other resources (references, duplicates and vmid collisions are
// checked by the repository loader).
func Validate(r *Resource) diag.List {
	c := &checker{r: r, ref: r.Ref().String()}
	c.metadata()
	want, noun := newSpec(r.Kind)
	switch {
	case r.Spec == nil:
		// Reported by the parser when the spec is missing; a resource built in code must have one.
		if r.Source.File == "" {
			c.errorf("spec", "required")
		}
		return c.diags
	case want == nil:
		c.errorf("kind", "unknown kind %s", diag.Excerpt(string(r.Kind)))
		return c.diags
	case reflect.TypeOf(r.Spec) != reflect.TypeOf(want):
		c.errorf("spec", "%s %s needs %s", Article(r.Kind), r.Kind, noun)
		return c.diags
	}
	switch s := r.Spec.(type) {
	case *VMSpec:
		c.vm(s)
	case *LXCSpec:
		c.lxc(s)
	case *PoolSpec:
		c.pool(s)
	case *BackupJobSpec:
		c.backupJob(s)
	case *HARuleSpec:
		c.haRule(s)
	case *SecurityGroupSpec:
		c.securityGroup(r, s)
	case *IPSetSpec:
		c.ipSet(r, s)
	case *AliasSpec:
		c.alias(r, s)
	case *ArtifactSpec:
		c.artifact(s)
	}
	return c.diags
}

type checker struct {
	r     *Resource
	ref   string
	diags diag.List
}

func (c *checker) add(sev diag.Severity, field, msg string) {
	if c.r.Source.broken != nil {
		for f := field; f != ""; f = yamldecode.Parent(f) {
			if c.r.Source.broken[f] {
				return
			}
		}
	}
	pos := c.r.Source.Pos(field)
	c.diags = append(c.diags, diag.Diagnostic{Severity: sev, File: c.r.Source.File, Line: pos.Line,
		Column: pos.Column, Ref: c.ref, Field: field, Message: msg})
}

func (c *checker) errorf(field, format string, args ...any) {
	c.add(diag.Error, field, fmt.Sprintf(format, args...))
}

func (c *checker) warnf(field, format string, args ...any) {
	c.add(diag.Warning, field, fmt.Sprintf(format, args...))
}

// has reports whether a field was present in the parsed document.
func (c *checker) has(field string) bool {
	return c.r.Source.Positions.Has(field)
}

func (c *checker) metadata() {
	if c.r.APIVersion != APIVersion && c.r.Source.File == "" {
		c.errorf("apiVersion", "unsupported apiVersion %s (want %s)", diag.Excerpt(c.r.APIVersion), APIVersion)
	}
	c.name("metadata.name", c.r.Metadata.Name)
	if v, ok := c.r.Metadata.Annotations[AnnotationDependsOn]; ok {
		_, bad := ParseDependsOn(v)
		for _, tok := range bad {
			c.errorf("metadata.annotations."+AnnotationDependsOn, "bad depends-on %s: expected Kind:name", diag.Excerpt(tok))
		}
	}
}

// name checks a resource name (metadata.name or a reference to one).
func (c *checker) name(field, v string) bool {
	switch {
	case v == "":
		c.errorf(field, "required")
	case len(v) > 63:
		c.errorf(field, "name %s is longer than 63 characters", diag.Excerpt(v))
	case !nameRE.MatchString(v):
		c.errorf(field, "invalid name %s: use lower-case letters, digits and single hyphens, starting and ending with a letter or digit", diag.Excerpt(v))
	default:
		return true
	}
	return false
}

// cores checks spec.cpu.cores: optional (absent, PVE gives the guest its default, def, and ProxOps does not
// own the count), else greater than zero.
func (c *checker) cores(n int, def string) {
	if n < 0 || (n == 0 && c.has("spec.cpu.cores")) {
		c.errorf("spec.cpu.cores", "must be greater than zero (leave it out for PVE's default: %s)", def)
	}
}

func (c *checker) node(field, v string) {
	switch {
	case v == "":
		c.errorf(field, "required")
	case len(v) > pveformat.MaxNodeName || !pveformat.ValidNodeName(v):
		c.errorf(field, "invalid node name %s", diag.Excerpt(v))
	}
}

func (c *checker) vmid(field string, v int) {
	switch {
	case v == 0 && !c.has(field):
		c.errorf(field, "required")
	case v < minVMID || v > maxVMID:
		c.errorf(field, "vmid %d is out of range (PVE accepts %d to %d)", v, minVMID, maxVMID)
	}
}

func (c *checker) state(field string, s State) {
	if c.r.Kind.IsTemplate() {
		if s != "" && s != StateStopped {
			c.errorf(field, "invalid state %s for %s %s (want stopped or nothing: a template never runs)", diag.Excerpt(string(s)), Article(c.r.Kind), c.r.Kind)
		}
		return
	}
	if s != "" && s != StateStarted && s != StateStopped {
		c.errorf(field, "invalid state %s (want started|stopped)", diag.Excerpt(string(s)))
	}
}

func (c *checker) storage(field, v string) {
	switch {
	case v == "":
		c.errorf(field, "required")
	case !storageRE.MatchString(v):
		c.errorf(field, "invalid storage id %s", diag.Excerpt(v))
	}
}

// size checks a quantity that must be a positive number of bytes; whole requires whole MiB.
func (c *checker) size(field string, q Quantity, required, wholeMiB bool) {
	if q.IsZero() {
		if required {
			c.errorf(field, "required")
		}
		return
	}
	var b int64
	var err error
	if wholeMiB {
		var mib int64
		mib, err = q.MiB()
		b = mib
	} else {
		b, err = q.Bytes()
	}
	if err != nil {
		c.errorf(field, "%v", err)
		return
	}
	switch {
	case b == 0 && required:
		c.errorf(field, "size must be greater than zero")
	case required && !wholeMiB && b < MiB:
		c.warnf(field, "size %s is only %d bytes (a number without a unit is bytes); did you mean %sGiB?", diag.Excerpt(string(q)), b, strings.TrimSpace(string(q)))
	}
}

func (c *checker) enum(field, v string, allowed ...string) {
	if v != "" && !slices.Contains(allowed, v) {
		c.errorf(field, "invalid value %s (want %s)", diag.Excerpt(v), strings.Join(allowed, "|"))
	}
}

func (c *checker) tags(field string, tags []string) {
	for i, t := range tags {
		for _, tag := range SplitTags(t) {
			if !tagRE.MatchString(tag) {
				c.errorf(yamldecode.Index(field, i), "invalid tag %s (PVE tags use letters, digits and _ - + . and may not start with - + .)", diag.Excerpt(tag))
			}
		}
	}
}

func (c *checker) startup(field, v string) {
	if v != "" && !startupRE.MatchString(strings.ReplaceAll(v, " ", "")) {
		c.errorf(field, "invalid startup %s (want order=N[,up=N][,down=N])", diag.Excerpt(v))
	}
}

// slot checks a slot key against a bus and its highest number; it returns the canonical slot.
func (c *checker) slot(field, v string, buses map[string]int, what string) bool {
	m := slotRE.FindStringSubmatch(v)
	if m == nil {
		c.errorf(field, "invalid %s slot %s (want %s)", what, diag.Excerpt(v), slotHint(buses))
		return false
	}
	maxN, ok := buses[m[1]]
	if !ok {
		c.errorf(field, "invalid %s slot %s (want %s)", what, diag.Excerpt(v), slotHint(buses))
		return false
	}
	if n, _ := strconv.Atoi(m[2]); n > maxN {
		c.errorf(field, "%s slot %s is out of range (%s0 to %s%d)", what, diag.Excerpt(v), m[1], m[1], maxN)
		return false
	}
	return true
}

// nicSlots are the slots (netN) of a guest's network interfaces, in declaration order.
func nicSlots[N interface{ SlotAt(int) string }](nics []N) []string {
	var slots []string
	for i, n := range nics {
		slots = append(slots, n.SlotAt(i))
	}
	return slots
}

// claimSlot records that the item whose slot field is field takes slot; taken maps each slot to the item
// that took it first, and a slot taken again is reported at the second item's field.
func (c *checker) claimSlot(taken map[string]string, field, slot string) {
	if first, dup := taken[slot]; dup {
		c.errorf(field, "slot %s is already used by %s", slot, first)
		return
	}
	taken[slot] = yamldecode.Parent(field)
}

func slotHint(buses map[string]int) string {
	var parts []string
	for _, b := range slices.Sorted(maps.Keys(buses)) {
		parts = append(parts, fmt.Sprintf("%s0-%s%d", b, b, buses[b]))
	}
	return strings.Join(parts, ", ")
}

func (c *checker) ip(field, v string) {
	if _, err := netip.ParseAddr(v); err != nil {
		c.errorf(field, "invalid IP address %s", diag.Excerpt(v))
	}
}

func (c *checker) absPath(field, v string, required bool) {
	switch {
	case v == "":
		if required {
			c.errorf(field, "required")
		}
	case !strings.HasPrefix(v, "/"):
		c.errorf(field, "path %s is not absolute", diag.Excerpt(v))
	}
}

func (c *checker) vm(s *VMSpec) {
	c.node("spec.node", s.Node)
	c.vmid("spec.vmid", s.VMID)
	c.state("spec.state", s.State)
	c.guestHA(s.HA, s.State)
	c.migrate(s.Migrate)
	if s.PVEName != "" && !dnsNameRE.MatchString(s.PVEName) {
		c.errorf("spec.pve-name", "invalid PVE name %s (a DNS name: letters, digits, hyphens and dots)", diag.Excerpt(s.PVEName))
	}
	c.tags("spec.tags", s.Tags)
	c.guestPool(s.Pool, s.Extra)
	if s.Clone != "" {
		switch {
		case c.r.Kind == KindTemplateVM:
			c.errorf("spec.clone", "a TemplateVM cannot be cloned from another template; only a VM can")
		case s.Clone == c.r.Metadata.Name:
			c.errorf("spec.clone", "a VM cannot be cloned from itself")
		default:
			c.name("spec.clone", s.Clone)
		}
	}
	if s.CPU.Type == "" {
		c.errorf("spec.cpu.type", "required (for example host or x86-64-v2-AES)")
	}
	c.cores(s.CPU.Cores, "one core per socket")
	c.size("spec.memory", s.Memory, c.has("spec.memory"), true)
	c.disks(s)
	c.nics(s.Networks)
	c.hardware(s)
	c.vmOptions(s.Options)
	c.cloudInitData(s.CloudInitData)
	c.firewall(s.Firewall, nicSlots(s.Networks))
	c.snapshots(s.Snapshots, true)
	c.extra("spec.extra", s.Extra, vmReserved, vmReservedPrefixes, vmConditional(s))
}

func (c *checker) disks(s *VMSpec) {
	if s.Clone != "" {
		if len(s.Disks) > 0 {
			c.errorf("spec.disks", "must be empty when spec.clone is set: the clone inherits the template's disks")
		}
		return
	}
	seen := map[string]string{}
	for i, d := range s.Disks {
		p := yamldecode.Index("spec.disks", i)
		c.storage(p+".storage", d.Storage)
		if d.Image != "" {
			c.name(p+".image", d.Image)
			if !d.Size.IsZero() {
				c.errorf(p+".size", "must be empty when image is set: the disk takes the image's size")
			}
		} else {
			c.size(p+".size", d.Size, true, false)
		}
		slot := d.SlotAt(i)
		if d.Interface != "" && !c.slot(p+".interface", d.Interface, diskBuses, "disk") {
			continue
		}
		c.claimSlot(seen, p+".interface", slot)
		c.enum(p+".controller", d.Controller, scsiControllers...)
		c.enum(p+".discard", d.Discard, "ignore", "on")
		c.enum(p+".aio", d.AIO, "native", "threads", "io_uring")
		if d.SSD != nil && (strings.HasPrefix(slot, "virtio")) {
			c.errorf(p+".ssd", "ssd is not supported on %s (only on scsi, sata and ide disks)", slot)
		}
	}
	// Slots claimed by the cloud-init drive and the CD/DVD drive.
	for _, claim := range []struct {
		slot, by string
		on       bool
	}{
		{"ide2", "spec.hardware.cloud-init", s.CloudInitEnabled()},
		{s.CDROMSlot(), "spec.hardware.cdrom", s.Hardware != nil && s.Hardware.CDROM != nil},
	} {
		if p, used := seen[claim.slot]; used && claim.on {
			c.errorf(p+".interface", "slot %s is used by %s", claim.slot, claim.by)
		}
	}
}

func (c *checker) nics(nics []NIC) {
	seen := map[string]string{}
	for i, n := range nics {
		p := yamldecode.Index("spec.networks", i)
		if n.Bridge == "" {
			c.errorf(p+".bridge", "required")
		}
		c.enum(p+".model", n.Model, nicModels...)
		if n.MAC != "" && !macRE.MatchString(n.MAC) {
			c.errorf(p+".mac", "invalid MAC address %s", diag.Excerpt(n.MAC))
		}
		if n.VLAN != nil && (*n.VLAN < 0 || *n.VLAN > 4094) {
			c.errorf(p+".vlan", "VLAN tag %d is out of range (1 to 4094, or 0 for untagged)", *n.VLAN)
		}
		if n.RateLimit != nil && *n.RateLimit < 0 {
			c.errorf(p+".rate-limit", "must not be negative")
		}
		slot := n.SlotAt(i)
		if n.Slot != "" && !c.slot(p+".slot", n.Slot, map[string]int{"net": 31}, "network") {
			continue
		}
		c.claimSlot(seen, p+".slot", slot)
	}
}

func (c *checker) hardware(s *VMSpec) {
	h := s.Hardware
	if h == nil {
		return
	}
	const p = "spec.hardware"
	if h.Machine != "" && !machineRE.MatchString(h.Machine) {
		c.errorf(p+".machine", "invalid value %s (want i440fx|q35, optionally versioned like pc-q35-9.0)", diag.Excerpt(h.Machine))
	}
	c.enum(p+".bios", h.BIOS, "seabios", "ovmf")
	if h.Sockets < 0 {
		c.errorf(p+".sockets", "must not be negative")
	}
	if h.Serial0 != "" && h.Serial0 != "socket" && !strings.HasPrefix(h.Serial0, "/dev/") {
		c.errorf(p+".serial0", "invalid value %s (want socket or a /dev/ path)", diag.Excerpt(h.Serial0))
	}
	if h.TPM != nil {
		c.enum(p+".tpm.version", h.TPM.Version, "v1.2", "v2.0")
		if h.TPM.Storage != "" {
			c.storage(p+".tpm.storage", h.TPM.Storage)
		} else if s.TPMStorage() == "" {
			c.errorf(p+".tpm.storage", "required: there is no EFI disk or disk to take the storage from")
		}
	}
	if e := h.EFIDisk; e != nil {
		c.storage(p+".efi-disk.storage", e.Storage)
		c.size(p+".efi-disk.size", e.Size, false, false)
		if e.Template != "" && !slices.Contains([]string{"2m", "4m"}, strings.ToLower(e.Template)) {
			c.errorf(p+".efi-disk.template", "invalid value %s (want 2m|4m)", diag.Excerpt(e.Template))
		}
		c.enum(p+".efi-disk.secure-boot", e.SecureBoot, "enabled", "disabled")
		if h.BIOS != "ovmf" && s.Clone == "" {
			c.warnf(p+".efi-disk", "has no effect unless spec.hardware.bios is ovmf")
		}
	}
	if ci := h.CloudInit; ci != nil {
		if IsTrue(ci.Enabled) {
			if ci.Storage == "" {
				c.errorf(p+".cloud-init.storage", "required when the cloud-init drive is enabled")
			} else {
				c.storage(p+".cloud-init.storage", ci.Storage)
			}
			c.size(p+".cloud-init.size", ci.Size, false, false)
		} else if ci.Storage != "" || !ci.Size.IsZero() {
			c.warnf(p+".cloud-init", "ignored unless enabled: true")
		}
	}
	if cd := h.CDROM; cd != nil {
		switch {
		case cd.ISO == "":
			c.errorf(p+".cdrom.iso", "required: an ISO name, or none for an empty drive")
		case cd.ISO != CDROMNone:
			c.name(p+".cdrom.iso", cd.ISO)
		}
		c.enum(p+".cdrom.media", cd.Media, "cdrom", "disk")
	}
	seen := map[string]string{}
	for i, d := range h.PCIDevices {
		pp := yamldecode.Index(p+".pci-devices", i)
		if d.Slot == "" {
			c.errorf(pp+".slot", "required (hostpci0 to hostpci15)")
		} else if c.slot(pp+".slot", d.Slot, map[string]int{"hostpci": 15}, "PCI") {
			c.claimSlot(seen, pp+".slot", d.Slot)
		}
		switch {
		case d.Device == "":
			c.errorf(pp+".device", "required (a PCI address such as 0000:01:00 or 01:00.0)")
		case !pciRE.MatchString(strings.ToLower(d.Device)):
			c.errorf(pp+".device", "invalid PCI address %s (want [domain:]bus:device[.function], e.g. 0000:01:00.0)", diag.Excerpt(d.Device))
		}
	}
}

var machineRE = regexp.MustCompile(`^(i440fx|q35|pc(-i440fx)?-\d+\.\d+(\+pve\d+)?|pc-q35-\d+\.\d+(\+pve\d+)?)$`)

func (c *checker) vmOptions(o *VMOptions) {
	if o == nil {
		return
	}
	c.startup("spec.options.startup", o.Startup)
	for i, h := range o.Hotplug {
		c.enum(yamldecode.Index("spec.options.hotplug", i), h, hotplugValues...)
	}
	seen := map[string]bool{}
	for i, b := range o.BootOrder {
		p := yamldecode.Index("spec.options.boot-order", i)
		switch {
		case strings.TrimSpace(b) == "":
			c.errorf(p, "must not be empty")
		case seen[b]:
			c.errorf(p, "%s is listed twice", b)
		}
		seen[b] = true
	}
}

func (c *checker) cloudInitData(d *CloudInitData) {
	if d == nil {
		return
	}
	const p = "spec.cloud-init-data"
	if len(d.SSHKeys) > 0 && len(d.SSHKeyRefs) > 0 {
		c.errorf(p+".ssh-key-refs", "ssh-keys and ssh-key-refs cannot both be set")
	}
	if len(d.SSHKeys) > 1 && slices.Contains(d.SSHKeys, SSHKeysPVEOwned) {
		c.errorf(p+".ssh-keys", `"*" (keys owned by PVE) cannot be mixed with keys`)
	}
	for i, k := range d.SSHKeys {
		kp := yamldecode.Index(p+".ssh-keys", i)
		switch {
		case strings.TrimSpace(k) == "":
			c.errorf(kp, "must not be empty")
		case strings.ContainsAny(k, "\r\n"):
			c.errorf(kp, "must be a single public key line")
		}
	}
	seen := map[string]bool{}
	for i, ref := range d.SSHKeyRefs {
		rp := yamldecode.Index(p+".ssh-key-refs", i)
		c.secretRef(rp, ref, "cloud-init.ssh-keys.")
		if seen[ref] {
			c.errorf(rp, "secret %s is listed twice", ref)
		}
		seen[ref] = true
	}
	if d.CIPasswordRef != "" {
		c.secretRef(p+".ci-password-ref", d.CIPasswordRef, "cloud-init.passwords.")
	}
	for i, ns := range d.Nameservers {
		c.ip(yamldecode.Index(p+".nameservers", i), ns)
	}
	for i, sd := range d.SearchDomains {
		if !dnsNameRE.MatchString(sd) {
			c.errorf(yamldecode.Index(p+".search-domains", i), "invalid domain %s", diag.Excerpt(sd))
		}
	}
	nics := map[int]string{}
	for i, ipc := range d.IPConfigs {
		ip := yamldecode.Index(p+".ipconfigs", i)
		if ipc.NIC < 0 || ipc.NIC > 31 {
			c.errorf(ip+".nic", "NIC %d is out of range (0 to 31)", ipc.NIC)
		} else if first, dup := nics[ipc.NIC]; dup {
			c.errorf(ip+".nic", "ipconfig%d is already set by %s", ipc.NIC, first)
		} else {
			nics[ipc.NIC] = ip
		}
		var prefix netip.Prefix
		if ipc.IP == "" {
			if ipc.Gateway != "" {
				c.errorf(ip+".ip", "required when gateway is set")
			} else {
				c.warnf(ip, "entry has no ip and is ignored")
			}
		} else {
			var err error
			if prefix, err = netip.ParsePrefix(ipc.IP); err != nil {
				c.errorf(ip+".ip", "invalid address %s (want CIDR form such as 192.0.2.10/24)", diag.Excerpt(ipc.IP))
			}
		}
		if ipc.Gateway != "" {
			gw, err := netip.ParseAddr(ipc.Gateway)
			switch {
			case err != nil:
				c.errorf(ip+".gateway", "invalid IP address %s", diag.Excerpt(ipc.Gateway))
			case prefix.IsValid() && gw.Is4() != prefix.Addr().Is4():
				c.errorf(ip+".gateway", "gateway %s is not of the same IP family as %s", ipc.Gateway, ipc.IP)
			}
		}
	}
}

// secretRef checks the shape of a secret reference: <prefix><name>.
func (c *checker) secretRef(field, ref, prefix string) {
	name, ok := strings.CutPrefix(ref, prefix)
	switch {
	case !ok:
		c.errorf(field, "invalid secret reference %s (want %s<name>)", diag.Excerpt(ref), prefix)
	case name == "" || len(name) > 64 || !secretNameRE.MatchString(name):
		c.errorf(field, "invalid secret name %s in %s (lower-case letters, digits and hyphens, at most 64)", diag.Excerpt(name), diag.Excerpt(ref))
	}
}

func (c *checker) lxc(s *LXCSpec) {
	c.node("spec.node", s.Node)
	c.vmid("spec.vmid", s.VMID)
	c.state("spec.state", s.State)
	c.guestHA(s.HA, s.State)
	c.migrate(s.Migrate)
	if s.Template != "" || c.has("spec.template") {
		c.name("spec.template", s.Template)
	}
	c.tags("spec.tags", s.Tags)
	c.guestPool(s.Pool, s.Extra)
	c.size("spec.memory", s.Memory, c.has("spec.memory"), true)
	if !s.Swap.IsZero() {
		if _, err := s.Swap.MiB(); err != nil {
			c.errorf("spec.swap", "%v", err)
		}
	}
	c.cores(s.CPU.Cores, "every core of the host")
	if s.CPU.Units < 0 {
		c.errorf("spec.cpu.units", "must not be negative")
	}
	c.storage("spec.root.storage", s.Root.Storage)
	c.size("spec.root.size", s.Root.Size, c.has("spec.root.size"), false)

	mpBus := map[string]int{"mp": 255}
	seen := map[string]string{}
	for i, m := range s.MountPoints {
		p := yamldecode.Index("spec.mount-points", i)
		c.storage(p+".storage", m.Storage)
		c.size(p+".size", m.Size, c.has(p+".size"), false)
		c.absPath(p+".mount-point", m.MountPoint, true)
		if m.Slot == "" || c.slot(p+".slot", m.Slot, mpBus, "mount point") {
			c.claimSlot(seen, p+".slot", m.SlotAt(i))
		}
	}
	for i, b := range s.BindMounts {
		p := yamldecode.Index("spec.bind-mounts", i)
		c.absPath(p+".host-path", b.HostPath, true)
		if b.HostPath != "" && slices.Contains(systemDirs, path.Clean(b.HostPath)) {
			c.errorf(p+".host-path", "refusing to bind-mount the host's system directory %s", path.Clean(b.HostPath))
		}
		c.absPath(p+".mount-point", b.MountPoint, true)
		if b.Slot == "" || c.slot(p+".slot", b.Slot, mpBus, "mount point") {
			c.claimSlot(seen, p+".slot", s.BindMountSlot(i))
		}
	}
	nets := map[string]string{}
	for i, n := range s.Networks {
		p := yamldecode.Index("spec.networks", i)
		if n.Bridge == "" {
			c.errorf(p+".bridge", "required")
		}
		if n.Tag != nil && (*n.Tag < 0 || *n.Tag > 4094) {
			c.errorf(p+".tag", "VLAN tag %d is out of range (1 to 4094, or 0 for untagged)", *n.Tag)
		}
		if n.RateLimit != nil && *n.RateLimit < 0 {
			c.errorf(p+".rate-limit", "must not be negative")
		}
		if n.HWAddr != "" && !macRE.MatchString(n.HWAddr) {
			c.errorf(p+".hwaddr", "invalid MAC address %s", diag.Excerpt(n.HWAddr))
		}
		if n.IP != "" && n.IP != "dhcp" && n.IP != "manual" {
			if _, err := netip.ParsePrefix(n.IP); err != nil {
				c.errorf(p+".ip", "invalid address %s (want CIDR form such as 192.0.2.10/24, dhcp or manual)", diag.Excerpt(n.IP))
			}
		}
		if n.GW != "" {
			c.ip(p+".gw", n.GW)
		}
		slot := n.SlotAt(i)
		if n.Slot != "" && !c.slot(p+".slot", n.Slot, map[string]int{"net": 31}, "network") {
			continue
		}
		c.claimSlot(nets, p+".slot", slot)
	}
	if d := s.DNS; d != nil {
		if d.Hostname != "" && !dnsNameRE.MatchString(d.Hostname) {
			c.errorf("spec.dns.hostname", "invalid hostname %s (a DNS name: letters, digits, hyphens and dots)", diag.Excerpt(d.Hostname))
		}
		for i, ns := range d.Nameservers {
			c.ip(yamldecode.Index("spec.dns.nameservers", i), ns)
		}
		if d.Domain != "" && !dnsNameRE.MatchString(d.Domain) {
			c.errorf("spec.dns.domain", "invalid domain %s", diag.Excerpt(d.Domain))
		}
	}
	if s.Arch == "i686" {
		c.errorf("spec.arch", "invalid value %s (PVE calls it i386)", diag.Excerpt(s.Arch))
	} else {
		c.enum("spec.arch", s.Arch, archs...)
	}
	if o := s.Options; o != nil {
		c.startup("spec.options.startup", o.Startup)
		if o.TTYs < 0 {
			c.errorf("spec.options.ttys", "must not be negative")
		}
	}
	c.firewall(s.Firewall, nicSlots(s.Networks))
	c.snapshots(s.Snapshots, false)
	c.extra("spec.extra", s.Extra, lxcReserved, lxcReservedPrefixes, lxcConditional(s))
}

func (c *checker) snapshots(s *Snapshots, vm bool) {
	if s == nil {
		return
	}
	c.enum("spec.snapshots.policy", s.Policy, SnapshotsDisruptive, SnapshotsAlways, SnapshotsNever)
	if s.VMState && !vm {
		c.errorf("spec.snapshots.vmstate", "only a VM's snapshot can hold its RAM")
	}
}

func (c *checker) artifact(s *ArtifactSpec) {
	switch {
	case len(s.Nodes) == 0 && s.Node == "":
		c.errorf("spec.nodes", "required: the nodes the file must be present on")
	case len(s.Nodes) > 0 && s.Node != "" && !slices.Contains(s.Nodes, s.Node):
		c.errorf("spec.node", "node %s is not in spec.nodes; set one of them", diag.Excerpt(s.Node))
	case len(s.Nodes) == 0:
		c.node("spec.node", s.Node)
	}
	seen := map[string]bool{}
	for i, n := range s.Nodes {
		p := yamldecode.Index("spec.nodes", i)
		c.node(p, n)
		if seen[n] {
			c.warnf(p, "node %s is listed twice", n)
		}
		seen[n] = true
	}
	c.storage("spec.storage", s.Storage)
	switch {
	case s.Filename == "":
		c.errorf("spec.filename", "required")
	case !filenameRE.MatchString(s.Filename):
		c.errorf("spec.filename", "invalid file name %s (letters, digits, dots, hyphens and underscores)", diag.Excerpt(s.Filename))
	default:
		exts := artifactExtensions[c.r.Kind]
		lower := strings.ToLower(s.Filename)
		if !slices.ContainsFunc(exts, func(e string) bool { return strings.HasSuffix(lower, e) }) {
			c.errorf("spec.filename", "file name %s must end in %s", diag.Excerpt(s.Filename), orList(exts))
		}
	}
	switch u, err := url.Parse(s.URL); {
	case s.URL == "":
		c.errorf("spec.url", "required")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		c.errorf("spec.url", "invalid URL %s (want http:// or https://)", diag.Excerpt(s.URL))
	}
	if cs := s.Checksum; cs != nil {
		switch {
		case cs.Algorithm == "" && cs.Value == "":
		case cs.Algorithm == "" || cs.Value == "":
			c.errorf("spec.checksum", "set both algorithm and value, or neither")
		default:
			want, ok := checksumLengths[cs.Algorithm]
			if !ok {
				c.errorf("spec.checksum.algorithm", "invalid value %s (want sha256|sha1|sha512|md5)", diag.Excerpt(cs.Algorithm))
			} else if len(cs.Value) != want || !hexRE.MatchString(cs.Value) {
				c.errorf("spec.checksum.value", "not a %s digest (%d hex digits)", cs.Algorithm, want)
			}
		}
	}
}

// poolSegmentRE is one level of a PVE pool id (AccessControl.pm verify_poolname).
var poolSegmentRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// MaxPoolLevels is how deep PVE nests pools: parent/child/grandchild.
const MaxPoolLevels = 3

// PoolIDError says what is wrong with a PVE pool id, or returns "" for a valid one.
func PoolIDError(id string) string {
	parts := strings.Split(id, "/")
	switch {
	case id == "":
		return "required"
	case len(parts) > MaxPoolLevels:
		return fmt.Sprintf("pool id %s is nested too deeply (at most %d levels: parent/child/grandchild)", diag.Excerpt(id), MaxPoolLevels)
	}
	for _, p := range parts {
		if !poolSegmentRE.MatchString(p) {
			return fmt.Sprintf("invalid pool id %s: each level (parent/child) is letters, digits, dots, hyphens and underscores", diag.Excerpt(id))
		}
	}
	return ""
}

// PoolParent is the parent of a nested pool id, "" for a top-level one.
func PoolParent(id string) string {
	if i := strings.LastIndex(id, "/"); i >= 0 {
		return id[:i]
	}
	return ""
}

// pool checks a Pool's spec: its id (metadata.name when absent) and comment.
func (c *checker) pool(s *PoolSpec) {
	if s.ID != "" || c.has("spec.id") {
		if msg := PoolIDError(s.ID); msg != "" {
			c.errorf("spec.id", "%s", msg)
		}
	}
	if strings.Contains(s.Comment, "\x00") {
		c.errorf("spec.comment", "must not contain a NUL character")
	}
	if pveformat.Marked(s.Comment) {
		c.errorf("spec.comment", "must not contain the ownership marker %s: ProxOps adds it", pveformat.OwnershipMarker)
	}
}

// guestPool checks a guest's spec.pool, and that spec.extra does not put the guest in a pool as well.
func (c *checker) guestPool(pool string, extra map[string]string) {
	if pool != "" || c.has("spec.pool") {
		if msg := PoolIDError(pool); msg != "" {
			c.errorf("spec.pool", "%s", msg)
		}
	}
	if v, ok := extra["pool"]; ok && pool != "" {
		c.errorf("spec.extra.pool", "a guest in two pools: spec.pool is %s and spec.extra sets pool %s; remove pool from spec.extra",
			diag.Excerpt(pool), diag.Excerpt(v))
	}
}

// configKeyRE is PVE's configuration key format.
var configKeyRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_-]+$`)

func (c *checker) errorAt(pos yamldecode.Pos, field, msg string) {
	c.diags = append(c.diags, diag.Diagnostic{Severity: diag.Error, File: c.r.Source.File, Line: pos.Line,
		Column: pos.Column, Ref: c.ref, Field: field, Message: msg})
}

// orList renders a, b or c.
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// Article returns "an" or "a" for a kind, as it is read aloud (an ISO, an LXC, an HARule, an IPSet, an
// Alias, a VM).
func Article(k Kind) string {
	if k == KindISO || k == KindLXC || k == KindHARule || k == KindIPSet || k == KindAlias {
		return "an"
	}
	return "a"
}
