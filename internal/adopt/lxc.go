package adopt

import (
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pvewire"
)

// lxc builds an LXC or TemplateCT manifest from a container's config.
func (c *guest) lxc() *manifest.Resource {
	s := &manifest.LXCSpec{Node: c.g.Node, VMID: c.g.VMID, State: c.state(), Tags: c.tags(),
		PVEDescription: c.description()}
	s.Template = c.template()
	s.CPU.Cores = c.cores()
	s.Memory = c.memory()
	if v, ok := c.cfg["swap"]; ok {
		if n, ok := pvewire.Int(v); ok && n >= 0 {
			s.Swap = manifest.FormatBytes(n * manifest.MiB)
		} else {
			c.incomplete("swap", "swap %q is not a number of MiB", v)
		}
	}
	if v, ok := c.cfg["arch"]; ok {
		s.Arch = v
	}
	c.rootfs(s)
	c.mountPoints(s)
	s.Networks = c.lxcNICs()
	dns := &manifest.DNS{}
	if live, ok := liveName(c.g); ok && live != c.name {
		dns.Hostname = live
	}
	if v, ok := c.cfg["nameserver"]; ok {
		dns.Nameservers = strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ',' || r == ';' || r == '\t' })
	}
	if v, ok := c.cfg["searchdomain"]; ok {
		dns.Domain = strings.TrimSpace(v)
	}
	if dns.Hostname != "" || len(dns.Nameservers) > 0 || dns.Domain != "" {
		s.DNS = dns
	}
	s.Options = c.lxcOptions()
	return &manifest.Resource{APIVersion: manifest.APIVersion, Kind: c.kind, Metadata: manifest.Metadata{Name: c.name}, Spec: s}
}

// template is the CTTemplate the container was created from. PVE does not keep it (it is a create parameter
// only), so a name given in an earlier adopted file is kept, and otherwise the manifest has none: the
// container is managed as it is, and reported with a gap, since without a template it cannot be re-created.
func (c *guest) template() string {
	name := c.r.in.Templates[c.g.VMID]
	if name == "" {
		c.gap("template", "unknown", "PVE keeps no record of the template a container was made from; the manifest names none, so ProxOps manages the container as it is but cannot re-create it: name its CTTemplate in spec.template"+c.candidates())
		return ""
	}
	res := c.r.lookup[manifest.Ref{Kind: manifest.KindCTTemplate, Name: name}]
	if res == nil || res.Artifact() == nil || !res.Artifact().PlacedOn(c.g.Node) {
		c.incompleteField("spec.template", "spec.template names CTTemplate %s, which no manifest places on node %s%s", name, c.g.Node, c.candidates())
		return name
	}
	return name
}

// candidates lists the CTTemplates placed on the container's node, as a hint.
func (c *guest) candidates() string {
	var names []string
	seen := map[string]bool{}
	for k, name := range c.r.artifacts {
		if k.kind == manifest.KindCTTemplate && k.node == c.g.Node && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return " (no CTTemplate is on node " + c.g.Node + ")"
	}
	return " (on node " + c.g.Node + ": " + strings.Join(sortedStrings(names), ", ") + ")"
}

// rootfs adopts the root volume: storage and size (reported or listed).
func (c *guest) rootfs(s *manifest.LXCSpec) {
	v, ok := c.cfg["rootfs"]
	if !ok && !c.g.Template {
		// pve-container update_lxc_config dies before every start and after every config write.
		c.refuse("missing 'rootfs' configuration: PVE starts no container without a root disk and fails every change to its config; give it a rootfs (pct set %d --rootfs <storage>:<GiB>) or remove it", c.g.VMID)
		return
	}
	if !ok {
		c.incompleteField("spec.root", "the container template has no rootfs on PVE")
		return
	}
	m := pvewire.ParseMountPoint(v)
	storage := m.Storage()
	if storage == "" {
		c.incompleteField("spec.root", "rootfs %s is not a storage volume the model covers", m.Volume)
		return
	}
	c.storageHolds("rootfs", storage, "rootdir")
	s.Root.Storage = storage
	token, hasToken := m.Size()
	if b, ok := c.size(m.Volume, token, hasToken); ok {
		s.Root.Size = manifest.FormatBytes(b)
	} else {
		c.gap("rootfs.size", "unknown", "rootfs ("+m.Volume+") has no size= and the storage listing of "+storage+" does not show it: the manifest leaves the size out, so ProxOps never grows the volume; set spec.root.size to own it")
	}
}

// mountPoints adopts the mount points: volumes (storage, size, path and the options PVE reports) and bind
// mounts of host paths.
func (c *guest) mountPoints(s *manifest.LXCSpec) {
	for _, slot := range indexedKeys(c.cfg, "mp") {
		v := c.cfg[slot]
		m := pvewire.ParseMountPoint(v)
		path := m.Props.Value("mp")
		if m.IsBind() {
			s.BindMounts = append(s.BindMounts, manifest.BindMount{HostPath: m.Volume, MountPoint: path, Slot: slot,
				ReadOnly: boolPtr(m.Props.Get("ro"))})
			continue
		}
		storage := m.Storage()
		if storage == "" {
			c.incompleteField("spec.mount-points", "%s (%s) is not a storage volume the model covers", slot, m.Volume)
			continue
		}
		c.storageHolds(slot, storage, "rootdir")
		mp := manifest.MountPoint{Storage: storage, MountPoint: path, Slot: slot}
		token, hasToken := m.Size()
		if b, ok := c.size(m.Volume, token, hasToken); ok {
			mp.Size = manifest.FormatBytes(b)
		} else {
			c.gap(slot+".size", "unknown", slot+" ("+m.Volume+") has no size= and the storage listing of "+storage+" does not show it: the manifest leaves the size out, so ProxOps never grows the volume; set its size to own it")
		}
		o := &manifest.MountOptions{ReadOnly: boolPtr(m.Props.Get("ro")), Backup: boolPtr(m.Props.Get("backup")),
			ACL: boolPtr(m.Props.Get("acl")), Quota: boolPtr(m.Props.Get("quota")), Shared: boolPtr(m.Props.Get("shared"))}
		o.MountOptions = m.Props.Value("mountoptions")
		if *o != (manifest.MountOptions{}) {
			mp.Options = o
		}
		s.MountPoints = append(s.MountPoints, mp)
	}
}

// lxcNICs adopts the network interfaces; the interface name only when it is not the slot's, the hardware
// address never.
func (c *guest) lxcNICs() []manifest.LXCNIC {
	var out []manifest.LXCNIC
	for _, slot := range indexedKeys(c.cfg, "net") {
		p := pvewire.ParseLXCNIC(c.cfg[slot]).Props
		n := manifest.LXCNIC{Bridge: p.Value("bridge"), Slot: slot, IP: p.Value("ip"), GW: p.Value("gw")}
		if name := p.Value("name"); name != slot {
			n.Iface = name
		}
		if tag, ok := p.Get("tag"); ok {
			if t, err := strconv.Atoi(tag); err == nil {
				n.Tag = manifest.Int(t)
			}
		}
		c.rate(slot, p, &n.RateLimit)
		n.Firewall = boolPtr(p.Get("firewall"))
		out = append(out, n)
	}
	return out
}

// lxcOptions adopts the options as reported, explicit 0s included, and the feature flags.
func (c *guest) lxcOptions() *manifest.LXCOptions {
	o := &manifest.LXCOptions{
		Unprivileged: boolPtr(c.cfg["unprivileged"], c.has("unprivileged")),
		Protection:   boolPtr(c.cfg["protection"], c.has("protection")),
		OnBoot:       boolPtr(c.cfg["onboot"], c.has("onboot")),
		Console:      boolPtr(c.cfg["console"], c.has("console")),
	}
	if v, ok := c.cfg["features"]; ok {
		f := pvewire.ParseFeatures(v)
		o.Nesting = boolPtr(f.Props.Get("nesting"))
		o.Keyctl = boolPtr(f.Props.Get("keyctl"))
		o.Fuse = boolPtr(f.Props.Get("fuse"))
	}
	if v, ok := c.cfg["startup"]; ok && v != "" {
		o.Startup = v
	}
	if *o == (manifest.LXCOptions{}) {
		return nil
	}
	return o
}
