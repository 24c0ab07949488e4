package plan

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvewire"
)

// Moving guests. A guest moves when git asks for it: its manifest's spec.node differs from the node ProxOps
// last put it on (Owned.AppliedNode). A guest on another node for any other reason (HA, a hand move, maintenance) is
// reported as misplaced and managed where it is. The move is the first operation of the guest's sequence; its
// other changes follow on the new node.

// migrationMode is the guest's effective migration mode.
func (d *differ) migrationMode(r *manifest.Resource) string {
	if m := r.MigrateSpec(); m != nil && m.Mode != "" {
		return m.Mode
	}
	if d.in.Settings.Migrate != "" {
		return d.in.Settings.Migrate
	}
	return manifest.MigrateOnline
}

// misplacedMessage is the finding of a guest found on another node than its manifest's.
func misplacedMessage(g *inventory.Guest, r *manifest.Resource, why string) string {
	msg := fmt.Sprintf("found on node %s, the manifest places it on %s; ProxOps manages it where it is and never recreates it", g.Node, r.Node())
	if why == "" {
		why = "proxops apply --move-misplaced moves it back"
	}
	return msg + "; " + why
}

// placement decides, for a guest found on another node than its manifest places it on, whether this plan moves
// it; when it does not, the finding says why. It returns the node to move the guest to, or "", and hold when
// nothing else of the guest may be written either.
func (d *differ) placement(r *manifest.Resource, g *inventory.Guest) (moveTo string, hold bool) {
	ref, vmid := r.Ref().String(), g.VMID
	target := r.Node()
	rec, hasRec := d.owned[vmid]
	owns := pveformat.Owned(liveTags(g)) && hasRec && rec.Fingerprint != "" && rec.Fingerprint == inventory.Fingerprint(*g)
	// A move is asked for by a commit (the manifest's node differs from the node ProxOps last put the guest
	// on) or by the operator for this run (MoveMisplaced).
	asked := owns && (d.in.MoveMisplaced || rec.AppliedNode != "" && rec.AppliedNode != target)
	misplaced := func(why string) (string, bool) {
		d.finding(FindingMisplaced, ref, g.Node, vmid, "spec.node", misplacedMessage(g, r, why))
		return "", false
	}
	switch {
	case !owns && d.in.MoveMisplaced:
		return misplaced("it is moved only once ProxOps owns it (tagged and recorded)")
	case !asked:
		return misplaced("")
	case d.migrationMode(r) == manifest.MigrateNever:
		return misplaced("migration is off for it (migrate: never)")
	case g.Template:
		return misplaced("a template is not migrated")
	case g.Lock != "":
		return misplaced(fmt.Sprintf("it is locked (%s); the move waits", g.Lock))
	}
	if why := d.migrationRefusal(r, g, target); why != "" {
		d.finding(FindingAnomaly, ref, g.Node, vmid, "spec.node",
			fmt.Sprintf("the manifest moves vmid %d from %s to %s, which PVE refuses: %s", vmid, g.Node, target, why))
		return "", false
	}
	if throughHA(g) {
		if why := d.haConflict(g, target); why != "" {
			d.finding(FindingAnomaly, ref, g.Node, vmid, "spec.node",
				fmt.Sprintf("the manifest moves vmid %d from %s to %s, but %s; HA would move it back, so it is not moved: change the rule or spec.node", vmid, g.Node, target, why))
			return "", false
		}
	}
	return target, false
}

// haSIDOf is the HA resource id of a guest: vm:<vmid> or ct:<vmid>.
func haSIDOf(t inventory.GuestType, vmid int) string {
	if t == inventory.LXC {
		return fmt.Sprintf("ct:%d", vmid)
	}
	return fmt.Sprintf("vm:%d", vmid)
}

// haConflict is why the cluster's HA rules would place an HA-managed guest elsewhere than target: a strict
// node-affinity rule without target, a positive resource-affinity rule with a guest that stays on another
// node, a negative one with a guest on target. A guest's place is where it is observed, or where this plan
// moves it (the moves the planner asked PVE about). Empty when the rules agree or were not read.
func (d *differ) haConflict(g *inventory.Guest, target string) string {
	sid := haSIDOf(g.Type, g.VMID)
	placeOf := func(other string) (string, bool) {
		_, id, _ := strings.Cut(other, ":")
		vmid, err := strconv.Atoi(id)
		if err != nil {
			return "", false
		}
		og, ok := d.in.Observed.Guest(vmid)
		if !ok {
			return "", false
		}
		for _, m := range d.in.Observed.MigrationChecks {
			if m.VMID == vmid {
				return m.Target, true
			}
		}
		return og.Node, true
	}
	for _, rule := range d.in.Observed.HARules {
		if rule.Disable || !slices.Contains(rule.Resources, sid) {
			continue
		}
		switch rule.Type {
		case "node-affinity":
			var nodes []string
			for _, n := range rule.Nodes {
				name, _, _ := strings.Cut(n, ":")
				nodes = append(nodes, name)
			}
			if rule.Strict && !slices.Contains(nodes, target) {
				return fmt.Sprintf("HA rule %s (strict node-affinity) keeps it on [%s]", rule.ID, strings.Join(nodes, " "))
			}
		case "resource-affinity":
			for _, other := range rule.Resources {
				if other == sid {
					continue
				}
				at, ok := placeOf(other)
				switch {
				case !ok:
				case rule.Affinity == "positive" && at != target:
					return fmt.Sprintf("HA rule %s (positive resource-affinity) keeps it with %s, which stays on %s", rule.ID, other, at)
				case rule.Affinity == "negative" && at == target:
					return fmt.Sprintf("HA rule %s (negative resource-affinity) keeps it apart from %s, which is on %s", rule.ID, other, at)
				}
			}
		}
	}
	return ""
}

// pveRefusal is what PVE answered it refuses about a move (GET …/migrate?target=), naming the reason; ok
// is false when the answer was not read, and the planner's own checks stand in for it.
func (d *differ) pveRefusal(g *inventory.Guest, target string) (why string, ok bool) {
	chk, found := d.in.Observed.MigrationCheck(g.VMID, target)
	if !found || chk.Error != "" {
		return "", false
	}
	var blocking, mapped []string
	for _, r := range chk.LocalResources {
		if slices.Contains(chk.Mapped, r) {
			mapped = append(mapped, r)
		} else {
			blocking = append(blocking, r)
		}
	}
	switch {
	case len(blocking) > 0:
		return fmt.Sprintf("PVE reports local resources (%s) that tie it to node %s (local_resources)", strings.Join(blocking, ", "), g.Node), true
	case len(mapped) > 0 && chk.Running:
		return fmt.Sprintf("PVE reports mapped devices (%s), which a running guest cannot take along (mapped-resources)", strings.Join(mapped, ", ")), true
	case len(chk.LocalCDROMs) > 0:
		return fmt.Sprintf("PVE reports a CD-ROM holding a node-local image (%s) (local_disks)", strings.Join(chk.LocalCDROMs, ", ")), true
	case len(chk.UnavailableStorages) > 0:
		return fmt.Sprintf("PVE reports that node %s lacks storage %s (not_allowed_nodes)", target, strings.Join(chk.UnavailableStorages, ", ")), true
	case chk.Known && !chk.Allowed:
		return fmt.Sprintf("PVE does not list node %s among the nodes it may move to (not_allowed_nodes)", target), true
	}
	return "", true
}

var (
	rePassthrough = regexp.MustCompile(`^(hostpci|usb)\d+$`)
	reLocalDevice = regexp.MustCompile(`^(serial|parallel)\d+$`)
	reVolumeKey   = regexp.MustCompile(`^(ide\d|sata\d+|scsi\d+|virtio\d+|efidisk0|tpmstate0|unused\d+|rootfs|mp\d+)$`)
)

// guestVolume is one volume a guest's config references.
type guestVolume struct {
	key, volid, storage string
	cdrom, cloudInit    bool
}

func guestVolumes(g *inventory.Guest) []guestVolume {
	cfg := g.Current()
	var out []guestVolume
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		if !reVolumeKey.MatchString(k) {
			continue
		}
		dr := pvewire.ParseDrive(cfg[k])
		st := dr.Storage()
		if dr.IsEmpty() || st == "" {
			continue
		}
		out = append(out, guestVolume{key: k, volid: dr.File, storage: st, cdrom: dr.IsCDROM() && !dr.IsCloudInit(), cloudInit: dr.IsCloudInit()})
	}
	return out
}

// storageMap reads spec.migrate.target-storage: a default storage and source:target pairs.
func storageMap(r *manifest.Resource) (def string, pairs map[string]string) {
	pairs = map[string]string{}
	m := r.MigrateSpec()
	if m == nil || m.TargetStorage == "" {
		return "", pairs
	}
	for _, e := range strings.Split(m.TargetStorage, ",") {
		if src, dst, ok := strings.Cut(e, ":"); ok {
			pairs[src] = dst
		} else if e != "1" {
			def = e
		}
	}
	return def, pairs
}

// migrationRefusal is what PVE refuses about a move: its own answer (GET …/migrate?target=, asked for the
// moves a plan is about to emit) when the planner has it, else what PVE's migration checks (migrate_vm,
// QemuMigrate prepare and scan_local_volumes, LXC Migrate prepare) would refuse, read from the observed state:
// a passthrough device, a local CD-ROM image, a storage the target lacks. Empty when PVE allows the move.
func (d *differ) migrationRefusal(r *manifest.Resource, g *inventory.Guest, target string) string {
	to := d.node(target)
	if to == nil {
		return fmt.Sprintf("node %s was not observed", target)
	}
	why, read := d.pveRefusal(g, target)
	if why != "" {
		return why
	}
	if read {
		return d.storageRefusal(r, g, target, to)
	}
	cfg := g.Current()
	if g.Type == inventory.QEMU {
		var devices []string
		for _, k := range slices.Sorted(maps.Keys(cfg)) {
			v := cfg[k]
			switch {
			case rePassthrough.MatchString(k) && !strings.Contains(v, "spice") && !strings.Contains(v, "mapping="):
				devices = append(devices, k)
			case reLocalDevice.MatchString(k) && strings.HasPrefix(v, "/dev/"):
				devices = append(devices, k)
			}
		}
		if len(devices) > 0 {
			return fmt.Sprintf("it uses local devices (%s); a passthrough device ties a VM to its node", strings.Join(devices, ", "))
		}
	}
	if g.Type == inventory.LXC {
		for _, k := range slices.Sorted(maps.Keys(cfg)) {
			if !strings.HasPrefix(k, "mp") || !reVolumeKey.MatchString(k) {
				continue
			}
			dr := pvewire.ParseDrive(cfg[k])
			if shared, _ := dr.Props.Get("shared"); strings.HasPrefix(dr.File, "/") && shared != "1" {
				return fmt.Sprintf("its bind mount %s (%s) is local to the node; mark it shared or remove it", k, dr.File)
			}
		}
	}
	return d.storageRefusal(r, g, target, to)
}

// storageRefusal is a storage of the guest's volumes the target lacks (after spec.migrate.target-storage), or a
// CD-ROM image on node-local storage. PVE's answer names such storages only for a stopped guest, so this
// check runs also when PVE's answer was read.
func (d *differ) storageRefusal(r *manifest.Resource, g *inventory.Guest, target string, to *inventory.Node) string {
	from := d.node(g.Node)
	def, pairs := storageMap(r)
	for _, v := range guestVolumes(g) {
		shared := false
		if from != nil {
			if st, ok := from.Storage(v.storage); ok {
				shared = st.Shared
			}
		}
		if v.cdrom {
			if !shared {
				return fmt.Sprintf("its CD-ROM (%s) holds %s on node-local storage %s; PVE does not migrate a local CD-ROM image: eject it or use an ISO on shared storage", v.key, v.volid, v.storage)
			}
			continue
		}
		dst := v.storage
		if !shared {
			if p, ok := pairs[v.storage]; ok {
				dst = p
			} else if def != "" {
				dst = def
			}
		}
		if _, ok := to.Storage(dst); !ok {
			return fmt.Sprintf("storage %s (%s) is not available on node %s", dst, v.key, target)
		}
	}
	return ""
}

// haIgnored is the requested state of an HA resource the HA stack leaves alone: PVE then acts on the guest
// directly, as if it were not HA-managed (pve-ha-manager's service_check_ha_state).
const haIgnored = "ignored"

// throughHA reports whether a guest moves through HA: it is an HA resource HA does not ignore. A disabled
// resource moves too (the manager relocates a stopped service's config).
func throughHA(g *inventory.Guest) bool {
	return g.HAManaged && g.HAState != haIgnored
}

// MoveQueries are, per source node, the moves a plan emits: what the planner asks PVE about
// (GET …/migrate?target=) before it plans them for good.
func MoveQueries(p Plan) map[string][]inventory.MigrationQuery {
	out := map[string][]inventory.MigrationQuery{}
	for _, op := range p.Operations {
		if !op.Action.Moves() {
			continue
		}
		target, _ := op.Param("target")
		out[op.Node] = append(out[op.Node], inventory.MigrationQuery{VMID: op.VMID, Type: op.GuestType, Target: target})
	}
	return out
}

// hasLocalVolumes reports whether a guest has a disk on node-local storage (copied by the migration).
func (d *differ) hasLocalVolumes(g *inventory.Guest) bool {
	from := d.node(g.Node)
	for _, v := range guestVolumes(g) {
		if v.cdrom || v.cloudInit {
			continue
		}
		if st, ok := from.Storage(v.storage); !ok || !st.Shared {
			return true
		}
	}
	return false
}

// planMigrate is the first update step: when placement decided to move the guest, it emits the migration (a
// running guest in offline mode is shut down first) and continues the guest's plan on the target node.
func (d *differ) planMigrate(s *guestUpdate) error {
	if s.moveTo == "" {
		d.learnAppliedNode(s)
		return nil
	}
	g, r := s.g, s.r
	ref, vmid, t := s.ref, g.VMID, g.Type
	if throughHA(g) {
		d.planHAMigrate(s)
		return nil
	}
	mode := d.migrationMode(r)
	if d.clearSnapshotsForMove(s, s.running && mode != manifest.MigrateOffline) {
		s.moveTo = ""
		return nil
	}
	if s.running && mode == manifest.MigrateOffline {
		d.add(s, Operation{ID: d.opID(guestOpID(t, vmid, ActionShutdown, "")), Action: ActionShutdown,
			Params:  []KV{{Key: "timeout", Value: strconv.Itoa(d.in.Settings.shutdownSeconds())}, {Key: "forceStop", Value: "1"}},
			Reason:  fmt.Sprintf("%s: shut down to move it offline to %s", ref, s.moveTo),
			Changes: []Change{{Field: "power", Before: "running", After: "stopped"}}})
		s.stopped = true
	}
	params := []KV{{Key: "target", Value: s.moveTo}}
	how := "offline"
	live := s.running && !s.stopped
	switch {
	case live && t == inventory.LXC:
		params = append(params, KV{Key: "restart", Value: "1"}, KV{Key: "timeout", Value: strconv.Itoa(d.in.Settings.shutdownSeconds())})
		how = "in restart mode (shut down, moved, started)"
	case live:
		params = append(params, KV{Key: "online", Value: "1"})
		how = "online"
	}
	if t == inventory.QEMU && d.hasLocalVolumes(g) {
		params = append(params, KV{Key: "with-local-disks", Value: "1"})
		how += ", copying its local disks"
	}
	if m := r.MigrateSpec(); m != nil && m.TargetStorage != "" {
		key := "targetstorage"
		if t == inventory.LXC {
			key = "target-storage"
		}
		params = append(params, KV{Key: key, Value: m.TargetStorage})
	}
	id := d.opID(guestOpID(t, vmid, ActionMigrate, ""))
	d.addMove(s, Operation{ID: id, Action: ActionMigrate, Params: params,
		Reason:  fmt.Sprintf("%s: spec.node %s → %s; will migrate %s", ref, g.Node, s.moveTo, how),
		Changes: []Change{{Field: "node", Before: g.Node, After: s.moveTo}}})
	return nil
}

// snapshotMoveProblem is why PVE would not migrate the guest's local disks or volumes while snapshots
// reference them (qemu-server QemuMigrate scan_local_volumes, pve-container LXC::Migrate phase1): a live
// migration copies no snapshots of local disks ("online storage migration not possible if non-replicated
// snapshot exists"); offline, storage_migrate takes snapshots along only on ZFS, on Btrfs (a VM's raw volumes)
// and in qcow2 files ("non-migratable snapshot exists"). PVE's snapshot list does not say which volumes a
// snapshot holds, so every snapshot counts as holding every local volume. Empty when the move is unaffected.
func (d *differ) snapshotMoveProblem(g *inventory.Guest, live bool) string {
	var why []string
	for _, v := range guestVolumes(g) {
		if v.cdrom || v.cloudInit {
			continue
		}
		st, ok := d.storageOf(g.Node, v.storage)
		if ok && st.Shared {
			continue
		}
		format, _ := pvewire.ParseDrive(g.Current()[v.key]).Props.Get("format")
		if format == "" {
			format = volumeFormat(v.volid)
		}
		switch {
		case g.Type == inventory.LXC:
			if st.Type != "zfspool" && st.Type != "btrfs" {
				why = append(why, fmt.Sprintf("%s is on %s (%s), where PVE migrates no snapshots of a container's volumes", v.key, v.storage, st.Type))
			}
		case live:
			why = append(why, fmt.Sprintf("%s is on node-local storage %s, and a live migration copies no snapshots", v.key, v.storage))
		case st.Type != "zfspool" && !(st.Type == "btrfs" && format == "raw") && format != "qcow2":
			why = append(why, fmt.Sprintf("%s is on %s (%s) as %s, where PVE migrates no snapshots", v.key, v.storage, st.Type, format))
		}
	}
	return strings.Join(why, "; ")
}

// clearSnapshotsForMove prepares a move PVE would refuse for the guest's snapshots (snapshotMoveProblem):
// ProxOps' own snapshots are removed on the source first, and the move runs unprotected; a snapshot ProxOps
// did not take blocks it, reported by name and never deleted. It reports whether the move is blocked.
func (d *differ) clearSnapshotsForMove(s *guestUpdate, live bool) bool {
	g := s.g
	if len(g.Snapshots) == 0 {
		return false
	}
	why := d.snapshotMoveProblem(g, live)
	if why == "" {
		return false
	}
	own := d.ownSnapshots(g)
	local := "local disks"
	if g.Type == inventory.LXC {
		local = "local volumes"
	}
	if foreign := foreignSnapshots(g, own); len(foreign) > 0 {
		remedy := "remove them by hand"
		if live && d.snapshotMoveProblem(g, false) == "" {
			remedy += ", or move it offline (spec.migrate.mode: offline), which takes them along"
		}
		d.finding(FindingAnomaly, s.ref.String(), g.Node, g.VMID, "spec.node",
			fmt.Sprintf("the manifest moves vmid %d from %s to %s, but snapshots ProxOps did not take (%s) hold its %s, which PVE does not migrate with snapshots (%s); ProxOps never deletes them: %s",
				g.VMID, g.Node, s.moveTo, strings.Join(foreign, ", "), local, why, remedy))
		return true
	}
	for i := len(own) - 1; i >= 0; i-- {
		d.add(s, d.deleteOwnSnapshot(s, own[i].Name, fmt.Sprintf("PVE does not migrate %s with snapshots (%s); the move to %s is not protected by a snapshot", local, why, s.moveTo)))
	}
	d.finding(FindingWarning, s.ref.String(), g.Node, g.VMID, "spec.snapshots",
		fmt.Sprintf("the move to %s is not protected by a snapshot: ProxOps' own snapshots are removed first, since PVE does not migrate %s with snapshots", s.moveTo, local))
	return false
}

// planHAMigrate moves an HA-managed guest through HA: the manager migrates it (online for a running VM,
// restart mode for a running container, offline for a stopped guest), whatever the migration mode says,
// since a guest HA keeps started cannot be shut down for an offline move.
func (d *differ) planHAMigrate(s *guestUpdate) {
	g := s.g
	how := "offline"
	switch {
	case s.running && g.Type == inventory.LXC:
		how = "in restart mode"
	case s.running:
		how = "online"
	}
	id := d.opID(guestOpID(g.Type, g.VMID, ActionHAMigrate, ""))
	d.addMove(s, Operation{ID: id, Action: ActionHAMigrate, Params: []KV{{Key: "target", Value: s.moveTo}},
		Reason: fmt.Sprintf("%s: spec.node %s → %s; HA-managed (%s): will ask HA to migrate it (%s) and wait until HA reports it on %s",
			s.ref, g.Node, s.moveTo, g.HAState, how, s.moveTo),
		Changes: []Change{{Field: "node", Before: g.Node, After: s.moveTo}}})
}

// addMove adds a guest's move and continues the guest's plan on the target node.
func (d *differ) addMove(s *guestUpdate, o Operation) {
	g, vmid, ref, id := s.g, s.g.VMID, s.ref, o.ID
	op := d.add(s, o)
	op.Precondition.Fingerprint = s.fp
	d.migrations = append(d.migrations, id)
	d.records = append(d.records, Record{Owned: Owned{VMID: vmid, Ref: ref.String(), Node: s.moveTo, AppliedNode: s.moveTo}, After: id})
	moved := *g
	moved.Node = s.moveTo
	s.g = &moved
	s.u.node = s.moveTo
	// The migration rewrites the config (its lock, maybe volume ids and sizes): later writes check values.
	s.digestSpent = true
	s.recorded = true
}

// learnAppliedNode updates the node a record says ProxOps put the guest on when the guest stands where its
// manifest places it and the record says otherwise or nothing (a record written before records carried the
// node, or a guest moved by hand and then committed where it stands).
func (d *differ) learnAppliedNode(s *guestUpdate) {
	rec, ok := d.owned[s.g.VMID]
	if !ok || !s.recorded || rec.AppliedNode == s.g.Node || !s.tagged || rec.Fingerprint != s.fp || s.g.Node != s.r.Node() || rec.Ref != s.ref.String() {
		return
	}
	rec.Node, rec.AppliedNode = s.g.Node, s.g.Node
	d.records = append(d.records, Record{Owned: rec})
}

// appliedNodeFor is the AppliedNode a record of the guest keeps: the live node when the guest stands where its
// manifest places it, else the stored one.
func (d *differ) appliedNodeFor(r *manifest.Resource, g *inventory.Guest) string {
	if g.Node == r.Node() {
		return g.Node
	}
	return d.owned[g.VMID].AppliedNode
}

// limitMigrations holds a plan that moves more guests than reconcile.max-migrations for confirmation, and
// chains the migrations so that at most reconcile.migration-concurrency of them run at once: the n-th waits
// for the (n-k)-th in dispatch order.
func (d *differ) limitMigrations(p *Plan) {
	if len(d.migrations) == 0 {
		return
	}
	if max := d.in.Settings.MaxMigrations; max > 0 && len(d.migrations) > max {
		p.Held = true
		why := fmt.Sprintf("migration latch: it would move %d guests (more than reconcile.max-migrations %d); confirm the plan to apply it", len(d.migrations), max)
		if p.HeldReason != "" {
			p.HeldReason += "; " + why
		} else {
			p.HeldReason = why
		}
	}
	k := d.in.Settings.MigrationConcurrency
	if k <= 0 {
		k = 2
	}
	var order []int
	for i, op := range p.Operations {
		if op.Action.Moves() {
			order = append(order, i)
		}
	}
	for n := k; n < len(order); n++ {
		op := &p.Operations[order[n]]
		prev := p.Operations[order[n-k]].ID
		if !slices.Contains(op.DependsOn, prev) {
			op.DependsOn = append(op.DependsOn, prev)
		}
	}
}

// cloneTargetProblem is why PVE refuses a clone of a template on node from onto target (clone_vm: "can't
// clone VM to node '…' (VM uses local storage)"), naming the storage; empty when it allows it.
func (d *differ) cloneTargetProblem(from *inventory.Node, target string, cfg map[string]string, slots []string) string {
	to := d.node(target)
	for _, k := range slots {
		dr := pvewire.ParseDrive(cfg[k])
		st := dr.Storage()
		if st == "" || dr.IsCDROM() && !dr.IsCloudInit() {
			continue
		}
		if s, ok := from.Storage(st); !ok || !s.Shared {
			return fmt.Sprintf("the template's %s is on storage %s, which is not shared; clone it on node %s and migrate it, or put the template on shared storage", k, st, from.Node)
		}
		if to != nil {
			if _, ok := to.Storage(st); !ok {
				return fmt.Sprintf("the template's %s is on storage %s, which node %s does not have", k, st, target)
			}
		}
	}
	return ""
}

// checkCreationRefs checks, for a guest this plan creates, the references that matter only at creation: the
// DiskImage a disk is imported from and the CTTemplate a container is made from must be placed on its node.
// It reports whether the guest cannot be created.
func (d *differ) checkCreationRefs(r *manifest.Resource) bool {
	bad := false
	for _, ref := range r.References() {
		if ref.Annotation || !ref.Target.Kind.CreationOnly() || ref.Target.Kind == manifest.KindTemplateVM {
			continue
		}
		t := d.lookup(ref.Target)
		if t == nil {
			continue
		}
		if a := t.Artifact(); a != nil && !a.PlacedOn(r.Node()) {
			d.cannotCreate = append(d.cannotCreate, diagAt(r, ref.Field,
				"vmid %d is not on PVE and is created on node %s from %s %s, which is not placed there (%s nodes: [%s])",
				r.VMID(), r.Node(), t.Kind, t.Metadata.Name, t.Kind, strings.Join(a.PlacementNodes(), " ")))
			bad = true
		}
	}
	return bad
}
