package plan

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
)

// Backup jobs are cluster objects with the pools' ownership model (objects.go): the marker in the job's
// comment and the record <cluster>.obj.backupjob.<id>. A declared job owns the options the BackupJob kind
// models (manifest.BackupJobOptions); the job's other options are left as they are.

// backupJobDefaults are PVE's defaults of the owned options: a live value equal to its default is the same as
// the option left out.
var backupJobDefaults = map[string]string{"all": "0", "compress": "0", "mode": "snapshot",
	"notification-mode": "auto", "protected": "0", "enabled": "1"}

// backupObject is the claim's object parameter of a backup job.
const backupObject = "backup-job"

// normalizeBackupOptions is a job's owned options as compared: the options manifest.BackupJobOptions names, a value
// equal to PVE's default dropped (enabled kept), vmid and exclude lists sorted, prune-backups sorted.
func normalizeBackupOptions(opts map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range manifest.BackupJobOptions {
		v, ok := opts[k]
		if !ok || v == "" {
			continue
		}
		switch k {
		case "vmid", "exclude":
			v = vmidList(pveformat.SplitList(v))
		case "prune-backups":
			parts := strings.Split(v, ",")
			slices.Sort(parts)
			v = strings.Join(parts, ",")
		case "protected", "all", "enabled":
			switch v {
			case "true":
				v = "1"
			case "false":
				v = "0"
			}
		}
		if def, ok := backupJobDefaults[k]; ok && v == def && k != "enabled" {
			continue
		}
		out[k] = v
	}
	if _, ok := out["enabled"]; !ok {
		out["enabled"] = "1"
	}
	return out
}

// vmidList is a list of vmids sorted by number, without duplicates, comma-separated.
func vmidList(ids []string) string {
	slices.SortFunc(ids, func(a, b string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return cmp.Or(cmp.Compare(x, y), cmp.Compare(a, b))
	})
	return strings.Join(slices.Compact(ids), ",")
}

// backupJobOptions are the options a declared job must have (normalised): its selection resolved to vmids,
// and the guests whose spec.backup is false excluded from a pool or all selection.
func (d *differ) backupJobOptions(r *manifest.Resource) map[string]string {
	s := r.BackupJob()
	opts := map[string]string{"schedule": s.Schedule, "storage": s.Storage, "mode": s.Mode,
		"compress": manifest.CompressValue(s.Compression), "notes-template": s.NotesTemplate, "node": s.Node,
		"notification-mode": s.NotificationMode, "pool": s.Selection.Pool}
	if s.Retention != nil {
		opts["prune-backups"] = s.Retention.PruneBackups()
	}
	if s.Protected != nil {
		opts["protected"] = boolValue(*s.Protected)
	}
	if s.Enabled != nil {
		opts["enabled"] = boolValue(*s.Enabled)
	}
	vmids := func(entries []string) []string {
		var out []string
		for _, e := range entries {
			if g, _ := manifest.SelectedGuest(d.resources, e); g != nil {
				out = append(out, strconv.Itoa(g.VMID()))
			}
		}
		return out
	}
	opts["vmid"] = strings.Join(vmids(s.Selection.Guests), ",")
	if s.Selection.All {
		opts["all"] = "1"
	}
	if s.Selection.All || s.Selection.Pool != "" {
		exclude := vmids(s.Selection.Exclude)
		for _, g := range d.resources {
			if !g.Kind.IsGuest() || g.GuestBackup() {
				continue
			}
			if s.Selection.All || g.GuestPool() == s.Selection.Pool || d.objs.memberOf[g.VMID()] == s.Selection.Pool {
				exclude = append(exclude, strconv.Itoa(g.VMID()))
			}
		}
		opts["exclude"] = strings.Join(exclude, ",")
	}
	return normalizeBackupOptions(opts)
}

func boolValue(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// checkBackupJobs reports, positioned, a job whose selection names a pool that is neither declared nor live.
// Without an observation of the backup jobs (or of the pools a selection names) no job is planned.
func (d *differ) checkBackupJobs() (diags diag.List, observeFailed bool) {
	o := &d.objs
	if len(o.declaredJobs) == 0 {
		return nil, false
	}
	for _, id := range slices.Sorted(maps.Keys(o.declaredJobs)) {
		r := o.declaredJobs[id]
		pool := r.BackupJob().Selection.Pool
		switch {
		case !o.jobsObserved:
			diags = append(diags, diagAt(r, "kind", "the cluster's backup jobs were not observed (an executor that does not read them?); no backup job is planned"))
			observeFailed = true
		case pool == "":
		case !o.observed:
			diags = append(diags, diagAt(r, "spec.selection.pool", "the cluster's resource pools were not observed; a job that selects a pool is not planned"))
			observeFailed = true
		default:
			if _, live := o.pools[pool]; !live && o.declared[pool] == nil {
				diags = append(diags, diagAt(r, "spec.selection.pool", "unknown pool %s: neither declared (pool/) nor on PVE; declare it, or fix the id", pool))
			}
		}
	}
	return diags.Sorted(), observeFailed
}

// backupJobOpID is the operation id of an action on a backup job: backupjob-<id>-<verb>.
func backupJobOpID(id, verb string) string { return "backupjob-" + id + "-" + verb }

// jobOp is an operation on backup job id of the unit u, after the unit's last one.
func (d *differ) jobOp(u *unit, id, verb string, a Action, params []KV, reason string) *Operation {
	return d.objectOp(u, backupJobOpID(id, verb), "id", id, a, params, reason)
}

// jobChanges are the options a configure writes to make have into want: the values to set, the options to
// delete and the changes shown.
func jobChanges(have, want map[string]string) (set []KV, del []string, changes []Change) {
	for _, k := range manifest.BackupJobOptions {
		h, hok := have[k]
		w, wok := want[k]
		switch {
		case wok && h != w:
			set = append(set, KV{Key: k, Value: w})
			changes = append(changes, Change{Field: k, Before: h, After: w})
		case hok && !wok:
			del = append(del, k)
			changes = append(changes, Change{Field: k, Before: h})
		}
	}
	return set, del, changes
}

// planBackupJobs creates the declared jobs that are not live, claims the unmarked live ones (explicitly: the
// plan shows the claim), and converges the owned options and the comment of the owned ones.
func (d *differ) planBackupJobs() {
	o := &d.objs
	if !o.jobsObserved {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(o.declaredJobs)) {
		r := o.declaredJobs[id]
		s := r.BackupJob()
		want := d.backupJobOptions(r)
		ref := r.Ref()
		u := &unit{ref: ref, node: ClusterScope}
		live, found := o.jobs[id]
		comment := live.Comment
		switch {
		case !found:
			params := make([]KV, 0, len(want)+1)
			var changes []Change
			for _, k := range slices.Sorted(maps.Keys(want)) {
				params = append(params, KV{Key: k, Value: want[k]})
				changes = append(changes, Change{Field: k, After: want[k]})
			}
			params = append(params, KV{Key: "comment", Value: s.Comment})
			op := d.jobOp(u, id, "create", ActionCreateBackupJob, params, fmt.Sprintf("%s: backup job %s not on PVE; will create", ref, id))
			op.Precondition.ExpectAbsent = true
			op.Changes = append(changes, Change{Field: "comment", After: pveformat.MarkComment(s.Comment)})
			d.recordObject(r, id)
		case !pveformat.Marked(live.Comment):
			op := d.jobOp(u, id, "claim", ActionClaimClusterObject, []KV{{Key: "object", Value: backupObject}},
				fmt.Sprintf("%s: claim ownership of backup job %s (add %s to its comment)", ref, id, pveformat.OwnershipMarker))
			op.Precondition.Expect = []KV{{Key: "comment", Value: live.Comment}}
			op.Changes = []Change{{Field: "comment", Before: live.Comment, After: pveformat.MarkComment(live.Comment)}}
			d.recordObject(r, id)
			comment = pveformat.MarkComment(live.Comment)
		default:
			if !o.recorded(r.Kind.ObjectKind(), id) {
				// Marked but not recorded (the record was lost): the manifest declares it, so it is recorded.
				d.recordObject(r, id)
			}
		}
		if found {
			set, del, changes := jobChanges(normalizeBackupOptions(live.Options), want)
			if pveformat.CommentText(comment) != s.Comment {
				changes = append(changes, Change{Field: "comment", Before: comment, After: pveformat.MarkComment(s.Comment)})
			}
			if len(changes) > 0 {
				params := append(set, KV{Key: "comment", Value: s.Comment})
				if len(del) > 0 {
					params = append(params, KV{Key: "delete", Value: strings.Join(del, ",")})
				}
				fields := make([]string, len(changes))
				for i, c := range changes {
					fields[i] = c.Field
				}
				op := d.jobOp(u, id, "configure", ActionConfigureBackupJob, params,
					fmt.Sprintf("%s: drift in %s", ref, strings.Join(fields, ", ")))
				op.Precondition.Expect = []KV{{Key: "comment", Value: comment}}
				op.Changes = changes
			}
		}
		if len(u.ops) == 0 {
			continue
		}
		if pool := s.Selection.Pool; pool != "" {
			u.ops[0].DependsOn = append(d.poolDeps(pool), u.ops[0].DependsOn...)
		}
		d.addUnit(u)
	}
}

// planBackupJobPrunes deletes the owned jobs no manifest declares (marker and record), within the prune
// budget and under the mass-prune latch; every other undeclared job is reported and never touched.
func (d *differ) planBackupJobPrunes() {
	o := &d.objs
	if !o.jobsObserved {
		return
	}
	kind := manifest.KindBackupJob
	owned := 0
	var cands []string
	for _, id := range slices.Sorted(maps.Keys(o.jobs)) {
		j := o.jobs[id]
		marked, recorded := pveformat.Marked(j.Comment), o.recorded(kind.ObjectKind(), id)
		if marked && recorded {
			owned++
		}
		if o.declaredJobs[id] != nil {
			continue
		}
		ref := string(kind) + "/" + id
		if d.ownedUndeclared(ref, "backup job "+id, marked, recorded) {
			cands = append(cands, id)
		}
	}
	prunes := make([]objectPrune, len(cands))
	for i, id := range cands {
		prunes[i] = objectPrune{ref: o.recordRef(kind, id), what: "backup job " + id}
	}
	d.pruneOwned("backup jobs", owned, prunes, func(i int) {
		id, ref := cands[i], prunes[i].ref
		u := &unit{ref: refOf(ref), node: ClusterScope, prune: true}
		op := d.jobOp(u, id, "delete", ActionDeleteBackupJob, nil,
			fmt.Sprintf("%s: backup job %s present on PVE (%s) but absent in git", ref, id, pveformat.OwnershipMarker))
		op.Ref = ref
		op.Precondition.Expect = []KV{{Key: "comment", Value: o.jobs[id].Comment}}
		d.addUnit(u)
	})
}

// initBackupJobs reads the observed and the declared backup jobs into the objects state.
func (o *objects) initBackupJobs(observed inventory.Cluster, resources []*manifest.Resource) {
	o.jobs, o.declaredJobs = map[string]inventory.BackupJob{}, map[string]*manifest.Resource{}
	jobs, ok := observed.BackupJobs()
	o.jobsObserved = ok
	for _, j := range jobs {
		o.jobs[j.ID] = j
	}
	for _, r := range resources {
		if j := r.BackupJob(); j != nil {
			o.declaredJobs[j.ID] = r
		}
	}
}

// hashBackupJobs writes the observed jobs into the plan's content id.
func (o *objects) hashBackupJobs(w func(...string)) {
	if len(o.jobs) == 0 && len(o.declaredJobs) == 0 {
		return
	}
	w("backupjobs", strconv.FormatBool(o.jobsObserved))
	for _, id := range slices.Sorted(maps.Keys(o.jobs)) {
		j := o.jobs[id]
		w("backupjob", j.ID, j.Comment)
		for _, k := range slices.Sorted(maps.Keys(j.Options)) {
			w(k, j.Options[k])
		}
	}
}
