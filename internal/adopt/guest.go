package adopt

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvewire"
)

// guest is one guest being adopted.
type guest struct {
	r    *run
	g    inventory.Guest
	node *inventory.Node
	// cfg is the config the manifest is made from: the running config (pending values applied) of a running
	// guest, the current one of a stopped guest, as the planner compares them.
	cfg  map[string]string
	kind manifest.Kind
	name string
	// why lists what keeps the manifest from being complete, by config key ("" for the guest as a whole).
	why      []reason
	refusals []string
	gaps     []inventory.Gap
	// sshDigest is the digest ssh-key-refs resolve to, for the self-check.
	sshDigest string
}

// reason is one thing that keeps a manifest from being complete: the config key it concerns and the
// manifest field it leaves unset ("" when none), so validation does not report the field again.
type reason struct{ key, field, msg string }

func (c *guest) incomplete(key, format string, args ...any) {
	c.why = append(c.why, reason{key: key, msg: fmt.Sprintf(format, args...)})
}

func (c *guest) incompleteField(field, format string, args ...any) {
	c.why = append(c.why, reason{field: field, msg: fmt.Sprintf(format, args...)})
}

func (c *guest) refuse(format string, args ...any) {
	c.refusals = append(c.refusals, fmt.Sprintf(format, args...))
}

// gap records a live setting the manifest does not carry although the model knows the key.
func (c *guest) gap(key, value, note string) {
	c.gaps = append(c.gaps, inventory.Gap{Setting: guestSetting(c.g, c.kind, c.name, key, pvewire.RedactValue(value)),
		Note: note})
}

func (c *guest) has(key string) bool {
	_, ok := c.cfg[key]
	return ok
}

// size is a volume's size: its size= token, else the storage listing's.
func (c *guest) size(volid string, token int64, hasToken bool) (int64, bool) {
	if hasToken && token > 0 {
		return token, true
	}
	if v, ok := c.r.volume(c.g.Node, volid); ok && v.Size > 0 {
		return v.Size, true
	}
	return 0, false
}

// storageHolds checks that a volume's storage is configured on the guest's node and holds the content; PVE
// refuses to start a guest with a volume on a storage that does not.
func (c *guest) storageHolds(key, storage, content string) {
	st, ok := c.node.Storage(storage)
	if !ok {
		c.incomplete(key, "%s is on storage %s, which node %s does not have", key, storage, c.g.Node)
		return
	}
	if !slices.Contains(st.Content, content) {
		c.refuse("%s: storage '%s' does not support content-type '%s'", key, storage, content)
	}
}

// boolPtr reads a reported boolean: nil when the key or token is absent (not owned), else its value
// (an explicit 0 stays false).
func boolPtr(v string, ok bool) *bool {
	if !ok {
		return nil
	}
	return manifest.Bool(pvewire.Bool(v))
}

// adoptGuests adopts every guest not already declared, in vmid order (so names are given out in that
// order).
func (r *run) adoptGuests() error {
	type placed struct {
		g    inventory.Guest
		node *inventory.Node
	}
	byVMID := map[int]placed{}
	var order []int
	for i := range r.nodes {
		n := &r.nodes[i]
		for _, g := range n.Guests {
			if g.Node == "" {
				g.Node = n.Node
			}
			if first, dup := byVMID[g.VMID]; dup {
				r.skip(Skipped{Kind: LiveKind(g), Node: g.Node, VMID: g.VMID,
					Reason: fmt.Sprintf("vmid %d is also on node %s, where it is adopted", g.VMID, first.g.Node)})
				continue
			}
			byVMID[g.VMID] = placed{g: g, node: n}
			order = append(order, g.VMID)
		}
	}
	slices.Sort(order)
	for _, vmid := range order {
		p := byVMID[vmid]
		if d := r.declared[vmid]; d != nil {
			r.skip(Skipped{Kind: LiveKind(p.g), Node: p.g.Node, VMID: vmid,
				Reason: fmt.Sprintf("declared in git as %s (%s)", d.Ref(), d.Source.File)})
			continue
		}
		if err := r.adoptGuest(p.g, p.node); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) adoptGuest(g inventory.Guest, node *inventory.Node) error {
	kind := LiveKind(g)
	pveName, _ := liveName(g)
	name := r.namers[kind].assign(GuestName(g.Type == inventory.LXC, pveName, g.VMID), itoa(g.VMID))
	c := &guest{r: r, g: g, node: node, kind: kind, name: name, cfg: effective(g)}
	c.checkState()
	var res *manifest.Resource
	if g.Type == inventory.LXC {
		res = c.lxc()
		if s := res.LXC(); s != nil {
			s.Pool = r.poolOf[g.VMID]
		}
	} else {
		res = c.qemu()
		if s := res.VM(); s != nil {
			s.Pool = r.poolOf[g.VMID]
		}
	}
	setFirewall(res, c.firewall(res))
	c.guestHA(res)
	// A key adoption could not carry at all is one gap with its whole value; its tokens are not repeated.
	whole := map[string]bool{}
	for _, x := range c.gaps {
		whole[x.Key] = true
	}
	for _, x := range modelGaps(g, kind, name) {
		if k, _, isToken := strings.Cut(x.Key, "."); !isToken || !whole[k] {
			r.res.Gaps = append(r.res.Gaps, x)
		}
	}
	r.res.Gaps = append(r.res.Gaps, c.gaps...)
	if len(c.refusals) > 0 {
		r.skip(Skipped{Kind: kind, Node: g.Node, VMID: g.VMID, Refused: true,
			Reason: "PVE refuses this config: " + strings.Join(c.refusals, "; ")})
		return nil
	}
	explained := map[string]bool{}
	for _, w := range c.why {
		if w.field != "" {
			explained[w.field] = true
		}
	}
	for _, d := range validationDiags(res) {
		if !explainedField(explained, d.Field) {
			c.incomplete("", "%s", diagText(d))
		}
	}
	if len(c.why) == 0 {
		c.selfCheck(res)
	}
	m := Manifest{Path: Path(kind, r.in.Cluster, name), Resource: res, Node: g.Node, VMID: g.VMID}
	seen := map[string]bool{}
	for _, w := range c.why {
		if !seen[w.msg] {
			seen[w.msg] = true
			m.Incomplete = append(m.Incomplete, w.msg)
		}
	}
	return r.emit(m, "vmid "+itoa(g.VMID)+" on "+g.Node)
}

// explainedField reports whether a field, or a field it belongs to, is already explained.
func explainedField(explained map[string]bool, field string) bool {
	for f := range explained {
		if field == f || strings.HasPrefix(field, f+".") || strings.HasPrefix(field, f+"[") {
			return true
		}
	}
	return false
}

// effective is a guest's config as the planner compares it: with pending values applied when it runs.
func effective(g inventory.Guest) map[string]string {
	if !g.Running() || g.Template {
		return g.Current()
	}
	return pvewire.PendingApplied(&g)
}

// checkState finds what keeps a guest from being adopted as it runs.
func (c *guest) checkState() {
	if _, ok := liveName(c.g); !ok {
		key := "name"
		if c.g.Type == inventory.LXC {
			key = "hostname"
		}
		c.r.warn("%s#%d has no %s on PVE: its manifest names it %s, and the first apply writes %s: %s (the plan shows it); name it on PVE first to keep another name",
			c.g.Node, c.g.VMID, key, c.name, key, c.name)
	}
	if c.g.Paused() {
		c.incomplete("", "the VM is paused: resume or stop it, then adopt again")
	}
	if c.g.Lock != "" {
		c.incomplete("", "locked (%s): %s, then adopt again", c.g.Lock, unlockHint(c.g))
	}
	for _, k := range c.g.PendingKeys() {
		c.incomplete("", "pending change to %s: apply or revert it on PVE first (a restart applies it), then adopt again", k)
	}
	for _, e := range c.g.Config {
		if !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value) {
			// A manifest is text: YAML would carry such a value as binary data, which no manifest reads back.
			c.incomplete(e.Key, "%s: its value is not UTF-8 text, which a manifest cannot hold: correct it on PVE, then adopt again",
				strings.ToValidUTF8(e.Key, "?"))
		}
	}
}

// unlockHint says what releases a guest's config lock.
func unlockHint(g inventory.Guest) string {
	unlock := "qm unlock"
	if g.Type == inventory.LXC {
		unlock = "pct unlock"
	}
	switch g.Lock {
	case "backup":
		return "wait for the backup to finish (a lock a failed backup left behind: " + unlock + ")"
	case "migrate":
		return "wait for the migration to finish"
	case "suspended":
		return "resume the VM"
	}
	return "wait for the " + g.Lock + " task to finish (a lock a failed task left behind: " + unlock + ")"
}

// state is the desired power state: the current one (templates have none).
func (c *guest) state() manifest.State {
	switch {
	case c.g.Template:
		return ""
	case c.g.Running():
		return manifest.StateStarted
	}
	return manifest.StateStopped
}

// tags are the live tags without the ownership tags.
func (c *guest) tags() []string {
	live, ok := c.cfg["tags"]
	if !ok {
		live = c.g.Tags
	}
	var out []string
	for _, t := range c.r.tagStyle().Parse(live) {
		if t != pveformat.OwnershipTag && t != pveformat.LegacyTag {
			out = append(out, t)
		}
	}
	return out
}

// description is the live description; a blank one is not owned.
func (c *guest) description() string {
	d := c.cfg["description"]
	if strings.TrimSpace(d) == "" {
		return ""
	}
	return strings.TrimRight(d, " \t\r\n")
}

// memory reads the memory key as a whole number of MiB.
func (c *guest) memory() manifest.Quantity {
	v, ok := c.cfg["memory"]
	if !ok {
		return "" // PVE's default (512 MiB): not owned, as PVE has it
	}
	mib, ok := pvewire.Memory(v)
	if !ok || mib <= 0 {
		c.incompleteField("spec.memory", "memory %q is not a number of MiB: set spec.memory", v)
		return ""
	}
	return manifest.FormatBytes(mib * manifest.MiB)
}

// cores reads the cores key.
func (c *guest) cores() int {
	v, ok := c.cfg["cores"]
	if !ok {
		return 0 // PVE's default (a VM: one core per socket; a container: every core of the host): not owned
	}
	n, ok := pvewire.Int(v)
	if !ok || n <= 0 {
		c.incompleteField("spec.cpu.cores", "cores %q is not a positive number: set spec.cpu.cores", v)
		return 0
	}
	return int(n)
}

// validationDiags are the errors manifest validation finds in a resource built in code.
func validationDiags(res *manifest.Resource) diag.List {
	var out diag.List
	for _, d := range manifest.Validate(res) {
		if d.Severity == diag.Error {
			out = append(out, d)
		}
	}
	return out
}

func diagText(d diag.Diagnostic) string {
	if d.Field != "" {
		return d.Field + ": " + d.Message
	}
	return d.Message
}

// validationErrors are validationDiags as text.
func validationErrors(res *manifest.Resource) []string {
	var out []string
	for _, d := range validationDiags(res) {
		out = append(out, diagText(d))
	}
	return out
}

// selfCheck compares the manifest with the config it was made from, as the planner does: any write other
// than the ownership tag means the manifest cannot express the guest, so it is INCOMPLETE rather than
// listed (it would change the guest).
func (c *guest) selfCheck(res *manifest.Resource) {
	resolved := manifest.Resolve(res)
	if style := c.r.tagStyle(); style.CaseSensitive {
		// Resolve lower-cases tags, as PVE's default tag-style does; this cluster keeps their case.
		if v, rv := res.VM(), resolved.VM(); v != nil && rv != nil {
			rv.Tags = style.Normalize(v.Tags)
		}
		if ct, rc := res.LXC(), resolved.LXC(); ct != nil && rc != nil {
			rc.Tags = style.Normalize(ct.Tags)
		}
	}
	d := pvewire.Desired{Resource: resolved, SSHKeysDigest: c.sshDigest, TagStyle: c.r.tagStyle(),
		Lookup: func(ref manifest.Ref) *manifest.Resource { return c.r.lookup[ref] }}
	var diff pvewire.Diff
	var err error
	if c.g.Type == inventory.LXC {
		diff, err = pvewire.LXC(d, c.cfg, c.g.Template)
	} else {
		diff, err = pvewire.QEMU(d, c.cfg, c.g.Template)
	}
	if err != nil {
		c.incomplete("", "%v", err)
		return
	}
	_, named := liveName(c.g)
	for _, ch := range diff.Changes {
		if ch.Key == "tags" || (!named && (ch.Key == "name" || ch.Key == "hostname")) {
			continue // the ownership tag, and the name of a nameless guest: the first apply writes both
		}
		before := pvewire.RedactValue(ch.Before)
		if pvewire.IsSecretKey(ch.Key) {
			before = pvewire.Redacted
		}
		if ch.Delete {
			c.incomplete(ch.Key, "%s: the manifest cannot express %s=%s (ProxOps would delete it)", ch.Field, ch.Key, before)
			continue
		}
		c.incomplete(ch.Key, "%s: the manifest cannot express %s=%s (ProxOps would write %s)", ch.Field, ch.Key, before, ch.After())
	}
	for _, rs := range diff.Resizes {
		c.incomplete(rs.Key, "%s: the manifest cannot express the size of %s (ProxOps would grow it to %s)", rs.Field, rs.Key, rs.Size())
	}
}

// tagStyle is how the cluster stores tags: with case-sensitive=1 in its tag-style, tags keep their case.
func (r *run) tagStyle() pveformat.TagStyle {
	return pveformat.TagStyle{CaseSensitive: r.in.Observed.TagsCaseSensitive()}
}
