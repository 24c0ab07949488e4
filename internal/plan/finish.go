package plan

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/manifest"
)

// actionRank orders units within a dependency level by what they start with.
var actionRank = map[Action]int{
	ActionDownload: 0, ActionCreate: 1, ActionClone: 2, ActionClaimTag: 3, ActionResume: 4, ActionShutdown: 5,
	ActionStop: 6, ActionConfigure: 7, ActionResize: 8, ActionMarkTemplate: 9, ActionStart: 10, ActionDelete: 11,
	ActionRegenerateCloudInit: 12, ActionCreatePool: 13, ActionClaimPool: 14, ActionConfigurePool: 15,
	ActionSetPoolMembers: 16, ActionDeletePool: 17, ActionMigrate: 18, ActionHAMigrate: 18, ActionApplyGuestFirewall: 19,
	ActionCreateHAResource: 20, ActionCreateBackupJob: 20, ActionClaimClusterObject: 21, ActionConfigureHAResource: 22,
	ActionConfigureBackupJob: 22, ActionCreateHARule: 23, ActionConfigureHARule: 24, ActionDeleteHARule: 25,
	ActionDeleteHAResource: 26, ActionDeleteBackupJob: 26,
}

// findingRank orders findings by kind.
var findingRank = map[FindingKind]int{
	FindingAnomaly: 0, FindingMisplaced: 1, FindingPending: 2, FindingDeferredPrune: 3, FindingSkipped: 4, FindingWarning: 5, FindingSuspended: 6,
}

func (d *differ) dependencies(ref manifest.Ref) []manifest.Ref {
	if g := d.in.Cluster.Graph; g != nil && g.Has(ref) {
		return g.Dependencies(ref)
	}
	var out []manifest.Ref
	if r := d.byRef[ref]; r != nil {
		for _, x := range r.References() {
			out = append(out, x.Target)
		}
	}
	slices.SortFunc(out, manifest.CompareRefs)
	return slices.Compact(out)
}

// link makes the first operation of each resource depend on what provisions its dependencies: the download
// of an artifact onto its node, the last operation of a guest it depends on.
func (d *differ) link(u *unit) {
	if u.prune || len(u.ops) == 0 {
		return
	}
	node := u.ops[0].Node
	if r := d.byRef[u.ref]; r != nil && r.Node() != "" {
		node = r.Node()
	}
	var deps []string
	for _, dep := range d.dependencies(u.ref) {
		if dep.Kind.IsArtifact() {
			byNode := d.downloads[dep]
			if id, ok := byNode[node]; ok {
				deps = append(deps, id)
				continue
			}
			if u.node != "" && u.node != node {
				if id, ok := byNode[u.node]; ok {
					deps = append(deps, id)
					continue
				}
			}
			if d.byRef[u.ref] != nil && d.byRef[u.ref].Kind.IsArtifact() {
				continue
			}
			for _, n := range slices.Sorted(maps.Keys(byNode)) {
				deps = append(deps, byNode[n])
			}
			continue
		}
		if du := d.unitOf[dep]; du != nil && len(du.ops) > 0 {
			deps = append(deps, du.last())
		}
	}
	if len(deps) == 0 {
		return
	}
	slices.Sort(deps)
	deps = slices.Compact(deps)
	first := &u.ops[0]
	first.DependsOn = append(deps, first.DependsOn...)
}

// holdPrunes makes the first operation of every prune wait for every other operation of the plan: it depends
// on the non-prune operations no other non-prune operation depends on, so through the chains it waits for all
// of them, and a failure or skip anywhere skips every prune (fail safe: nothing is deleted from a cluster whose
// other changes did not all go through). Prunes do not wait for each other.
func (d *differ) holdPrunes() {
	var ends []string
	dependedOn := map[string]bool{}
	for _, u := range d.units {
		if u.prune {
			continue
		}
		for _, op := range u.ops {
			for _, dep := range op.DependsOn {
				dependedOn[dep] = true
			}
		}
	}
	for _, u := range d.units {
		if u.prune {
			continue
		}
		for _, op := range u.ops {
			if !dependedOn[op.ID] {
				ends = append(ends, op.ID)
			}
		}
	}
	if len(ends) == 0 {
		return
	}
	slices.Sort(ends)
	for _, u := range d.units {
		if !u.prune || len(u.ops) == 0 {
			continue
		}
		first := &u.ops[0]
		first.DependsOn = append(slices.Clone(ends), first.DependsOn...)
	}
}

func (d *differ) finish() Plan {
	for _, u := range d.units {
		d.link(u)
	}
	d.holdPrunes()
	units := slices.Clone(d.units)
	slices.SortStableFunc(units, func(a, b *unit) int {
		if a.prune != b.prune {
			if a.prune {
				return 1
			}
			return -1
		}
		if a.prune {
			// Guests first (level 0), then cluster objects, deepest first (their level).
			return cmp.Or(cmp.Compare(a.level, b.level), cmp.Compare(a.node, b.node), cmp.Compare(a.vmid, b.vmid))
		}
		return cmp.Or(cmp.Compare(a.level, b.level), cmp.Compare(actionRank[a.ops[0].Action], actionRank[b.ops[0].Action]),
			cmp.Compare(a.node, b.node), cmp.Compare(a.vmid, b.vmid), manifest.CompareRefs(a.ref, b.ref))
	})
	p := Plan{Cluster: d.cluster}
	for _, u := range units {
		p.Operations = append(p.Operations, u.ops...)
	}
	slices.SortFunc(d.findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(findingRank[a.Kind], findingRank[b.Kind]), cmp.Compare(a.Node, b.Node),
			cmp.Compare(a.VMID, b.VMID), cmp.Compare(a.Ref, b.Ref), cmp.Compare(a.Field, b.Field), cmp.Compare(a.Message, b.Message))
	})
	p.Findings = slices.Compact(d.findings)
	var why []string
	if len(d.held) > 0 {
		slices.Sort(d.held)
		p.HeldPrunes = d.held
		why = append(why, "mass-prune latch: "+strings.Join(d.heldWhy, "; ")+" (more than half, and at least three)")
	}
	if len(d.fwHeld) > 0 {
		slices.Sort(d.fwHeld)
		why = append(why, "firewall lock-out: "+strings.Join(d.fwHeld, ", ")+" would drop every inbound connection")
	}
	if d.clusterFWHeld != "" {
		why = append(why, "cluster firewall lock-out: "+d.clusterFWHeld)
	}
	if len(why) > 0 {
		p.Held = true
		p.HeldReason = strings.Join(why, "; ") + "; confirm the plan to apply it"
	}
	d.limitMigrations(&p)
	for _, r := range d.resources {
		p.Resources = append(p.Resources, r.Ref().String())
	}
	slices.SortFunc(d.records, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a.Owned.VMID, b.Owned.VMID), cmp.Compare(a.After, b.After))
	})
	p.Record = d.records
	p.ObjectRecords = d.objectRecords()
	p.ID = d.planID(p)
	return p
}

// planID hashes what the plan is computed from (cluster, tree, the observed state's digests, the ownership
// records, the settings) and what it does (its operations, findings and latch).
func (d *differ) planID(p Plan) string {
	h := sha256.New()
	buf := make([]byte, 0, 32<<10)
	w := func(parts ...string) {
		for _, s := range parts {
			if len(buf)+8+len(s) > cap(buf) {
				h.Write(buf)
				buf = buf[:0]
			}
			buf = binary.LittleEndian.AppendUint64(buf, uint64(len(s)))
			if len(s) > cap(buf) {
				h.Write(buf)
				h.Write([]byte(s))
				buf = buf[:0]
				continue
			}
			buf = append(buf, s...)
		}
	}
	w("proxops-plan/1", d.cluster, d.in.Tree)
	w(p.Resources...)
	for _, n := range d.in.Observed.Nodes {
		w("node", n.Node)
		for _, g := range n.Guests {
			w("guest", strconv.Itoa(g.VMID), string(g.Type), g.Digest, g.Status, g.QMPStatus, strconv.FormatBool(g.Template), g.Tags, g.Lock)
		}
		for _, s := range n.Storages {
			w("storage", s.ID, strconv.FormatBool(s.Shared))
		}
		w(n.ListedStorages...)
		for _, v := range n.Volumes {
			w("volume", v.Volid)
		}
	}
	for _, vmid := range sortedInts(d.owned) {
		o := d.owned[vmid]
		w("owned", strconv.Itoa(o.VMID), o.Ref, o.Node, o.Fingerprint)
	}
	d.hashObjects(w)
	d.hashHA(w)
	s := d.in.Settings
	w("settings", s.restart(), strconv.Itoa(s.shutdownSeconds()), strconv.Itoa(s.PruneBudget))
	for _, op := range p.Operations {
		w("op", op.ID, string(op.Action), op.Node, op.Ref, strconv.Itoa(op.SourceVMID), op.Storage, op.Precondition.Digest, op.Precondition.Fingerprint)
		for _, kv := range append(append(slices.Clone(op.Values), op.Params...), op.Precondition.Expect...) {
			w(kv.Key, kv.Value, strings.Join(kv.SecretRefs, ","))
		}
		w(op.Delete...)
		w(op.DependsOn...)
	}
	for _, f := range p.Findings {
		w("finding", string(f.Kind), f.Ref, f.Node, strconv.Itoa(f.VMID), f.Field, f.Message)
	}
	w("held", strconv.FormatBool(p.Held))
	w(p.HeldPrunes...)
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func sortedInts[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
