package pvewire

import (
	"cmp"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
)

// Keys the manifest model covers, per guest type (indexed keys are listed by prefix below).
var (
	qemuModelled = set("name", "description", "tags", "cpu", "cores", "sockets", "memory", "numa", "machine", "bios",
		"vga", "scsihw", "serial0", "efidisk0", "tpmstate0", "onboot", "startup", "protection", "agent", "acpi",
		"tablet", "hotplug", "boot", "ciuser", "sshkeys", "cipassword", "nameserver", "searchdomain")
	qemuModelledPrefixes = []string{"scsi", "virtio", "sata", "ide", "net", "hostpci", "ipconfig"}

	lxcModelled = set("hostname", "description", "tags", "arch", "cores", "memory", "swap", "rootfs", "nameserver",
		"searchdomain", "unprivileged", "protection", "onboot", "console", "features", "startup")
	lxcModelledPrefixes = []string{"mp", "net"}

	// Keys PVE maintains itself: never compared, never gaps.
	qemuBookkeeping = set("digest", "meta", "vmgenid", "smbios1", "lock", "template", "parent", "snaptime",
		"runningmachine", "runningcpu", "vmstate", "pending")
	lxcBookkeeping = set("digest", "ostype", "lock", "template", "parent", "snaptime", "pending")
	// Indexed bookkeeping keys: volumes detached from the config.
	bookkeepingPrefixes = []string{"unused"}
)

func set(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// IsModelled reports whether the manifest model covers a config key of a guest type.
func IsModelled(t inventory.GuestType, key string) bool {
	keys, prefixes := qemuModelled, qemuModelledPrefixes
	if t == inventory.LXC {
		keys, prefixes = lxcModelled, lxcModelledPrefixes
	}
	if keys[key] {
		return true
	}
	for _, p := range prefixes {
		if isIndexed(key, p) {
			return true
		}
	}
	return false
}

// IsBookkeeping reports whether a key is PVE's own bookkeeping (digest, meta, smbios1, vmgenid, lock,
// unusedN, ...), which is neither compared nor reported as a gap.
func IsBookkeeping(t inventory.GuestType, key string) bool {
	keys := qemuBookkeeping
	if t == inventory.LXC {
		keys = lxcBookkeeping
	}
	if keys[key] {
		return true
	}
	for _, p := range bookkeepingPrefixes {
		if isIndexed(key, p) {
			return true
		}
	}
	return false
}

// Gap is a live setting the manifest model does not cover: a whole key, or one token of a modelled
// property string (Token set).
type Gap struct {
	Key   string
	Token string
	// Value is the live value, or Redacted for a secret.
	Value string
}

// Redacted replaces a secret value in a gap.
const Redacted = "<redacted>"

// secretKeys are keys whose values are never shown; so is any key that contains one of secretWords.
var (
	secretKeys  = set("cipassword", "sshkeys", "password", "sshkey", "keyfile", "secret")
	secretWords = []string{"token", "secret", "password"}
)

// IsSecretKey reports whether the value of a config key (or of a property-string token) may be a secret and
// is never shown: cipassword, sshkeys, password, sshkey, keyfile, secret, and any key containing token,
// secret or password.
func IsSecretKey(key string) bool {
	k := strings.ToLower(key)
	if secretKeys[k] {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// modelledTokens lists, per kind of property string, the tokens the model covers; any other token of a
// modelled key is a gap. Tokens PVE derives (size, media on a CD drive) count as covered.
var modelledTokens = map[string]map[string]bool{
	"disk":     set("file", "volume", "size", "iothread", "discard", "ssd", "aio", "media", "import-from", "format"),
	"efidisk":  set("file", "volume", "size", "efitype", "pre-enrolled-keys", "format"),
	"tpmstate": set("file", "volume", "size", "version", "format"),
	"net":      set("bridge", "tag", "rate", "firewall", "macaddr", "model"),
	"hostpci":  set("host", "pcie"),
	"ipconfig": set("ip", "gw"),
	"agent":    set("enabled"),
	"cpu":      set("cputype", "hidden"),
	"vga":      set("type"),
	"boot":     set("order"),
	"lxcnet":   set("name", "bridge", "hwaddr", "type", "tag", "rate", "firewall", "ip", "gw"),
	"rootfs":   set("volume", "size"),
	"mp":       set("volume", "size", "mp", "ro", "backup", "acl", "quota", "shared", "mountoptions"),
	"features": set("nesting", "keyctl", "fuse"),
	"machine":  set("type"),
	"memory":   set("current"),
}

// Gaps lists a guest's live settings the manifest model does not cover, sorted by key and token: every key
// that is neither modelled nor bookkeeping, and the unmodelled tokens of modelled property strings (a NIC's
// mtu, a disk's backup=, a PCI device's x-vga). Secret values are redacted.
func Gaps(g inventory.Guest) []Gap {
	var out []Gap
	for _, e := range g.Config {
		if !e.HasValue {
			continue
		}
		k, v := e.Key, e.Value
		switch {
		case IsBookkeeping(g.Type, k):
			continue
		case !IsModelled(g.Type, k):
			if IsSecretKey(k) {
				v = Redacted
			}
			out = append(out, Gap{Key: k, Value: v})
			continue
		}
		for _, t := range unmodelledTokens(g.Type, k, v) {
			if IsSecretKey(k) || IsSecretKey(t.Key) {
				t.Value = Redacted
			}
			out = append(out, Gap{Key: k, Token: t.Key, Value: t.Value})
		}
	}
	slices.SortFunc(out, func(a, b Gap) int { return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Token, b.Token)) })
	return out
}

func unmodelledTokens(t inventory.GuestType, key, value string) Props {
	var kind string
	var p Props
	if t == inventory.LXC {
		switch {
		case key == "rootfs":
			kind, p = "rootfs", ParseProps(value, "volume")
		case isIndexed(key, "mp"):
			kind, p = "mp", ParseProps(value, "volume")
		case isIndexed(key, "net"):
			kind, p = "lxcnet", ParseProps(value, "")
		case key == "features":
			kind, p = "features", ParseProps(value, "")
		default:
			return nil
		}
	} else {
		switch {
		case key == "efidisk0":
			kind, p = "efidisk", ParseProps(value, "file")
		case key == "tpmstate0":
			kind, p = "tpmstate", ParseProps(value, "file")
		case isDiskSlot(key):
			kind, p = "disk", ParseProps(value, "file")
		case isIndexed(key, "net"):
			n := ParseNIC(value)
			kind, p = "net", n.Props
		case isIndexed(key, "hostpci"):
			kind, p = "hostpci", ParseProps(value, "host")
		case isIndexed(key, "ipconfig"):
			kind, p = "ipconfig", ParseProps(value, "")
		case key == "agent":
			kind, p = "agent", ParseProps(value, "enabled")
		case key == "cpu":
			kind, p = "cpu", ParseProps(value, "cputype")
		case key == "vga":
			kind, p = "vga", ParseProps(value, "type")
		case key == "boot":
			kind, p = "boot", ParseProps(value, "legacy")
		case key == "machine":
			kind, p = "machine", ParseProps(value, "type")
		case key == "memory":
			kind, p = "memory", ParseProps(value, "current")
		default:
			return nil
		}
	}
	var out Props
	for _, tok := range p {
		if !modelledTokens[kind][tok.Key] {
			out = append(out, tok)
		}
	}
	return out
}

// String renders a gap as key=value or key.token=value.
func (g Gap) String() string {
	var b strings.Builder
	b.WriteString(g.Key)
	if g.Token != "" {
		b.WriteByte('.')
		b.WriteString(g.Token)
	}
	b.WriteByte('=')
	b.WriteString(g.Value)
	return b.String()
}

// ModelledKeys lists the config keys of a guest type the manifest model covers, sorted; ModelledPrefixes the
// prefixes of its indexed keys (scsi for scsi0, scsi1, ...).
func ModelledKeys(t inventory.GuestType) []string {
	if t == inventory.LXC {
		return sortedKeys(lxcModelled)
	}
	return sortedKeys(qemuModelled)
}

// ModelledPrefixes lists the prefixes of the indexed config keys a guest type's model covers, sorted.
func ModelledPrefixes(t inventory.GuestType) []string {
	p := qemuModelledPrefixes
	if t == inventory.LXC {
		p = lxcModelledPrefixes
	}
	out := slices.Clone(p)
	slices.Sort(out)
	return out
}

// BookkeepingKeys lists PVE's own bookkeeping keys of a guest type, sorted; BookkeepingPrefixes the
// prefixes of indexed ones (unused0, unused1, ...).
func BookkeepingKeys(t inventory.GuestType) []string {
	if t == inventory.LXC {
		return sortedKeys(lxcBookkeeping)
	}
	return sortedKeys(qemuBookkeeping)
}

// BookkeepingPrefixes lists the prefixes of indexed bookkeeping keys, sorted.
func BookkeepingPrefixes() []string { return slices.Clone(bookkeepingPrefixes) }
