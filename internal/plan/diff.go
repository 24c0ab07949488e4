package plan

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvewire"
	"github.com/proxops/proxops/internal/repo"
)

// Diff computes the plan that makes a cluster's live state equal to its desired state. It is pure and
// deterministic: the same input (in any order) gives the same plan. A cluster that cannot be planned (errors
// in its repository, secrets that do not resolve, nodes that were not observed) gives a *RejectedError and
// no plan.
func Diff(in Input) (Plan, error) {
	if in.Cluster == nil {
		return Plan{}, errors.New("plan: no desired cluster")
	}
	name := in.Cluster.Name
	if ds := in.Cluster.Diagnostics; ds.HasErrors() {
		return Plan{}, reject(name, RejectParse, ds.Errors().Sorted())
	}
	d := newDiffer(in)
	if cc := in.Cluster.Config; cc != nil && cc.ClearText() {
		// Accepted by insecure-http: true (validation refuses it otherwise), and said on every plan.
		d.finding(FindingWarning, "", "", 0, "pve.clusters."+in.Cluster.Name+".base-url", repo.ClearTextWarning)
	}
	if diags := d.resolveSecrets(); len(diags) > 0 {
		return Plan{}, reject(name, RejectSecrets, diags)
	}
	if diags := d.checkNodes(); len(diags) > 0 {
		return Plan{}, reject(name, RejectObserve, diags)
	}
	// The cluster objects' checks: each needs the live objects of its kind observed.
	for _, check := range []func() (diag.List, bool){d.checkObjects, d.checkBackupJobs, d.checkHA} {
		if diags, unobserved := check(); unobserved {
			return Plan{}, reject(name, RejectObserve, diags)
		} else if len(diags) > 0 {
			return Plan{}, reject(name, RejectParse, diags)
		}
	}
	objDiags, objUnobserved := d.checkFirewallObjects()
	cfDiags, cfUnobserved := d.checkClusterFirewall()
	if objUnobserved || cfUnobserved {
		var diags diag.List
		if objUnobserved {
			diags = append(diags, objDiags...)
		}
		if cfUnobserved {
			diags = append(diags, cfDiags...)
		}
		return Plan{}, reject(name, RejectObserve, diags.Sorted())
	}
	if diags := append(append(objDiags, cfDiags...), d.checkFirewallRefs()...); len(diags) > 0 {
		return Plan{}, reject(name, RejectParse, diags.Sorted())
	}
	d.planFirewallObjects()
	d.planClusterFirewall()
	d.planPools()
	d.planBackupJobs()
	for _, r := range d.resources {
		if r.Kind.IsArtifact() {
			d.planArtifact(r)
		}
	}
	for _, r := range d.resources {
		if r.Kind.IsGuest() {
			if err := d.planGuest(r); err != nil {
				return Plan{}, reject(name, RejectInternal, diag.List{{Severity: diag.Error, File: r.Source.File,
					Ref: r.Ref().String(), Message: err.Error()}})
			}
		}
	}
	d.suspendGuests()
	if len(d.cannotCreate) > 0 {
		return Plan{}, reject(name, RejectCreate, d.cannotCreate.Sorted())
	}
	d.planCreatedGuestPools()
	d.planCreatedGuestHA()
	d.planHARules()
	d.linkGuestFirewalls()
	d.planPrunes()
	d.planObjectPrunes()
	d.planBackupJobPrunes()
	d.planHAPrunes()
	d.planFirewallObjectPrunes()
	return d.finish(), nil
}

func reject(cluster, reason string, diags diag.List) error {
	return &RejectedError{Rejection: Rejection{Cluster: cluster, Reason: reason, Diagnostics: diags}}
}

// liveGuest is a guest found on an observed node.
type liveGuest struct {
	g    *inventory.Guest
	node *inventory.Node
}

// unit is the sequence of operations of one resource (or one prune), ordered as a whole.
type unit struct {
	ref   manifest.Ref
	level int
	node  string
	vmid  int
	ops   []Operation
	prune bool
}

func (u *unit) last() string {
	if len(u.ops) == 0 {
		return ""
	}
	return u.ops[len(u.ops)-1].ID
}

type differ struct {
	in        Input
	cluster   string
	resources []*manifest.Resource
	byRef     map[manifest.Ref]*manifest.Resource
	levels    map[manifest.Ref]int
	live      map[int]liveGuest
	owned     map[int]Owned
	sshDigest map[manifest.Ref]string

	units    []*unit
	unitOf   map[manifest.Ref]*unit
	findings []Finding
	records  []Record
	// downloads maps an artifact and node to the download operation that puts it there.
	downloads map[manifest.Ref]map[string]string
	opIDs     map[string]bool
	held      []string
	heldWhy   []string
	// fwHeld are the guests whose firewall operation could lock everyone out (held for confirmation).
	fwHeld []string
	// clusterFWHeld says why the cluster's firewall operation could lock administrators out ("": it cannot).
	clusterFWHeld string
	// cannotCreate are the guests to create whose manifests lack what creating needs.
	cannotCreate diag.List
	// tagStyle is how the cluster stores tags (its tag-style).
	tagStyle pveformat.TagStyle
	// migrations are the ids of the plan's migrate operations.
	migrations []string
	// objs is the state of the cluster objects (objects.go).
	objs objects
	// ha is the state of the cluster's HA stack (ha.go).
	ha haState
	// fw is the state of the cluster's firewall objects (fwobjects.go).
	fw fwState
}

func newDiffer(in Input) *differ {
	d := &differ{in: in, cluster: in.Cluster.Name, byRef: map[manifest.Ref]*manifest.Resource{},
		live: map[int]liveGuest{}, owned: map[int]Owned{}, sshDigest: map[manifest.Ref]string{},
		unitOf: map[manifest.Ref]*unit{}, downloads: map[manifest.Ref]map[string]string{}, opIDs: map[string]bool{}}
	d.tagStyle = pveformat.TagStyle{CaseSensitive: in.Observed.TagsCaseSensitive()}
	for _, r := range in.Cluster.Resources {
		rr := manifest.Resolve(r)
		keepTagCase(d.tagStyle, r, rr)
		d.resources = append(d.resources, rr)
		d.byRef[rr.Ref()] = rr
	}
	slices.SortFunc(d.resources, func(a, b *manifest.Resource) int { return manifest.CompareRefs(a.Ref(), b.Ref()) })
	if in.Cluster.Graph != nil {
		d.levels = in.Cluster.Graph.Levels()
	}
	// The observed state in canonical order (inventories arrive sorted; the plan must not depend on it).
	nodes := slices.Clone(in.Observed.Nodes)
	slices.SortFunc(nodes, func(a, b inventory.Node) int { return cmp.Compare(a.Node, b.Node) })
	for i := range nodes {
		n := &nodes[i]
		n.Guests, n.Storages = slices.Clone(n.Guests), slices.Clone(n.Storages)
		n.Volumes, n.ListedStorages = slices.Clone(n.Volumes), slices.Clone(n.ListedStorages)
		n.Pools, n.BackupJobs = slices.Clone(n.Pools), slices.Clone(n.BackupJobs)
		n.Sort()
		for j := range n.Guests {
			g := &n.Guests[j]
			if _, dup := d.live[g.VMID]; !dup {
				d.live[g.VMID] = liveGuest{g: g, node: n}
			}
		}
	}
	d.in.Observed.Nodes = nodes
	for _, o := range in.Owned {
		if prev, dup := d.owned[o.VMID]; !dup || compareOwned(o, prev) < 0 {
			d.owned[o.VMID] = o
		}
	}
	d.initObjects()
	d.initHA()
	d.initFirewallObjects()
	return d
}

func compareOwned(a, b Owned) int {
	return cmp.Or(cmp.Compare(a.Ref, b.Ref), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Fingerprint, b.Fingerprint))
}

func (d *differ) lookup(ref manifest.Ref) *manifest.Resource { return d.byRef[ref] }

func (d *differ) node(name string) *inventory.Node {
	i, ok := slices.BinarySearchFunc(d.in.Observed.Nodes, name, func(n inventory.Node, s string) int { return cmp.Compare(n.Node, s) })
	if !ok {
		return nil
	}
	return &d.in.Observed.Nodes[i]
}

func diagAt(r *manifest.Resource, field, format string, args ...any) diag.Diagnostic {
	pos := r.Source.Pos(field)
	return diag.Diagnostic{Severity: diag.Error, File: r.Source.File, Line: pos.Line, Column: pos.Column,
		Ref: r.Ref().String(), Field: field, Message: fmt.Sprintf(format, args...)}
}

// resolveSecrets asks the resolver for the digest of every ssh-key-refs list and checks every password
// reference; each failure is a diagnostic.
func (d *differ) resolveSecrets() diag.List {
	var out diag.List
	for _, r := range d.resources {
		s := r.VM()
		if s == nil || s.CloudInitData == nil {
			continue
		}
		c := s.CloudInitData
		if len(c.SSHKeyRefs) > 0 {
			if d.in.Secrets == nil {
				out = append(out, diagAt(r, "spec.cloud-init-data.ssh-key-refs", "the cluster has no secrets file"))
			} else if dg, err := d.in.Secrets.SSHKeysDigest(c.SSHKeyRefs); err != nil {
				out = append(out, diagAt(r, "spec.cloud-init-data.ssh-key-refs", "%v", err))
			} else {
				d.sshDigest[r.Ref()] = dg
			}
		}
		if c.CIPasswordRef != "" {
			if d.in.Secrets == nil {
				out = append(out, diagAt(r, "spec.cloud-init-data.ci-password-ref", "the cluster has no secrets file"))
			} else if err := d.in.Secrets.CheckPassword(c.CIPasswordRef); err != nil {
				out = append(out, diagAt(r, "spec.cloud-init-data.ci-password-ref", "%v", err))
			}
		}
	}
	return out.Sorted()
}

// checkNodes requires an inventory of every node a resource is placed on.
func (d *differ) checkNodes() diag.List {
	var out diag.List
	for _, r := range d.resources {
		var nodes []string
		field := "spec.node"
		if a := r.Artifact(); a != nil {
			nodes, field = a.Nodes, "spec.nodes"
		} else if n := r.Node(); n != "" {
			if _, found := d.live[r.VMID()]; found {
				continue
			}
			nodes = []string{n}
		}
		for _, n := range nodes {
			if d.node(n) == nil {
				out = append(out, diagAt(r, field, "node %s was not observed", n))
			}
		}
	}
	return out.Sorted()
}

func (d *differ) addUnit(u *unit) {
	d.units = append(d.units, u)
	if !u.prune {
		d.unitOf[u.ref] = u
	}
}

func (d *differ) level(ref manifest.Ref) int { return d.levels[ref] }

func (d *differ) finding(kind FindingKind, ref, node string, vmid int, field, msg string) {
	d.findings = append(d.findings, Finding{Kind: kind, Ref: ref, Node: node, VMID: vmid, Field: field, Message: msg})
}

// opID makes an operation id unique within the plan (a second operation of the same action on the same guest
// gets its key appended).
func (d *differ) opID(id string) string {
	if !d.opIDs[id] {
		d.opIDs[id] = true
		return id
	}
	for i := 2; ; i++ {
		if c := id + "-" + strconv.Itoa(i); !d.opIDs[c] {
			d.opIDs[c] = true
			return c
		}
	}
}

func typeWord(t inventory.GuestType) string {
	if t == inventory.LXC {
		return "container"
	}
	return "VM"
}

func guestPrefix(t inventory.GuestType) string {
	if t == inventory.LXC {
		return "ct"
	}
	return "vm"
}

func guestType(k manifest.Kind) inventory.GuestType {
	if k.IsContainer() {
		return inventory.LXC
	}
	return inventory.QEMU
}

func guestOpID(t inventory.GuestType, vmid int, action Action, suffix string) string {
	id := guestPrefix(t) + "-" + strconv.Itoa(vmid) + "-" + string(action)
	if suffix != "" {
		id += "-" + suffix
	}
	return id
}

func kvs(vs pvewire.Values) []KV {
	if len(vs) == 0 {
		return nil
	}
	out := make([]KV, len(vs))
	for i, v := range vs {
		out[i] = KV{Key: v.Key, Value: v.Value, SecretRefs: slices.Clone(v.SecretRefs)}
	}
	return out
}

// ---- artifacts

func (d *differ) planArtifact(r *manifest.Resource) {
	a := r.Artifact()
	volid := pvewire.ArtifactVolid(r)
	ref := r.Ref()
	u := &unit{ref: ref, level: d.level(ref)}
	d.downloads[ref] = map[string]string{}
	sharedDone := false
	for _, n := range a.Nodes {
		inv := d.node(n)
		st, ok := inv.Storage(a.Storage)
		if !ok {
			d.finding(FindingAnomaly, ref.String(), n, 0, "spec.storage",
				fmt.Sprintf("storage %s is not available on node %s; %s cannot be downloaded there", a.Storage, n, a.Filename))
			continue
		}
		if st.Shared {
			if sharedDone {
				continue
			}
			sharedDone = true
			d.planSharedArtifact(r, u, volid)
			continue
		}
		if !inv.Listed(a.Storage) {
			d.finding(FindingSkipped, ref.String(), n, 0, "spec.storage",
				fmt.Sprintf("the content of storage %s on %s was not listed; whether %s is there is unknown, so it is not downloaded", a.Storage, n, a.Filename))
			continue
		}
		if hasVolume(inv, volid) {
			continue
		}
		u.ops = append(u.ops, d.downloadOp(r, n, []string{n}))
	}
	if len(u.ops) > 0 {
		d.addUnit(u)
	}
}

// planSharedArtifact downloads a file onto a shared storage once: it is present when any node that lists the
// storage has it; otherwise the first placement node that listed it downloads it for all, or, when the
// storage was listed on another node only (a shared storage is listed once per cluster), the first placement
// node that holds it.
func (d *differ) planSharedArtifact(r *manifest.Resource, u *unit, volid string) {
	a := r.Artifact()
	var sharing, listed []string
	known := false
	for _, inv := range d.in.Observed.Nodes {
		st, ok := inv.Storage(a.Storage)
		if !ok || !st.Shared {
			continue
		}
		if inv.Listed(a.Storage) {
			known = true
			if hasVolume(&inv, volid) {
				return
			}
		}
	}
	for _, n := range a.Nodes {
		inv := d.node(n)
		if st, ok := inv.Storage(a.Storage); ok && st.Shared {
			sharing = append(sharing, n)
			if inv.Listed(a.Storage) {
				listed = append(listed, n)
			}
		}
	}
	slices.Sort(listed)
	if len(listed) == 0 && known {
		listed = slices.Sorted(slices.Values(sharing))
	}
	if len(listed) == 0 {
		d.finding(FindingSkipped, r.Ref().String(), sharing[0], 0, "spec.storage",
			fmt.Sprintf("the content of shared storage %s was not listed; whether %s is there is unknown, so it is not downloaded", a.Storage, a.Filename))
		return
	}
	u.ops = append(u.ops, d.downloadOp(r, listed[0], sharing))
}

func hasVolume(inv *inventory.Node, volid string) bool {
	_, ok := slices.BinarySearchFunc(inv.Volumes, volid, func(v inventory.Volume, id string) int { return cmp.Compare(v.Volid, id) })
	return ok
}

var artifactWhat = map[manifest.Kind]string{
	manifest.KindISO:        "download",
	manifest.KindCTTemplate: "download ct-template (vztmpl)",
	manifest.KindDiskImage:  "download disk image (import)",
}

func (d *differ) downloadOp(r *manifest.Resource, node string, covers []string) Operation {
	a := r.Artifact()
	id := d.opID(r.Kind.Root() + "-" + node + "-" + a.Storage + "-" + a.Filename + "-download")
	for _, n := range covers {
		d.downloads[r.Ref()][n] = id
	}
	params := []KV{{Key: "url", Value: a.URL}, {Key: "filename", Value: a.Filename}, {Key: "content", Value: r.Kind.Content()}}
	if a.Checksum != nil && a.Checksum.Value != "" {
		params = append(params, KV{Key: "checksum", Value: a.Checksum.Value}, KV{Key: "checksum-algorithm", Value: a.Checksum.Algorithm})
	}
	return Operation{ID: id, Cluster: d.cluster, Node: node, Ref: r.Ref().String(), Action: ActionDownload,
		Params: params, Storage: a.Storage, Precondition: Precondition{ExpectAbsent: true},
		Reason:  fmt.Sprintf("%s: %s not present on storage %s on %s; will %s", r.Ref(), a.Filename, a.Storage, node, artifactWhat[r.Kind]),
		Changes: []Change{{Field: "volume", Before: "", After: pvewire.ArtifactVolid(r)}}}
}

// ---- guests

func (d *differ) desired(r *manifest.Resource) pvewire.Desired {
	return pvewire.Desired{Resource: r, Lookup: d.lookup, SSHKeysDigest: d.sshDigest[r.Ref()], TagStyle: d.tagStyle}
}

func liveName(g *inventory.Guest) string {
	key := "name"
	if g.Type == inventory.LXC {
		key = "hostname"
	}
	if v, ok := g.Get(key); ok {
		return v
	}
	return g.Name
}

// nameless reports a guest without a name (qemu) or hostname (lxc) in its config whose manifest gives it the
// name adoption generates for it (vm-<vmid>, ct-<vmid>): ProxOps takes it over and writes the name, which the
// plan shows. Any other name is held back as a possible vmid typo.
func nameless(g *inventory.Guest, r *manifest.Resource) bool {
	_, named := g.Get(nameKey(g))
	return !named && desiredName(r) == generatedName(g)
}

// nameKey is the config key of a guest's name: name (qemu) or hostname (lxc).
func nameKey(g *inventory.Guest) string {
	if g.Type == inventory.LXC {
		return "hostname"
	}
	return "name"
}

// generatedName is the name adoption gives a guest without one: vm-<vmid> or ct-<vmid>.
func generatedName(g *inventory.Guest) string {
	if g.Type == inventory.LXC {
		return "ct-" + strconv.Itoa(g.VMID)
	}
	return "vm-" + strconv.Itoa(g.VMID)
}

func desiredName(r *manifest.Resource) string {
	if r.Kind.IsContainer() {
		return r.Hostname()
	}
	return r.PVEName()
}

func liveTags(g *inventory.Guest) string {
	if v, ok := g.Get("tags"); ok {
		return v
	}
	return g.Tags
}

// checkStorages warns about a cloud-init drive on a storage without the images content type: PVE creates
// the drive there, and the VM fails only when it starts.
func (d *differ) checkStorages(r *manifest.Resource, node string) {
	s := r.VM()
	if s == nil || !s.CloudInitEnabled() {
		return
	}
	inv := d.node(node)
	if inv == nil {
		return
	}
	st, ok := inv.Storage(s.Hardware.CloudInit.Storage)
	if ok && !slices.Contains(st.Content, "images") {
		d.finding(FindingWarning, r.Ref().String(), node, r.VMID(), "spec.hardware.cloud-init.storage",
			fmt.Sprintf("storage %s on %s does not hold images content; the cloud-init drive can be created there, but the VM will fail to start", st.ID, node))
	}
}

// pathStorageTypes are the storage types with a directory path: PVE refuses to turn a container whose
// volumes live there into a template ("Directory storage ... does not support container templates!").
var pathStorageTypes = []string{"dir", "nfs", "cifs", "glusterfs", "cephfs", "btrfs"}

// templateCTStorage returns a storage of a TemplateCT that PVE cannot make a template on, if any.
func (d *differ) templateCTStorage(r *manifest.Resource, node string) (inventory.Storage, bool) {
	s := r.LXC()
	if r.Kind != manifest.KindTemplateCT || s == nil {
		return inventory.Storage{}, false
	}
	inv := d.node(node)
	if inv == nil {
		return inventory.Storage{}, false
	}
	ids := []string{s.Root.Storage}
	for _, m := range s.MountPoints {
		ids = append(ids, m.Storage)
	}
	for _, id := range ids {
		if st, ok := inv.Storage(id); ok && slices.Contains(pathStorageTypes, st.Type) {
			return st, true
		}
	}
	return inventory.Storage{}, false
}

func (d *differ) planGuest(r *manifest.Resource) error {
	ref := r.Ref()
	node := r.Node()
	lg, found := d.live[r.VMID()]
	if found {
		node = lg.g.Node
	}
	d.checkStorages(r, node)
	if st, bad := d.templateCTStorage(r, node); bad && !(found && lg.g.Template) {
		d.finding(FindingAnomaly, ref.String(), node, r.VMID(), "spec.root.storage",
			fmt.Sprintf("storage %s is a %s storage: PVE does not make templates of containers on directory storages; use a storage such as lvmthin or zfspool", st.ID, st.Type))
		return nil
	}
	if !found {
		return d.planCreate(r)
	}
	g := lg.g
	vmid, want := r.VMID(), guestType(r.Kind)
	if g.Type != want {
		d.finding(FindingAnomaly, ref.String(), g.Node, vmid, "spec.vmid", fmt.Sprintf("vmid %d is a %s on PVE (%s), the manifest declares a %s; ProxOps does not touch it", vmid, typeWord(g.Type), liveName(g), typeWord(want)))
		return nil
	}
	var moveTo string
	if g.Node != r.Node() {
		var hold bool
		if moveTo, hold = d.placement(r, g); hold {
			return nil
		}
	}
	tagged := pveformat.Owned(liveTags(g))
	if !tagged && liveName(g) != desiredName(r) && !nameless(g, r) {
		msg := fmt.Sprintf("vmid %d on PVE is %q without the proxops tag, the manifest names it %q; ProxOps does not take it over (a vmid typo?): fix the manifest, or tag or adopt the guest", vmid, liveName(g), desiredName(r))
		if _, named := g.Get(nameKey(g)); !named {
			msg = fmt.Sprintf("vmid %d on PVE has no %s and no proxops tag, the manifest names it %q; ProxOps takes a nameless guest over only under the name adoption gives it (%s) (a vmid typo?): fix the manifest, or tag or adopt the guest", vmid, nameKey(g), desiredName(r), generatedName(g))
		}
		d.finding(FindingAnomaly, ref.String(), g.Node, vmid, "spec.vmid", msg)
		return nil
	}
	fp := inventory.Fingerprint(*g)
	rec, hasRec := d.owned[vmid]
	recMatches := hasRec && rec.Fingerprint != "" && rec.Fingerprint == fp
	markTemplate := false
	switch {
	case r.Kind.IsTemplate() && !g.Template:
		if !(tagged && recMatches) {
			msg := fmt.Sprintf("vmid %d is not a template on PVE; turning it into one is irreversible, so ProxOps does it only for a guest it owns (tagged proxops and recorded): tag it proxops to confirm, or convert it by hand", vmid)
			if tagged {
				msg = fmt.Sprintf("vmid %d is not a template on PVE and carries the proxops tag; ProxOps records it now and turns it into a template (irreversible) in the next plan unless the manifest changes", vmid)
				d.record(r, g, fp, "")
			}
			d.finding(FindingAnomaly, ref.String(), g.Node, vmid, "kind", msg)
			return nil
		}
		markTemplate = true
	case !r.Kind.IsTemplate() && g.Template:
		other := manifest.KindTemplateVM
		if r.Kind.IsContainer() {
			other = manifest.KindTemplateCT
		}
		d.finding(FindingAnomaly, ref.String(), g.Node, vmid, "kind",
			fmt.Sprintf("vmid %d is a PVE template, the manifest declares a %s; PVE cannot turn a template back: declare it as a %s or replace the template by hand", vmid, r.Kind, other))
		return nil
	}
	return d.planUpdate(&guestUpdate{r: r, g: g, fp: fp, tagged: tagged,
		recorded: hasRec && rec.Ref == ref.String() && rec.Node == g.Node && recMatches, toTemplate: markTemplate, moveTo: moveTo})
}

// record stores a declared guest in the ownership inventory (after an operation, or at once).
func (d *differ) record(r *manifest.Resource, g *inventory.Guest, fp, after string) {
	d.records = append(d.records, Record{Owned: Owned{VMID: r.VMID(), Ref: r.Ref().String(), Node: g.Node, Fingerprint: fp,
		AppliedNode: d.appliedNodeFor(r, g)}, After: after})
}

func hasPending(g *inventory.Guest) bool {
	return slices.ContainsFunc(g.Config, func(e inventory.Entry) bool { return e.HasPending || e.Delete > 0 })
}

// effective returns a guest's config with its pending values applied: what PVE will run after a restart.
// A volume's size is the current one: a resize updates the current value only, so a pending value's size
// token may be stale.
func effective(g *inventory.Guest) (current, eff map[string]string) {
	current = g.Current()
	eff = current
	if !hasPending(g) {
		return current, eff
	}
	return current, pvewire.PendingApplied(g)
}

func (d *differ) guestDiff(r *manifest.Resource, cfg map[string]string, template bool) (pvewire.Diff, error) {
	if r.Kind.IsQEMU() {
		return pvewire.QEMU(d.desired(r), cfg, template)
	}
	return pvewire.LXC(d.desired(r), cfg, template)
}

// guestUpdate is the state of one update plan for a guest that exists: what the steps in updateSteps read and
// extend, in order.
type guestUpdate struct {
	r   *manifest.Resource
	g   *inventory.Guest
	ref manifest.Ref
	// fp is the guest's fingerprint; tagged says it carries the ownership tag, recorded that the inventory
	// already holds it under this reference and node.
	fp       string
	tagged   bool
	recorded bool
	// toTemplate: the manifest declares a template, the guest is not one yet and ProxOps may convert it.
	toTemplate bool
	// moveTo is the node the plan migrates the guest to first (empty: it stays).
	moveTo string

	desiredState manifest.State
	running      bool // running and not a template: changes may wait for a restart
	paused       bool
	stopped      bool // stopped on PVE, or by an operation of this plan

	current, eff, cfg map[string]string
	diff              pvewire.Diff
	pendingKeys       []string // keys already written and pending on PVE
	restartKeys       []string // keys that take effect only after a restart
	restart           bool     // the plan restarts the guest to apply restartKeys

	u *unit
	// expect holds the values the writes so far leave; digestSpent says the observed digest is used up.
	expect      map[string]string
	digestSpent bool
	grown       map[string]string
	// halt ends the plan of the guest after the current step: nothing is written to it.
	halt bool
}

// updateSteps plan an update of an existing guest, one concern each, in the order they run.
var updateSteps = []func(*differ, *guestUpdate) error{
	(*differ).planMigrate,
	(*differ).diffConfig,
	(*differ).holdForeignPending,
	(*differ).findPendingKeys,
	(*differ).findRestartKeys,
	(*differ).reportHeldRestarts,
	(*differ).planClaim,
	(*differ).planPowerDown,
	(*differ).planResizes,
	(*differ).planConfigure,
	(*differ).planGuestFirewall,
	(*differ).recordTagged,
	(*differ).planPoolMembership,
	(*differ).planRegenerateCloudInit,
	(*differ).planMarkTemplate,
	(*differ).planGuestHA,
	(*differ).planPowerUp,
}

func (d *differ) planUpdate(s *guestUpdate) error {
	g := s.g
	s.ref = s.r.Ref()
	s.desiredState = s.r.DesiredState()
	s.running = g.Running() && !g.Template
	s.paused = g.Paused()
	s.stopped = !s.running
	s.u = &unit{ref: s.ref, level: d.level(s.ref), node: g.Node, vmid: g.VMID}
	s.expect, s.grown = map[string]string{}, map[string]string{}
	for _, step := range updateSteps {
		if err := step(d, s); err != nil {
			return err
		}
		if s.halt {
			return nil
		}
	}
	d.protect(s)
	if len(s.u.ops) > 0 {
		d.addUnit(s.u)
	}
	return nil
}

// add appends an operation on the guest to its unit, after the unit's last one.
func (d *differ) add(s *guestUpdate, op Operation) *Operation {
	u := s.u
	op.Cluster, op.Node, op.VMID, op.GuestType, op.Ref = d.cluster, s.g.Node, s.g.VMID, s.g.Type, s.ref.String()
	if len(u.ops) > 0 {
		op.DependsOn = []string{u.last()}
	}
	u.ops = append(u.ops, op)
	return &u.ops[len(u.ops)-1]
}

// precondition is what a write checks: the first one the observed digest, later ones the values they expect.
// A stop applies pending values and rewrites the config, so after a power operation the digest no longer
// holds: the write checks the values it expects (pending values applied) instead.
func (s *guestUpdate) precondition(keys ...string) Precondition {
	if !s.digestSpent && !slices.ContainsFunc(s.u.ops, isPowerOp) {
		s.digestSpent = true
		return Precondition{Digest: s.g.Digest}
	}
	s.digestSpent = true
	var p Precondition
	for _, k := range keys {
		v, ok := s.expect[k]
		if !ok {
			v = s.eff[k]
		}
		p.Expect = append(p.Expect, KV{Key: k, Value: v})
	}
	return p
}

func isPowerOp(o Operation) bool {
	return o.Action == ActionShutdown || o.Action == ActionStop || o.Action == ActionResume
}

// diffConfig compares the manifest with the config PVE runs (a running guest's pending values applied).
func (d *differ) diffConfig(s *guestUpdate) error {
	s.current, s.eff = effective(s.g)
	s.cfg = s.current
	if s.running {
		s.cfg = s.eff
	}
	diff, err := d.guestDiff(s.r, s.cfg, s.g.Template)
	if err != nil {
		return err
	}
	s.diff = diff
	for _, a := range diff.Anomalies {
		d.finding(FindingAnomaly, s.ref.String(), s.g.Node, s.g.VMID, a.Field, a.Message)
	}
	return nil
}

// findPendingKeys finds the keys already written and pending on PVE: the manifest's values, not yet applied.
func (d *differ) findPendingKeys(s *guestUpdate) error {
	if !s.running || !hasPending(s.g) {
		return nil
	}
	curDiff, err := d.guestDiff(s.r, s.current, s.g.Template)
	if err != nil {
		return err
	}
	for _, c := range curDiff.Changes {
		if !slices.ContainsFunc(s.diff.Changes, func(e pvewire.Change) bool { return e.Key == c.Key }) && slices.Contains(s.g.PendingKeys(), c.Key) {
			s.pendingKeys = append(s.pendingKeys, c.Key)
		}
	}
	return nil
}

// findRestartKeys finds the keys of a running guest that take effect only after a restart, and whether the
// plan restarts it.
func (d *differ) findRestartKeys(s *guestUpdate) error {
	if !s.running {
		return nil
	}
	for _, c := range s.diff.Changes {
		cur, inCurrent := s.current[c.Key]
		// Writing back the current value drops a pending change (PVE cleans up pending values equal to
		// the current ones): nothing waits for a restart then.
		reverts := (c.Delete && !inCurrent) || (!c.Delete && inCurrent && cur == c.Value.Value && len(c.Value.SecretRefs) == 0)
		if !reverts && !pvewire.AppliesLive(s.g.Type, c, s.cfg) {
			s.restartKeys = append(s.restartKeys, c.Key)
		}
	}
	s.restartKeys = append(s.restartKeys, s.pendingKeys...)
	slices.Sort(s.restartKeys)
	s.restartKeys = slices.Compact(s.restartKeys)
	s.restart = len(s.restartKeys) > 0 && d.in.Settings.restart() == RestartAuto && s.desiredState == manifest.StateStarted
	return nil
}

// reportHeldRestarts reports the keys that stay pending because the settings forbid a restart.
func (d *differ) reportHeldRestarts(s *guestUpdate) error {
	if !s.running || len(s.restartKeys) == 0 || d.in.Settings.restart() != RestartNever || s.desiredState != manifest.StateStarted || s.toTemplate {
		return nil
	}
	for _, k := range s.restartKeys {
		msg := "written, but PVE keeps it pending until the guest restarts (reconcile.restart: never)"
		if slices.Contains(s.pendingKeys, k) {
			msg = "already pending on PVE until the guest restarts (reconcile.restart: never)"
		}
		d.finding(FindingPending, s.ref.String(), s.g.Node, s.g.VMID, k, msg)
	}
	return nil
}

// planPowerDown resumes or stops a paused guest and shuts down a running one that should stop or restart.
func (d *differ) planPowerDown(s *guestUpdate) error {
	ref, vmid, t := s.ref, s.g.VMID, s.g.Type
	if s.paused {
		if s.desiredState == manifest.StateStarted {
			d.add(s, Operation{ID: d.opID(guestOpID(t, vmid, ActionResume, "")), Action: ActionResume,
				Reason:  fmt.Sprintf("%s: power %q → %q", ref, "paused", "running"),
				Changes: []Change{{Field: "power", Before: "paused", After: "running"}}})
		} else {
			// A paused VM cannot process a shutdown request.
			d.add(s, Operation{ID: d.opID(guestOpID(t, vmid, ActionStop, "")), Action: ActionStop,
				Reason:  fmt.Sprintf("%s: power %q → %q", ref, "paused", "stopped"),
				Changes: []Change{{Field: "power", Before: "paused", After: "stopped"}}})
			s.stopped = true
		}
	}
	// HA stops a guest it manages (planGuestHA); a restart to apply changes is the plan's own.
	if s.running && !s.stopped && ((s.desiredState == manifest.StateStopped && !haRunsIt(s.r)) || s.restart) {
		reason := fmt.Sprintf("%s: power %q → %q", ref, "running", "stopped")
		if s.desiredState == manifest.StateStarted {
			reason = fmt.Sprintf("%s: restart to apply %s (graceful shutdown, stop after %ds)", ref, strings.Join(s.restartKeys, ", "), d.in.Settings.shutdownSeconds())
		}
		d.add(s, Operation{ID: d.opID(guestOpID(t, vmid, ActionShutdown, "")), Action: ActionShutdown,
			Params: []KV{{Key: "timeout", Value: strconv.Itoa(d.in.Settings.shutdownSeconds())}, {Key: "forceStop", Value: "1"}},
			Reason: reason, Changes: []Change{{Field: "power", Before: "running", After: "stopped"}}})
		s.stopped = true
	}
	return nil
}

// planResizes grows disks first; a rewrite of a grown disk's options then carries its new size. Its value
// after the resize is PVE's to print, so the rewrite does not expect one.
func (d *differ) planResizes(s *guestUpdate) error {
	ref, vmid, t := s.ref, s.g.VMID, s.g.Type
	for _, rs := range s.diff.Resizes {
		op := d.add(s, Operation{ID: d.opID(guestOpID(t, vmid, ActionResize, rs.Key)), Action: ActionResize,
			Params:  []KV{{Key: "disk", Value: rs.Key}, {Key: "size", Value: rs.Size()}},
			Reason:  fmt.Sprintf("%s: grow %s %s → %s", ref, rs.Key, pveformat.FormatSize(rs.From), pveformat.FormatSize(rs.To)),
			Changes: []Change{{Field: rs.Key + " size", Before: pveformat.FormatSize(rs.From), After: pveformat.FormatSize(rs.To)}}})
		op.Precondition = s.precondition(rs.Key)
		s.grown[rs.Key] = rs.Size()
	}
	return nil
}

// planClaim takes a declared untagged guest (or one carrying only the predecessor's tag) over before anything
// else is written to it: a claim-tag operation writes its tags alone, and every other operation on the guest
// depends on it. The executor writes only to guests that carry the tag and whose ownership record matches
// them; a claim is the one write it allows without either, and only while the guest still has the identity
// and the name this plan observed (the precondition's Fingerprint and Name). The record is written once the
// claim succeeded, before any operation that depends on it is dispatched.
func (d *differ) planClaim(s *guestUpdate) error {
	if s.tagged {
		return nil
	}
	i := slices.IndexFunc(s.diff.Changes, func(c pvewire.Change) bool { return c.Key == "tags" && !c.Delete })
	if i < 0 {
		return nil
	}
	c := s.diff.Changes[i]
	ref, vmid, t := s.ref, s.g.VMID, s.g.Type
	op := d.add(s, Operation{ID: d.opID(guestOpID(t, vmid, ActionClaimTag, "")), Action: ActionClaimTag,
		Values:  []KV{{Key: c.Key, Value: c.Value.Value}},
		Reason:  fmt.Sprintf("%s: claim ownership (add tag %s)", ref, pveformat.OwnershipTag),
		Changes: []Change{displayChange(c)}})
	op.Precondition = s.precondition(c.Key)
	op.Precondition.Fingerprint = s.fp
	op.Precondition.Name, _ = s.g.Get(nameKey(s.g))
	s.expect[c.Key] = c.Value.Value
	s.diff.Changes = slices.Delete(slices.Clone(s.diff.Changes), i, i+1)
	d.record(s.r, s.g, s.fp, op.ID)
	return nil
}

// planConfigure writes the config changes (but a claim's tags) in one operation.
func (d *differ) planConfigure(s *guestUpdate) error {
	if len(s.diff.Changes) == 0 {
		return nil
	}
	ref, vmid, t := s.ref, s.g.VMID, s.g.Type
	var vals []KV
	var dels []string
	var changes []Change
	var keys []string
	for _, c := range s.diff.Changes {
		if size, ok := s.grown[c.Key]; ok && !c.Delete {
			c.Value.Value = pvewire.WithSizeToken(t, c.Key, c.Value.Value, size)
		} else {
			keys = append(keys, c.Key)
		}
		if c.Delete {
			dels = append(dels, c.Key)
		} else {
			vals = append(vals, KV{Key: c.Key, Value: c.Value.Value, SecretRefs: slices.Clone(c.Value.SecretRefs)})
		}
		changes = append(changes, displayChange(c))
	}
	slices.Sort(dels)
	reason := fmt.Sprintf("%s: config drift", ref)
	switch {
	case s.restart || (s.running && s.desiredState == manifest.StateStopped && len(s.restartKeys) > 0):
		reason += " (stop-required)"
	case s.running && len(s.restartKeys) > 0:
		reason += " (pending until restart)"
	}
	op := d.add(s, Operation{ID: d.opID(guestOpID(t, vmid, ActionConfigure, "")), Action: ActionConfigure, Values: vals,
		Delete: dels, Reason: reason, Changes: changes})
	op.Precondition = s.precondition(keys...)
	for _, c := range s.diff.Changes {
		if c.Delete {
			s.expect[c.Key] = ""
		} else {
			s.expect[c.Key] = c.Value.Value
		}
	}
	return nil
}

// recordTagged records a tagged guest the ownership inventory does not hold yet.
func (d *differ) recordTagged(s *guestUpdate) error {
	if s.tagged && !s.recorded {
		d.record(s.r, s.g, s.fp, "")
	}
	return nil
}

// planMarkTemplate turns the guest into a PVE template (irreversible) when the manifest declares one.
func (d *differ) planMarkTemplate(s *guestUpdate) error {
	if !s.toTemplate {
		return nil
	}
	op := d.add(s, Operation{ID: d.opID(guestOpID(s.g.Type, s.g.VMID, ActionMarkTemplate, "")), Action: ActionMarkTemplate,
		Reason:  fmt.Sprintf("%s: mark as PVE template (irreversible)", s.ref),
		Changes: []Change{{Field: "template", Before: "0", After: "1"}}})
	op.Precondition = s.precondition("template")
	op.Precondition.Fingerprint = s.fp
	return nil
}

// startsAtEnd reports whether the plan ends the guest's sequence with a start: it should run and was
// stopped, or this plan stops it to restart it.
func (s *guestUpdate) startsAtEnd() bool {
	g := s.g
	if haRunsIt(s.r) && !g.Running() {
		// HA starts a guest it manages (planGuestHA).
		return false
	}
	return s.desiredState == manifest.StateStarted && !g.Template && (!g.Running() || (s.stopped && !s.paused) || (s.paused && s.restart))
}

// planPowerUp starts a guest that should run: one that was stopped, or that this plan stopped to restart.
func (d *differ) planPowerUp(s *guestUpdate) error {
	g := s.g
	if !s.startsAtEnd() {
		return nil
	}
	reason := fmt.Sprintf("%s: power %q → %q", s.ref, "stopped", "running")
	if g.Running() {
		reason = fmt.Sprintf("%s: start after the restart", s.ref)
	}
	d.add(s, Operation{ID: d.opID(guestOpID(g.Type, g.VMID, ActionStart, "")), Action: ActionStart, Reason: reason,
		Changes: []Change{{Field: "power", Before: "stopped", After: "running"}}})
	return nil
}

// displayChange shows a change without secrets: SSH keys by digest or reference, a password by reference.
func displayChange(c pvewire.Change) Change {
	out := Change{Field: c.Key, Before: c.Before, After: c.After()}
	switch c.Key {
	case "sshkeys":
		if c.HadBefore {
			out.Before = shortDigest(pvewire.LiveSSHKeysDigest(c.Before))
		}
		if len(c.Value.SecretRefs) == 0 && !c.Delete {
			keys, err := pveformat.DecodeSSHKeys(c.Value.Value)
			if err == nil {
				out.After = fmt.Sprintf("%d key(s) %s", len(keys), shortDigest(inventory.SSHKeysDigest(keys)))
			}
		}
	case "cipassword":
		if c.HadBefore {
			out.Before = "(set)"
		}
	}
	return out
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

func (d *differ) planCreate(r *manifest.Resource) error {
	ref, vmid, t := r.Ref(), r.VMID(), guestType(r.Kind)
	if missing := r.MissingToCreate(); len(missing) > 0 {
		for _, m := range missing {
			pos := r.Source.Pos(m.Field)
			d.cannotCreate = append(d.cannotCreate, diag.Diagnostic{Severity: diag.Error, File: r.Source.File,
				Line: pos.Line, Column: pos.Column, Ref: ref.String(), Field: m.Field,
				Message: fmt.Sprintf("vmid %d is not on PVE and must be created, which needs this field: %s", vmid, m.Message)})
		}
		return nil
	}
	if d.checkCreationRefs(r) {
		return nil
	}
	u := &unit{ref: ref, level: d.level(ref), node: r.Node(), vmid: vmid}
	if s := r.VM(); s != nil && s.Clone != "" && r.Kind == manifest.KindVM {
		return d.planClone(r, u)
	}
	var vals pvewire.Values
	var err error
	if t == inventory.QEMU {
		vals, err = pvewire.QEMUCreate(d.desired(r))
	} else {
		vals, err = pvewire.LXCCreate(d.desired(r))
	}
	if err != nil {
		return err
	}
	what := "create"
	if r.Kind.IsTemplate() {
		what = "create + mark as PVE template"
	}
	id := d.opID(guestOpID(t, vmid, ActionCreate, ""))
	u.ops = append(u.ops, Operation{ID: id, Cluster: d.cluster, Node: r.Node(), VMID: vmid, GuestType: t,
		Ref: ref.String(), Action: ActionCreate, Values: kvs(vals), Precondition: Precondition{ExpectAbsent: true},
		Reason: fmt.Sprintf("%s: not on PVE; will %s", ref, what), Storage: createStorage(r)})
	d.records = append(d.records, Record{Owned: Owned{VMID: vmid, Ref: ref.String(), Node: r.Node(), AppliedNode: r.Node()}, After: id})
	if r.Kind.IsTemplate() {
		u.ops = append(u.ops, Operation{ID: d.opID(guestOpID(t, vmid, ActionMarkTemplate, "")), Cluster: d.cluster,
			Node: r.Node(), VMID: vmid, GuestType: t, Ref: ref.String(), Action: ActionMarkTemplate, DependsOn: []string{id},
			Reason:  fmt.Sprintf("%s: mark as PVE template (irreversible)", ref),
			Changes: []Change{{Field: "template", Before: "0", After: "1"}}})
	}
	d.planCreatedFirewall(r, u)
	d.addUnit(u)
	return nil
}

// createStorage is the storage a create writes its first volume to (per-storage concurrency).
func createStorage(r *manifest.Resource) string {
	if s := r.VM(); s != nil && len(s.Disks) > 0 {
		return s.Disks[0].Storage
	}
	if s := r.LXC(); s != nil {
		return s.Root.Storage
	}
	return ""
}

// planClone full-clones a VM from its TemplateVM (on the template's node, with target= when that is another
// node and the template's volumes are on shared storage), writes the VM's own config in the same operation,
// and starts it next.
func (d *differ) planClone(r *manifest.Resource, u *unit) error {
	s := r.VM()
	ref, vmid := r.Ref(), r.VMID()
	tref := manifest.Ref{Kind: manifest.KindTemplateVM, Name: s.Clone}
	tmpl := d.lookup(tref)
	if tmpl == nil {
		return fmt.Errorf("spec.clone: TemplateVM %q is not defined", s.Clone)
	}
	srcNode := tmpl.Node()
	var slots, keys []string
	var storage string
	if lt, ok := d.live[tmpl.VMID()]; ok {
		// Only a PVE template, or one this plan makes, is cloned: the guest on a template's vmid may be
		// someone else's (a vmid typo) until ProxOps has made it the template.
		marking := false
		if tu := d.unitOf[tref]; tu != nil {
			marking = slices.ContainsFunc(tu.ops, func(o Operation) bool { return o.Action == ActionMarkTemplate })
		}
		if !lt.g.Template && !marking {
			d.finding(FindingAnomaly, ref.String(), r.Node(), vmid, "spec.clone",
				fmt.Sprintf("vmid %d of TemplateVM %s is not a template on PVE, and this plan does not make it one; the clone waits", tmpl.VMID(), s.Clone))
			return nil
		}
		srcNode = lt.g.Node
		cfg := lt.g.Current()
		slots = pvewire.VolumeSlots(cfg)
		for k := range cfg {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range slots {
			st := pvewire.ParseDrive(cfg[k]).Storage()
			if storage == "" && k != "efidisk0" && k != "tpmstate0" {
				storage = st
			}
		}
		if srcNode != r.Node() {
			if why := d.cloneTargetProblem(lt.node, r.Node(), cfg, slots); why != "" {
				d.cannotCreate = append(d.cannotCreate, diagAt(r, "spec.clone",
					"vmid %d is to be cloned from TemplateVM %s on node %s onto node %s, which PVE refuses: %s", vmid, s.Clone, srcNode, r.Node(), why))
				return nil
			}
		}
	} else {
		ts := tmpl.VM()
		slots = pvewire.DesiredVolumeSlots(ts)
		tv, err := pvewire.QEMUCreate(d.desired(tmpl))
		if err != nil {
			return fmt.Errorf("spec.clone: %w", err)
		}
		keys = tv.Keys()
		if len(ts.Disks) > 0 {
			storage = ts.Disks[0].Storage
		}
	}
	vals, err := pvewire.QEMUClone(d.desired(r), slots)
	if err != nil {
		return err
	}
	var dels []string
	for _, k := range pvewire.CloneIdentityDeletes(d.desired(r), keys) {
		if !vals.Has(k) {
			dels = append(dels, k)
		}
	}
	params := []KV{{Key: "newid", Value: strconv.Itoa(vmid)}, {Key: "name", Value: r.PVEName()}, {Key: "full", Value: "1"}}
	if srcNode != r.Node() {
		params = append(params, KV{Key: "target", Value: r.Node()})
	}
	id := d.opID(guestOpID(inventory.QEMU, vmid, ActionClone, ""))
	u.ops = append(u.ops, Operation{ID: id, Cluster: d.cluster, Node: srcNode, VMID: vmid, GuestType: inventory.QEMU,
		Ref: ref.String(), Action: ActionClone, Values: kvs(vals), Delete: dels, Params: params, SourceVMID: tmpl.VMID(),
		Storage: storage, Precondition: Precondition{ExpectAbsent: true},
		Reason: fmt.Sprintf("%s: not on PVE; will full-clone from TemplateVM %s (vmid %d)", ref, s.Clone, tmpl.VMID())})
	d.records = append(d.records, Record{Owned: Owned{VMID: vmid, Ref: ref.String(), Node: r.Node(), AppliedNode: r.Node()}, After: id})
	d.planCreatedFirewall(r, u)
	if r.DesiredState() == manifest.StateStarted {
		u.ops = append(u.ops, Operation{ID: d.opID(guestOpID(inventory.QEMU, vmid, ActionStart, "")), Cluster: d.cluster,
			Node: r.Node(), VMID: vmid, GuestType: inventory.QEMU, Ref: ref.String(), Action: ActionStart, DependsOn: []string{u.last()},
			Reason:  fmt.Sprintf("%s: power %q → %q", ref, "stopped", "running"),
			Changes: []Change{{Field: "power", Before: "stopped", After: "running"}}})
	}
	d.addUnit(u)
	return nil
}

// ---- prune

type pruneCandidate struct {
	g    *inventory.Guest
	rec  Owned
	kind manifest.Kind
	ref  string
}

func refOf(s string) manifest.Ref {
	r, _ := manifest.ParseRef(s)
	return r
}

func liveRef(g *inventory.Guest) string {
	name := liveName(g)
	if name == "" {
		name = guestPrefix(g.Type) + "-" + strconv.Itoa(g.VMID)
	}
	return string(pvewire.LiveKind(g)) + "/" + name
}

// planPrunes deletes the live guests no manifest declares that ProxOps owns (tagged and recorded with a
// matching fingerprint), capped by the budget and held by the latch; every other undeclared guest is
// reported and never touched.
func (d *differ) planPrunes() {
	declared := map[int]bool{}
	for _, r := range d.resources {
		if r.Kind.IsGuest() {
			declared[r.VMID()] = true
		}
	}
	owned := map[manifest.Kind]int{}
	var cands []pruneCandidate
	for _, inv := range d.in.Observed.Nodes {
		for i := range inv.Guests {
			g := &inv.Guests[i]
			if lg := d.live[g.VMID]; lg.g != g {
				continue // a duplicate vmid on a second node; the first is the guest
			}
			tagged := pveformat.Owned(liveTags(g))
			rec, hasRec := d.owned[g.VMID]
			fp := inventory.Fingerprint(*g)
			matches := tagged && hasRec && rec.Fingerprint != "" && rec.Fingerprint == fp
			kind := pvewire.LiveKind(g)
			if rk, ok := manifest.ParseRef(rec.Ref); matches && ok {
				kind = rk.Kind
			}
			if matches {
				owned[kind]++
			}
			if declared[g.VMID] {
				continue
			}
			switch {
			case !tagged:
				d.finding(FindingSkipped, liveRef(g), g.Node, g.VMID, "", "live object without proxops tag; never touched")
			case !matches:
				why := "no ownership record"
				if hasRec {
					why = "its ownership record does not match its identity"
				}
				if fp == "" {
					why = "it has no identity fingerprint to match"
				}
				d.finding(FindingSkipped, liveRef(g), g.Node, g.VMID, "",
					fmt.Sprintf("carries the proxops tag but %s (a hand-made clone or a reused vmid?); never deleted", why))
			default:
				if r := d.byRef[refOf(rec.Ref)]; r != nil && r.Kind.IsGuest() {
					// The manifest still declares this guest, under another vmid: a changed vmid, most likely.
					// Deleting would lose the guest's data; the operator decides.
					d.finding(FindingAnomaly, rec.Ref, g.Node, g.VMID, "spec.vmid",
						fmt.Sprintf("ProxOps recorded vmid %d as %s, which the manifest now declares as vmid %d; vmid %d is not deleted: delete it by hand, or restore the vmid in the manifest", g.VMID, rec.Ref, r.VMID(), g.VMID))
					continue
				}
				if p, ok := g.Get("protection"); ok && pvewire.Bool(p) {
					d.finding(FindingAnomaly, rec.Ref, g.Node, g.VMID, "",
						"present on PVE (proxops-tagged) but absent in git; protection is on, so it is not deleted: turn protection off to let ProxOps prune it")
					continue
				}
				cands = append(cands, pruneCandidate{g: g, rec: rec, kind: kind, ref: rec.Ref})
			}
		}
	}
	slices.SortFunc(cands, func(a, b pruneCandidate) int {
		return cmp.Or(cmp.Compare(a.g.Node, b.g.Node), cmp.Compare(a.g.VMID, b.g.VMID))
	})
	perKind := map[manifest.Kind]int{}
	for _, c := range cands {
		perKind[c.kind]++
	}
	heldKinds := map[manifest.Kind]bool{}
	for _, k := range manifest.Kinds {
		if n := perKind[k]; n >= 3 && 2*n > owned[k] {
			heldKinds[k] = true
			d.heldWhy = append(d.heldWhy, fmt.Sprintf("it would prune %d of %d owned %s guests", n, owned[k], k))
		}
	}
	budget := d.in.Settings.PruneBudget
	for _, c := range cands {
		if budget > 0 && d.objs.pruned >= budget {
			d.finding(FindingDeferredPrune, c.ref, c.g.Node, c.g.VMID, "",
				fmt.Sprintf("prune deferred (budget %d per plan): present on PVE (proxops-tagged) but absent in git", budget))
			continue
		}
		d.objs.pruned++
		d.planDelete(c)
		if heldKinds[c.kind] {
			d.held = append(d.held, c.ref)
		}
	}
}

func (d *differ) planDelete(c pruneCandidate) {
	g := c.g
	ref, _ := manifest.ParseRef(c.ref)
	u := &unit{ref: ref, node: g.Node, vmid: g.VMID, prune: true}
	var deps []string
	if g.Running() {
		id := d.opID(guestOpID(g.Type, g.VMID, ActionStop, ""))
		u.ops = append(u.ops, Operation{ID: id, Cluster: d.cluster, Node: g.Node, VMID: g.VMID, GuestType: g.Type,
			Ref: c.ref, Action: ActionStop, Reason: fmt.Sprintf("%s: stop before delete", c.ref),
			Changes: []Change{{Field: "power", Before: "running", After: "stopped"}}})
		deps = []string{id}
	}
	u.ops = append(u.ops, Operation{ID: d.opID(guestOpID(g.Type, g.VMID, ActionDelete, "")), Cluster: d.cluster,
		Node: g.Node, VMID: g.VMID, GuestType: g.Type, Ref: c.ref, Action: ActionDelete, DependsOn: deps,
		Precondition: Precondition{Digest: g.Digest, Fingerprint: c.rec.Fingerprint, ExpectTag: true},
		Reason:       fmt.Sprintf("%s: present on PVE (proxops-tagged) but absent in git", c.ref)})
	d.addUnit(u)
}
