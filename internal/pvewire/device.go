package pvewire

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pveformat"
)

// Drive is a parsed qemu drive value (scsiN, virtioN, sataN, ideN, efidisk0, tpmstate0): its volume (the
// default key "file") and every other token.
type Drive struct {
	// File is the volume id (local-lvm:vm-100-disk-0), a create form (local-lvm:8, local-lvm:cloudinit),
	// "none", "cdrom" or a device path.
	File string
	// Props holds the tokens after the volume, in written order.
	Props pveformat.Props
}

// ParseDrive parses a qemu drive value.
func ParseDrive(v string) Drive {
	p := pveformat.ParseProps(v, "file")
	file, _ := p.Get("file")
	if file == "" {
		file, _ = p.Get("volume")
	}
	return Drive{File: file, Props: p.Without("file", "volume")}
}

// String prints the drive in PVE's stored form: volume first, then the tokens in key order.
func (d Drive) String() string {
	return printHead("file", d.File, d.Props)
}

// Storage is the storage id of the volume ("" for none, cdrom and device paths).
func (d Drive) Storage() string { return volumeStorage(d.File) }

func volumeStorage(vol string) string {
	if vol == "" || strings.HasPrefix(vol, "/") {
		return ""
	}
	s, _, ok := strings.Cut(vol, ":")
	if !ok {
		return ""
	}
	return s
}

// Media is the media token: cdrom or disk (the default).
func (d Drive) Media() string {
	if m, ok := d.Props.Get("media"); ok {
		return m
	}
	return "disk"
}

// IsCDROM reports whether the drive is a CD/DVD drive (media=cdrom, or the physical drive "cdrom").
func (d Drive) IsCDROM() bool { return d.Media() == "cdrom" || d.File == "cdrom" }

// IsEmpty reports whether the slot holds no volume ("none" or nothing).
func (d Drive) IsEmpty() bool { return d.File == "" || d.File == "none" }

// cloudInitRE is qemu-server's drive_is_cloudinit test on the volume name.
var cloudInitRE = regexp.MustCompile(`[:/](?:vm-\d+-)?cloudinit(?:\.(?:raw|cow|qcow|qcow2|qed|vmdk|cloop))?$`)

// IsCloudInit reports whether the drive is a cloud-init drive (a create form STORAGE:cloudinit or an
// allocated vm-N-cloudinit volume).
func (d Drive) IsCloudInit() bool { return cloudInitRE.MatchString(d.File) }

// Size returns the drive's size= token in bytes; false when there is none or it cannot be read.
func (d Drive) Size() (int64, bool) { return sizeToken(d.Props) }

// sizeToken reads the size= token in bytes; false when there is none or it cannot be read.
func sizeToken(p pveformat.Props) (int64, bool) {
	v, ok := p.Get("size")
	if !ok {
		return 0, false
	}
	b, err := pveformat.ParseSize(v)
	if err != nil {
		return 0, false
	}
	return b, true
}

// parseHead parses a property string whose default key is key: that key's value and the other tokens.
func parseHead(v, key string) (string, pveformat.Props) {
	p := pveformat.ParseProps(v, key)
	head, _ := p.Get(key)
	return head, p.Without(key)
}

// printHead prints key=head first, then the tokens in key order with first (after key) leading.
func printHead(key, head string, p pveformat.Props, first ...string) string {
	return append(pveformat.Props{{Key: key, Value: head}}, p...).Canonical(key, first...)
}

// IsVolume reports whether the drive refers to an allocated storage volume (not a create form, not none,
// not a CD drive).
func (d Drive) IsVolume() bool {
	if d.IsEmpty() || d.IsCDROM() || d.Storage() == "" {
		return false
	}
	_, rest, _ := strings.Cut(d.File, ":")
	return !allDigitsDot(rest) && rest != "cloudinit"
}

func allDigitsDot(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && s[i] != '.' {
			return false
		}
	}
	return true
}

// NIC is a parsed qemu network device: model, MAC and the other tokens.
type NIC struct {
	Model string
	// MAC is upper or lower case as written; compare case-insensitively.
	MAC   string
	Props pveformat.Props
}

// nicModels are the qemu NIC models (also the aliases that carry a MAC: virtio=AA:BB:...).
var nicModels = map[string]bool{"e1000": true, "e1000-82540em": true, "e1000-82544gc": true, "e1000-82545em": true,
	"e1000e": true, "i82551": true, "i82557b": true, "i82559er": true, "ne2k_isa": true, "ne2k_pci": true,
	"pcnet": true, "rtl8139": true, "virtio": true, "vmxnet3": true}

// ParseNIC parses a qemu netN value: <model>[=<mac>] or model=<model>[,macaddr=<mac>], then other tokens.
func ParseNIC(v string) NIC {
	var n NIC
	for _, t := range pveformat.ParseProps(v, "model") {
		switch {
		case t.Key == "model" && t.Bare && n.Model != "":
			// A bare word after the model (virtio=MAC,...) is a flag, not a second model.
			n.Props = append(n.Props, pveformat.Token{Key: t.Value, Bare: true})
		case t.Key == "model":
			n.Model = t.Value
		case t.Key == "macaddr":
			n.MAC = t.Value
		case nicModels[t.Key]:
			n.Model, n.MAC = t.Key, t.Value
		default:
			n.Props = append(n.Props, t)
		}
	}
	return n
}

// String prints the NIC in PVE's stored form: <model>[=<mac>] first, then the tokens in key order.
func (n NIC) String() string {
	head := n.Model
	if n.MAC != "" {
		head += "=" + n.MAC
	}
	switch {
	case len(n.Props) == 0:
		return head
	case head == "":
		return n.Props.Canonical("")
	}
	return head + "," + n.Props.Canonical("")
}

// MountPoint is a parsed LXC rootfs or mpN value.
type MountPoint struct {
	// Volume is a volume id, a create form (storage:GiB), or a host path (bind mount) or device.
	Volume string
	Props  pveformat.Props
}

// ParseMountPoint parses an LXC rootfs or mpN value.
func ParseMountPoint(v string) MountPoint {
	vol, p := parseHead(v, "volume")
	return MountPoint{Volume: vol, Props: p}
}

// String prints the mount point in PVE's stored form: volume, then mp= (required for mpN), then the
// tokens in key order.
func (m MountPoint) String() string {
	return printHead("volume", m.Volume, m.Props, "mp")
}

// IsBind reports whether the mount point is a host path (a bind mount) or a device.
func (m MountPoint) IsBind() bool { return strings.HasPrefix(m.Volume, "/") }

// Storage is the volume's storage id ("" for a bind mount).
func (m MountPoint) Storage() string { return volumeStorage(m.Volume) }

// Size returns the size= token in bytes.
func (m MountPoint) Size() (int64, bool) { return sizeToken(m.Props) }

// LXCNIC is a parsed LXC netN value (name=..., bridge=..., ...).
type LXCNIC struct{ Props pveformat.Props }

// ParseLXCNIC parses an LXC netN value.
func ParseLXCNIC(v string) LXCNIC { return LXCNIC{Props: pveformat.ParseProps(v, "")} }

// String prints the interface in PVE's stored form: name= first, then the tokens in key order.
func (n LXCNIC) String() string { return n.Props.Canonical("", "name") }

// PCI is a parsed hostpciN value.
type PCI struct {
	// Host is the host device address(es) as written (the default key); empty with mapping=.
	Host  string
	Props pveformat.Props
}

// ParsePCI parses a hostpciN value.
func ParsePCI(v string) PCI {
	h, p := parseHead(v, "host")
	return PCI{Host: h, Props: p}
}

// String prints the device with the address first, then the tokens in key order.
func (p PCI) String() string {
	if p.Host == "" {
		return p.Props.Canonical("")
	}
	return printHead("host", p.Host, p.Props)
}

// NormalizePCIAddress lower-cases a PCI address and adds the default domain 0000 when it has none, so
// 01:00.0 and 0000:01:00.0 compare equal. Several addresses separated by ';' are normalised one by one.
func NormalizePCIAddress(a string) string {
	parts := strings.Split(strings.ToLower(strings.TrimSpace(a)), ";")
	for i, p := range parts {
		if strings.Count(p, ":") == 1 {
			parts[i] = "0000:" + p
		}
	}
	return strings.Join(parts, ";")
}

// Memory reads a qemu memory value ([current=]<MiB>[,...]); false when it is not a number.
func Memory(v string) (int64, bool) {
	p := pveformat.ParseProps(v, "current")
	n, err := strconv.ParseInt(p.Value("current"), 10, 64)
	return n, err == nil
}

// Int reads an integer config value.
func Int(v string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n, err == nil
}

// Float reads a number config value.
func Float(v string) (float64, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	return f, err == nil
}

// Bool reads a boolean config value (1/0, also on/off, yes/no, true/false).
func Bool(v string) bool { return boolValue(v) }

// Features is a parsed LXC features value (nesting=1,keyctl=1,...).
type Features struct{ Props pveformat.Props }

// ParseFeatures parses an LXC features value.
func ParseFeatures(v string) Features { return Features{Props: pveformat.ParseProps(v, "")} }

// Flag reads a boolean feature (absent = off).
func (f Features) Flag(name string) bool { return propBool(f.Props, name, false) }

// String prints the features in key order.
func (f Features) String() string { return f.Props.Canonical("") }

// IsVolumeKey reports whether a config key holds a volume with a size token: a qemu disk slot, efidisk0,
// tpmstate0, or an LXC rootfs or mpN.
func IsVolumeKey(t inventory.GuestType, key string) bool {
	if t == inventory.LXC {
		return key == "rootfs" || isIndexed(key, "mp")
	}
	return isDiskSlot(key) || key == "efidisk0" || key == "tpmstate0"
}

// SizeToken returns the size= token of a volume value.
func SizeToken(v string) (string, bool) {
	for tok := range strings.SplitSeq(v, ",") {
		if s, ok := strings.CutPrefix(tok, "size="); ok {
			return s, true
		}
	}
	return "", false
}

// WithSizeToken returns a volume value (drive, rootfs or mount point) with its size= token set, keeping
// every other token in place.
func WithSizeToken(t inventory.GuestType, key, v, size string) string {
	if t == inventory.LXC {
		m := ParseMountPoint(v)
		m.Props = m.Props.With("size", size)
		return m.String()
	}
	d := ParseDrive(v)
	d.Props = d.Props.With("size", size)
	return d.String()
}

// HasCloudInitDrive reports whether a VM has a cloud-init drive in its config, current or pending (qemu-server
// QemuConfig has_cloudinit).
func HasCloudInitDrive(g inventory.Guest) bool {
	if g.Type != inventory.QEMU {
		return false
	}
	for _, e := range g.Config {
		if !isDiskSlot(e.Key) {
			continue
		}
		if (e.HasValue && ParseDrive(e.Value).IsCloudInit()) || (e.HasPending && ParseDrive(e.Pending).IsCloudInit()) {
			return true
		}
	}
	return false
}

// HasCurrentCloudInitDrive reports whether a config map (current values) holds a cloud-init drive: the
// drive PVE regenerates (a drive still pending is generated when it is applied).
func HasCurrentCloudInitDrive(cfg map[string]string) bool {
	for k, v := range cfg {
		if isDiskSlot(k) && ParseDrive(v).IsCloudInit() {
			return true
		}
	}
	return false
}
