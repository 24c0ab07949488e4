package adopt

import (
	"cmp"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pvewire"
)

// KnownGap is a PVE config key the manifest model does not cover, with why.
type KnownGap struct {
	Type inventory.GuestType
	// Key is the config key, or the prefix of indexed keys (usb for usb0, usb1, ...) when Indexed.
	Key     string
	Indexed bool
	Note    string
}

// knownGaps are PVE's config keys (PVE 9 schema) that neither the model nor PVE's bookkeeping covers.
var knownGaps = []KnownGap{
	{inventory.QEMU, "affinity", false, "host CPU affinity is placement on the host, not the guest's shape"},
	{inventory.QEMU, "allow-ksm", false, "kernel same-page merging is a host memory policy"},
	{inventory.QEMU, "amd-sev", false, "AMD SEV confidential computing is not modelled"},
	{inventory.QEMU, "arch", false, "the emulated architecture is not modelled: guests run the host's"},
	{inventory.QEMU, "args", false, "raw QEMU arguments are not modelled (spec.cpu.flags is declarative only and never sent)"},
	{inventory.QEMU, "audio0", false, "audio devices are not modelled"},
	{inventory.QEMU, "autostart", false, "restart after a crash is not modelled"},
	{inventory.QEMU, "balloon", false, "memory ballooning is not modelled"},
	{inventory.QEMU, "bootdisk", false, "the legacy boot disk is superseded by the boot order (spec.options.boot-order)"},
	{inventory.QEMU, "cicustom", false, "custom cloud-init snippets are not modelled"},
	{inventory.QEMU, "citype", false, "the cloud-init format is not modelled (PVE derives it from the OS type)"},
	{inventory.QEMU, "ciupgrade", false, "the cloud-init package upgrade switch is not modelled"},
	{inventory.QEMU, "cpulimit", false, "CPU limits are not modelled"},
	{inventory.QEMU, "cpuunits", false, "CPU weights are not modelled"},
	{inventory.QEMU, "freeze", false, "freezing the CPU at start is not modelled"},
	{inventory.QEMU, "hookscript", false, "hook scripts are not modelled"},
	{inventory.QEMU, "hugepages", false, "huge pages are not modelled"},
	{inventory.QEMU, "intel-tdx", false, "Intel TDX confidential computing is not modelled"},
	{inventory.QEMU, "ivshmem", false, "inter-VM shared memory is not modelled"},
	{inventory.QEMU, "keephugepages", false, "huge pages are not modelled"},
	{inventory.QEMU, "keyboard", false, "the VNC keyboard layout is not modelled"},
	{inventory.QEMU, "kvm", false, "switching hardware virtualisation off is not modelled"},
	{inventory.QEMU, "localtime", false, "the real-time clock's time base is not modelled"},
	{inventory.QEMU, "migrate_downtime", false, "migration tuning is not modelled"},
	{inventory.QEMU, "migrate_speed", false, "migration tuning is not modelled"},
	{inventory.QEMU, "numa", true, "the NUMA topology is not modelled (spec.hardware.numa switches NUMA on or off)"},
	{inventory.QEMU, "ostype", false, "the guest OS type is not modelled"},
	{inventory.QEMU, "parallel", true, "parallel ports are not modelled"},
	{inventory.QEMU, "reboot", false, "what a guest reboot does is not modelled"},
	{inventory.QEMU, "rng0", false, "the VirtIO random number generator is not modelled"},
	{inventory.QEMU, "serial", true, "serial ports other than serial0 are not modelled"},
	{inventory.QEMU, "shares", false, "the ballooning weight is not modelled"},
	{inventory.QEMU, "smp", false, "the deprecated alias of sockets is not modelled"},
	{inventory.QEMU, "spice_enhancements", false, "SPICE enhancements are not modelled"},
	{inventory.QEMU, "startdate", false, "the real-time clock's start date is not modelled"},
	{inventory.QEMU, "tdf", false, "the time drift fix is not modelled"},
	{inventory.QEMU, "usb", true, "USB devices are not modelled"},
	{inventory.QEMU, "vcpus", false, "the number of hot-plugged vCPUs is not modelled (cores and sockets are)"},
	{inventory.QEMU, "virtiofs", true, "virtiofs shares are not modelled"},
	{inventory.QEMU, "vmstatestorage", false, "where RAM snapshots are stored is not modelled"},
	{inventory.QEMU, "watchdog", false, "the watchdog device is not modelled"},
	{inventory.LXC, "cmode", false, "the console mode is not modelled"},
	{inventory.LXC, "cpulimit", false, "CPU limits are not modelled"},
	{inventory.LXC, "cpuunits", false, "CPU weights are not modelled (spec.cpu.units is declarative only and never sent)"},
	{inventory.LXC, "debug", false, "debug logging at start is not modelled"},
	{inventory.LXC, "dev", true, "device passthrough is not modelled"},
	{inventory.LXC, "entrypoint", false, "the init command is not modelled"},
	{inventory.LXC, "env", false, "the init's environment is not modelled"},
	{inventory.LXC, "hookscript", false, "hook scripts are not modelled"},
	{inventory.LXC, "lxc", false, "raw lxc.* keys are not modelled (PVE lets only root write them; those that weaken isolation are security warnings)"},
	{inventory.LXC, "timezone", false, "the container's time zone is not modelled"},
	{inventory.LXC, "tty", false, "the number of TTYs is not modelled (spec.options.ttys is never sent)"},
}

// KnownGaps lists the config keys of both guest types that the model does not cover, with why: the table
// docs/gaps.md shows. Any other key PVE reports is a gap too, with a generic note.
func KnownGaps() []KnownGap { return slices.Clone(knownGaps) }

// smbiosNote explains the SMBIOS settings an operator set (manufacturer, product, version, serial, sku,
// family, base64): not modelled, unlike the uuid, which is PVE's identity of the guest.
const smbiosNote = "SMBIOS fields an operator set are not modelled; ProxOps keeps them as PVE has them (the uuid is the guest's identity and never a gap)"

// genericNote is the note of a key that is not in the table.
const genericNote = "not modelled; ProxOps leaves it as PVE has it"

// tokenNotes explain the common unmodelled settings inside modelled property strings, by token.
var tokenNotes = map[string]string{
	"cache": "the disk cache mode is not modelled", "backup": "whether backups include the volume is not modelled",
	"replicate": "replication is not modelled", "serial": "the disk serial is not modelled",
	"wwn": "the disk WWN is not modelled", "mtu": "the MTU is not modelled", "queues": "NIC queues are not modelled",
	"link_down": "a disconnected link is not modelled", "trunks": "VLAN trunks are not modelled",
	"x-vga": "primary GPU passthrough is not modelled", "rombar": "the PCI ROM BAR is not modelled",
	"romfile": "a PCI ROM file is not modelled", "mdev": "mediated devices are not modelled",
	"ip6": "IPv6 addresses are not modelled", "gw6": "IPv6 gateways are not modelled",
	"flags": "CPU flags are not modelled (spec.cpu.flags is declarative only)", "viommu": "a virtual IOMMU is not modelled",
	"ms-cert": "the Microsoft certificate of the EFI vars is kept as PVE has it",
}

// TokenNote is the note of one common unmodelled setting inside a modelled property string.
type TokenNote struct{ Token, Note string }

// TokenNotes lists the notes of the common unmodelled settings inside modelled property strings, by token.
func TokenNotes() []TokenNote {
	var out []TokenNote
	for t, n := range tokenNotes {
		out = append(out, TokenNote{Token: t, Note: n})
	}
	slices.SortFunc(out, func(a, b TokenNote) int { return cmp.Compare(a.Token, b.Token) })
	return out
}

// noteFor explains a gap: a whole key, or a token of a modelled key.
func noteFor(t inventory.GuestType, key, token string) string {
	if key == "smbios1" && token != "" {
		return smbiosNote
	}
	if token != "" {
		if n, ok := tokenNotes[token]; ok {
			return n + "; ProxOps keeps it as PVE has it"
		}
		return "setting " + token + " of " + key + " is not modelled; ProxOps keeps it as PVE has it"
	}
	if t == inventory.LXC && strings.HasPrefix(key, "lxc.") {
		key = "lxc" // a raw key: lxc.apparmor.profile, lxc.cgroup2.devices.allow, ...
	}
	for _, g := range knownGaps {
		if g.Type != t {
			continue
		}
		if g.Key == key && !g.Indexed {
			return g.Note
		}
		if rest, ok := strings.CutPrefix(key, g.Key); g.Indexed && ok && rest != "" && allDigits(rest) {
			return g.Note
		}
	}
	return genericNote
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// modelGaps are a guest's settings the model does not cover (pvewire.Gaps), as report entries.
func modelGaps(g inventory.Guest, kind manifest.Kind, name string) []inventory.Gap {
	var out []inventory.Gap
	for _, x := range pvewire.Gaps(g) {
		key := x.Key
		if x.Token != "" {
			key += "." + x.Token
		}
		out = append(out, inventory.Gap{Setting: guestSetting(g, kind, name, key, x.Value), Note: noteFor(g.Type, x.Key, x.Token)})
	}
	return out
}

// securityWarnings are a guest's settings that weaken its isolation (pvewire.SecurityWarnings), as report
// entries.
func securityWarnings(g inventory.Guest, kind manifest.Kind, name string) []inventory.SecurityWarning {
	var out []inventory.SecurityWarning
	for _, w := range pvewire.SecurityWarnings(g) {
		out = append(out, inventory.SecurityWarning{Setting: guestSetting(g, kind, name, w.Key, w.Value), Why: w.Why})
	}
	return out
}

// guestSetting is the live setting key=value of guest g, which the manifests call kind/name.
func guestSetting(g inventory.Guest, kind manifest.Kind, name, key, value string) inventory.Setting {
	return inventory.Setting{Kind: string(kind), Name: name, Node: g.Node, VMID: g.VMID, Key: key, Value: value}
}

// LiveKind is the kind a live guest maps to: VM, TemplateVM, LXC or TemplateCT.
func LiveKind(g inventory.Guest) manifest.Kind { return pvewire.LiveKind(&g) }

// liveName is a guest's PVE name: the qemu name or the lxc hostname from its config, else the listing's.
func liveName(g inventory.Guest) (string, bool) {
	key := "name"
	if g.Type == inventory.LXC {
		key = "hostname"
	}
	v, ok := g.Get(key)
	return v, ok
}

// ManagedGaps are the gaps of the guests ProxOps manages (managed maps their vmids to their declared
// Kind/name), as Gaps reports them: what a plan shows beside its operations.
func ManagedGaps(c inventory.Cluster, managed map[int]manifest.Ref) []inventory.Gap {
	var out []inventory.Gap
	for _, g := range Gaps(c, managed).Gaps {
		if g.Managed {
			out = append(out, g)
		}
	}
	return out
}

// Gaps lists every live setting of a cluster's guests that the manifest model does not cover, and every
// setting that weakens a guest's isolation from its host: what the adopter reports continuously. managed maps the vmids of the guests ProxOps manages to their declared
// Kind/name; the others are named as adoption would name them. A vmid found on two nodes is reported on the
// first.
func Gaps(c inventory.Cluster, managed map[int]manifest.Ref) inventory.GapReport {
	nodes := slices.Clone(c.Nodes)
	slices.SortFunc(nodes, func(a, b inventory.Node) int { return cmp.Compare(a.Node, b.Node) })
	seen := map[int]bool{}
	var guests []inventory.Guest
	for _, n := range nodes {
		for _, g := range n.Guests {
			if seen[g.VMID] {
				continue
			}
			seen[g.VMID] = true
			if g.Node == "" {
				g.Node = n.Node
			}
			guests = append(guests, g)
		}
	}
	slices.SortFunc(guests, func(a, b inventory.Guest) int { return cmp.Compare(a.VMID, b.VMID) })
	namers := map[manifest.Kind]*namer{}
	for _, k := range manifest.Kinds {
		namers[k] = &namer{kind: k, cluster: c.Name, taken: map[string]bool{}, occupied: map[string]bool{}}
	}
	for _, ref := range managed {
		if n := namers[ref.Kind]; n != nil {
			n.taken[ref.Name] = true
		}
	}
	rep := inventory.GapReport{Cluster: c.Name}
	for _, g := range guests {
		kind, isManaged := LiveKind(g), false
		var name string
		if ref, ok := managed[g.VMID]; ok {
			kind, name, isManaged = ref.Kind, ref.Name, true
		} else {
			pveName, _ := liveName(g)
			name = namers[kind].assign(GuestName(g.Type == inventory.LXC, pveName, g.VMID), itoa(g.VMID))
		}
		for _, x := range modelGaps(g, kind, name) {
			x.Managed = isManaged
			rep.Gaps = append(rep.Gaps, x)
		}
		for _, w := range securityWarnings(g, kind, name) {
			w.Managed = isManaged
			rep.Security = append(rep.Security, w)
		}
	}
	rep.Normalize()
	return rep
}
