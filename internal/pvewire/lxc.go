package pvewire

import (
	"errors"
	"fmt"
	"strings"

	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
)

func (g Desired) lxc() (*manifest.LXCSpec, error) {
	if g.Resource == nil || g.Resource.LXC() == nil {
		return nil, errors.New("not an LXC or TemplateCT")
	}
	return g.Resource.LXC(), nil
}

func volumeCreate(storage string, size manifest.Quantity) (string, error) {
	b, err := size.Bytes()
	if err != nil {
		return "", err
	}
	return storage + ":" + CreateSize(b), nil
}

// mountOptions sets the owned tokens of a mount point.
func mountOptions(p pveformat.Props, path string, o *manifest.MountOptions) pveformat.Props {
	if path != "" {
		p = p.With("mp", path)
	}
	if o == nil {
		return p
	}
	for _, b := range []struct {
		key string
		v   *bool
	}{{"acl", o.ACL}, {"backup", o.Backup}, {"quota", o.Quota}, {"ro", o.ReadOnly}, {"shared", o.Shared}} {
		if b.v != nil {
			p = p.With(b.key, boolString(*b.v))
		}
	}
	if o.MountOptions != "" {
		p = p.With("mountoptions", o.MountOptions)
	}
	return p
}

func mountPointCreate(m manifest.MountPoint) (string, error) {
	vol, err := volumeCreate(m.Storage, m.Size)
	if err != nil {
		return "", fmt.Errorf("%s: %w", m.Slot, err)
	}
	return MountPoint{Volume: vol, Props: mountOptions(nil, m.MountPoint, m.Options)}.String(), nil
}

func bindMountValue(live pveformat.Props, b manifest.BindMount) pveformat.Props {
	live = live.With("mp", b.MountPoint)
	if b.ReadOnly != nil {
		live = live.With("ro", boolString(*b.ReadOnly))
	}
	return live
}

func lxcNICSettings(p pveformat.Props, n manifest.LXCNIC, index int, create bool) pveformat.Props {
	if create || n.Iface != "" {
		p = p.With("name", n.IfaceOrDefault(index))
	}
	p = p.With("bridge", n.Bridge)
	if n.HWAddr != "" {
		p = p.With("hwaddr", strings.ToLower(n.HWAddr))
	}
	if create && n.Type != "" {
		p = p.With("type", n.Type)
	}
	if n.Tag != nil {
		if *n.Tag > 0 {
			p = p.With("tag", itoa(*n.Tag))
		} else {
			p = p.Without("tag")
		}
	}
	if n.RateLimit != nil {
		if *n.RateLimit > 0 {
			p = p.With("rate", itoa(*n.RateLimit))
		} else {
			p = p.Without("rate")
		}
	}
	if n.Firewall != nil {
		p = p.With("firewall", boolString(*n.Firewall))
	}
	if n.IP != "" {
		p = p.With("ip", n.IP)
	}
	if n.GW != "" {
		p = p.With("gw", n.GW)
	}
	return p
}

// featuresValue sets the owned feature flags on the live features (nesting always; keyctl and fuse only
// when create is true, since PVE lets only root@pam change them later).
func featuresValue(live Features, o *manifest.LXCOptions, create bool) Features {
	if o.Nesting != nil {
		live.Props = live.Props.With("nesting", boolString(*o.Nesting))
	}
	if create {
		if manifest.IsTrue(o.Keyctl) {
			live.Props = live.Props.With("keyctl", "1")
		}
		if manifest.IsTrue(o.Fuse) {
			live.Props = live.Props.With("fuse", "1")
		}
	}
	return live
}

// LXCCreate returns the parameters of POST /nodes/{node}/lxc for an LXC or TemplateCT: ostemplate, every
// owned key, spec.extra, pool (spec.pool), then start (1 only for an LXC whose desired state is started). The vmid is the
// operation's.
func LXCCreate(g Desired) (Values, error) {
	s, err := g.lxc()
	if err != nil {
		return nil, err
	}
	r := g.Resource
	if s.Template == "" {
		return nil, errors.New("spec.template: a container is created from a CTTemplate, and the manifest names none")
	}
	tmpl, err := g.artifact(manifest.KindCTTemplate, s.Template)
	if err != nil {
		return nil, err
	}
	out := Values{{Key: "ostemplate", Value: tmpl}}
	add := func(k, v string) { out = append(out, Value{Key: k, Value: v}) }
	add("hostname", r.Hostname())
	if s.PVEDescription != "" {
		add("description", s.PVEDescription)
	}
	add("tags", DesiredTagsIn(g.TagStyle, s.Tags, ""))
	if s.Arch != "" {
		add("arch", s.Arch)
	}
	if s.CPU.Cores > 0 {
		add("cores", itoa(s.CPU.Cores))
	}
	if !s.Memory.IsZero() {
		mem, err := memoryMiB(s.Memory)
		if err != nil {
			return nil, err
		}
		add("memory", itoa(mem))
	}
	if !s.Swap.IsZero() {
		swap, err := s.Swap.MiB()
		if err != nil {
			return nil, fmt.Errorf("swap: %w", err)
		}
		add("swap", itoa(swap))
	}
	root, err := volumeCreate(s.Root.Storage, s.Root.Size)
	if err != nil {
		return nil, fmt.Errorf("rootfs: %w", err)
	}
	add("rootfs", root)
	for _, m := range s.MountPoints {
		v, err := mountPointCreate(m)
		if err != nil {
			return nil, err
		}
		add(m.Slot, v)
	}
	for _, b := range s.BindMounts {
		add(b.Slot, MountPoint{Volume: b.HostPath, Props: bindMountValue(nil, b)}.String())
	}
	for i, n := range s.Networks {
		add(n.Slot, LXCNIC{Props: lxcNICSettings(nil, n, i, true)}.String())
	}
	if d := s.DNS; d != nil {
		if len(d.Nameservers) > 0 {
			add("nameserver", strings.Join(d.Nameservers, " "))
		}
		if d.Domain != "" {
			add("searchdomain", d.Domain)
		}
	}
	if o := s.Options; o != nil {
		if f := featuresValue(Features{}, o, true); len(f.Props) > 0 {
			add("features", f.String())
		}
		if o.Unprivileged != nil {
			add("unprivileged", boolString(*o.Unprivileged))
		}
		if o.Protection != nil {
			add("protection", boolString(*o.Protection))
		}
		if o.OnBoot != nil {
			add("onboot", boolString(*o.OnBoot))
		}
		if o.Console != nil {
			add("console", boolString(*o.Console))
		}
		if o.Startup != "" {
			add("startup", o.Startup)
		}
	}
	out = append(out, extraValues(s.Extra, LXCCreateOnly, true)...)
	if s.Pool != "" {
		add("pool", s.Pool)
	}
	if _, ok := s.Extra["start"]; !ok {
		add("start", boolString(r.Kind == manifest.KindLXC && r.DesiredState() == manifest.StateStarted))
	}
	return out, nil
}

// LXC compares an LXC's or TemplateCT's manifest with its live config (pending values applied). template
// marks a live PVE template.
func LXC(g Desired, live map[string]string, template bool) (Diff, error) {
	s, err := g.lxc()
	if err != nil {
		return Diff{}, err
	}
	r := g.Resource
	x := &differ{live: live, tagStyle: g.TagStyle}
	x.scalar("hostname", "spec.dns.hostname", r.Hostname())
	x.description("spec.pve-description", s.PVEDescription)
	x.tags(s.Tags)
	if s.Arch != "" {
		have := live["arch"]
		if have == "" {
			have = "amd64"
		}
		if have != s.Arch {
			x.setString("arch", "spec.arch", s.Arch)
		}
	}
	// An absent count or size is not owned: PVE lets the container use every core of the host, and gives it
	// 512 MiB.
	if have, ok := live["cores"]; s.CPU.Cores > 0 && (!ok || have != itoa(s.CPU.Cores)) {
		x.setString("cores", "spec.cpu.cores", itoa(s.CPU.Cores))
	}
	if !s.Memory.IsZero() {
		mem, err := memoryMiB(s.Memory)
		if err != nil {
			return Diff{}, err
		}
		x.intValue("memory", "spec.memory", mem, 512)
	}
	if !s.Swap.IsZero() {
		swap, err := s.Swap.MiB()
		if err != nil {
			return Diff{}, fmt.Errorf("swap: %w", err)
		}
		x.intValue("swap", "spec.swap", swap, 512)
	}
	if err := x.rootfs(s, template); err != nil {
		return Diff{}, err
	}
	declaredMP := map[string]bool{}
	for i, m := range s.MountPoints {
		declaredMP[m.Slot] = true
		if err := x.mountPoint(yamlIndex("spec.mount-points", i), m, template); err != nil {
			return Diff{}, err
		}
	}
	for i, b := range s.BindMounts {
		declaredMP[b.Slot] = true
		x.bindMount(yamlIndex("spec.bind-mounts", i), b)
	}
	x.liveOnly("mp", declaredMP, "mount point")
	declaredNICs := map[string]bool{}
	for i, n := range s.Networks {
		declaredNICs[n.Slot] = true
		x.lxcNIC(yamlIndex("spec.networks", i), n, i)
	}
	x.liveOnly("net", declaredNICs, "network interface")
	if d := s.DNS; d != nil {
		x.wordSet("nameserver", "spec.dns.nameservers", d.Nameservers)
		if d.Domain != "" {
			x.scalar("searchdomain", "spec.dns.domain", d.Domain)
		}
	}
	x.lxcOptions(s.Options)
	x.extra(s.Extra, LXCCreateOnly)
	x.holdGrowth()
	return x.d, nil
}

func (x *differ) rootfs(s *manifest.LXCSpec, template bool) error {
	const field = "spec.root"
	lv, ok := x.get("rootfs")
	if !ok {
		x.anomaly("rootfs", field, "the container has no rootfs on PVE")
		return nil
	}
	m := ParseMountPoint(lv)
	if st := m.Storage(); st != s.Root.Storage {
		x.volumeMismatch = true
		x.anomaly("rootfs", field+".storage", "rootfs is on storage %s on PVE, the manifest says %s; ProxOps never moves or recreates a volume", st, s.Root.Storage)
		return nil
	}
	if s.Root.Size.IsZero() {
		return nil // not owned: ProxOps never grows a volume whose size the manifest leaves out
	}
	want, err := s.Root.Size.Bytes()
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	have, known := m.Size()
	x.sizeCheck("rootfs", field+".size", lv, want, have, known, template)
	return nil
}

func (x *differ) mountPoint(field string, m manifest.MountPoint, template bool) error {
	lv, ok := x.get(m.Slot)
	if !ok {
		if m.Size.IsZero() {
			x.anomaly(m.Slot, field+".size", "%s is not on PVE and the manifest gives it no size: set the size to create it", m.Slot)
			return nil
		}
		v, err := mountPointCreate(m)
		if err != nil {
			return err
		}
		x.setString(m.Slot, field, v)
		return nil
	}
	live := ParseMountPoint(lv)
	if live.IsBind() {
		x.anomaly(m.Slot, field, "%s is a bind mount of %s on PVE, the manifest declares a volume; ProxOps does not swap them", m.Slot, live.Volume)
		return nil
	}
	if st := live.Storage(); st != m.Storage {
		x.volumeMismatch = true
		x.anomaly(m.Slot, field+".storage", "%s is on storage %s on PVE, the manifest says %s; ProxOps never moves or recreates a volume", m.Slot, st, m.Storage)
		return nil
	}
	if !m.Size.IsZero() {
		want, err := m.Size.Bytes()
		if err != nil {
			return fmt.Errorf("%s: %w", m.Slot, err)
		}
		have, known := live.Size()
		x.sizeCheck(m.Slot, field+".size", lv, want, have, known, template)
	}
	if mountOptionsDiffer(live.Props, m) {
		live.Props = mountOptions(live.Props, m.MountPoint, m.Options)
		x.setString(m.Slot, field, live.String())
	}
	return nil
}

// mountOptionsDiffer compares the owned tokens of a mount point; absent ro, backup, quota and shared are
// off; acl has no fixed default (absent means the file system's default).
func mountOptionsDiffer(p pveformat.Props, m manifest.MountPoint) bool {
	if m.MountPoint != "" && p.Value("mp") != m.MountPoint {
		return true
	}
	o := m.Options
	if o == nil {
		return false
	}
	for _, b := range []struct {
		key string
		v   *bool
	}{{"backup", o.Backup}, {"quota", o.Quota}, {"ro", o.ReadOnly}, {"shared", o.Shared}} {
		if b.v != nil && propBool(p, b.key, false) != *b.v {
			return true
		}
	}
	if o.ACL != nil {
		if v, ok := p.Get("acl"); !ok || boolValue(v) != *o.ACL {
			return true
		}
	}
	return o.MountOptions != "" && p.Value("mountoptions") != o.MountOptions
}

func (x *differ) bindMount(field string, b manifest.BindMount) {
	lv, ok := x.get(b.Slot)
	if !ok {
		x.setString(b.Slot, field, MountPoint{Volume: b.HostPath, Props: bindMountValue(nil, b)}.String())
		return
	}
	live := ParseMountPoint(lv)
	if !live.IsBind() {
		x.anomaly(b.Slot, field, "%s is a volume on PVE (%s), the manifest declares a bind mount; ProxOps does not swap them", b.Slot, live.Volume)
		return
	}
	if live.Volume != b.HostPath {
		x.anomaly(b.Slot, field+".host-path", "%s binds %s on PVE, the manifest says %s; ProxOps never re-points a bind mount", b.Slot, live.Volume, b.HostPath)
		return
	}
	if live.Props.Value("mp") != b.MountPoint || (b.ReadOnly != nil && propBool(live.Props, "ro", false) != *b.ReadOnly) {
		live.Props = bindMountValue(live.Props, b)
		x.setString(b.Slot, field, live.String())
	}
}

func (x *differ) lxcNIC(field string, n manifest.LXCNIC, index int) {
	lv, ok := x.get(n.Slot)
	if !ok {
		x.setString(n.Slot, field, LXCNIC{Props: lxcNICSettings(nil, n, index, true)}.String())
		return
	}
	live := ParseLXCNIC(lv)
	if lxcNICMatches(live.Props, n) {
		return
	}
	live.Props = lxcNICSettings(live.Props, n, index, false)
	x.setString(n.Slot, field, live.String())
}

func lxcNICMatches(p pveformat.Props, n manifest.LXCNIC) bool {
	if p.Value("bridge") != n.Bridge {
		return false
	}
	if n.Iface != "" && p.Value("name") != n.Iface {
		return false
	}
	if n.HWAddr != "" && !strings.EqualFold(p.Value("hwaddr"), n.HWAddr) {
		return false
	}
	if n.Tag != nil {
		tag := p.Value("tag")
		if want := *n.Tag; (want == 0 && tag != "") || (want > 0 && tag != itoa(want)) {
			return false
		}
	}
	if n.RateLimit != nil {
		rate, has := p.Get("rate")
		f, _ := Float(rate)
		if want := *n.RateLimit; (want == 0 && has) || (want > 0 && f != float64(want)) {
			return false
		}
	}
	if n.Firewall != nil && propBool(p, "firewall", false) != *n.Firewall {
		return false
	}
	if n.IP != "" && p.Value("ip") != n.IP {
		return false
	}
	return n.GW == "" || p.Value("gw") == n.GW
}

func (x *differ) lxcOptions(o *manifest.LXCOptions) {
	if o == nil {
		return
	}
	if o.Unprivileged != nil {
		have := false
		if v, ok := x.get("unprivileged"); ok {
			have = boolValue(v)
		}
		if have != *o.Unprivileged {
			x.anomaly("unprivileged", "spec.options.unprivileged", "the container is %s on PVE, the manifest says %s; PVE sets this only at create, so the container must be recreated by hand",
				privilege(have), privilege(*o.Unprivileged))
		}
	}
	x.boolean("protection", "spec.options.protection", o.Protection, false)
	x.boolean("onboot", "spec.options.onboot", o.OnBoot, false)
	x.boolean("console", "spec.options.console", o.Console, true)
	feats := ParseFeatures(x.live["features"])
	if o.Nesting != nil && feats.Flag("nesting") != *o.Nesting {
		// Only nesting is written: PVE lets API tokens change it, and the other live flags are kept.
		x.setString("features", "spec.options.nesting", featuresValue(feats, o, false).String())
	}
	for _, f := range []struct {
		name string
		v    *bool
	}{{"keyctl", o.Keyctl}, {"fuse", o.Fuse}} {
		if f.v != nil && feats.Flag(f.name) != *f.v {
			x.anomaly("features", "spec.options."+f.name, "feature %s is %s on PVE, the manifest says %s; PVE lets only root@pam change it, so ProxOps does not write it: change it by hand (pct set --features)",
				f.name, onOff(feats.Flag(f.name)), onOff(*f.v))
		}
	}
	if o.Startup != "" {
		x.scalar("startup", "spec.options.startup", o.Startup)
	}
}

func privilege(unprivileged bool) string {
	if unprivileged {
		return "unprivileged"
	}
	return "privileged"
}

func onOff(b bool) string {
	if b {
		return "enabled"
	}
	return "disabled"
}
