package adopt

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
)

// backupJobNote is the gap note of a job option the BackupJob kind does not model.
const backupJobNote = "not modelled by BackupJob: kept on PVE as it is; ProxOps neither writes nor removes it"

// adoptBackupJobs writes a BackupJob manifest for every live backup job no declared BackupJob has the id of:
// its schedule, storage, selection (vmids as the names of the guests adopted or declared), mode,
// compression, retention, notes template, protected, enabled, node, notification mode and comment without
// the ownership marker. Committed, it plans a claim of the job. The job's other options are gaps.
func (r *run) adoptBackupJobs() error {
	jobs, observed := r.in.Observed.BackupJobs()
	if !observed {
		return nil
	}
	declared := map[string]bool{}
	for _, d := range r.in.Declared {
		if j := d.BackupJob(); j != nil {
			declared[j.IDOrName(d.Metadata.Name)] = true
		}
	}
	names := r.guestNames()
	for _, j := range jobs {
		if declared[j.ID] {
			continue
		}
		name := r.objectName(manifest.KindBackupJob, j.ID, "backup")
		a := &jobAdoption{run: r, job: j, name: name, names: names}
		spec := a.spec()
		if manifest.BackupJobID(name) != j.ID {
			spec.ID = j.ID
		}
		if err := r.emitObject(manifest.KindBackupJob, name, spec, "backup job "+j.ID); err != nil {
			return err
		}
	}
	return nil
}

// guestNames maps each vmid to the selection entry of its manifest, adopted or declared: the name, or
// Kind/name when guests of two kinds share the name.
func (r *run) guestNames() map[int]string {
	refs := map[int]manifest.Ref{}
	for _, m := range r.res.Manifests {
		if m.Resource.Kind.IsGuest() {
			refs[m.Resource.VMID()] = m.Resource.Ref()
		}
	}
	for vmid, d := range r.declared {
		refs[vmid] = d.Ref()
	}
	kinds := map[string]int{}
	for _, ref := range refs {
		kinds[ref.Name]++
	}
	out := map[int]string{}
	for vmid, ref := range refs {
		out[vmid] = ref.Name
		if kinds[ref.Name] > 1 {
			out[vmid] = ref.String()
		}
	}
	return out
}

// jobAdoption builds the manifest of one live job.
type jobAdoption struct {
	*run
	job   inventory.BackupJob
	name  string
	names map[int]string
}

func (a *jobAdoption) gap(key, value, note string) {
	a.res.Gaps = append(a.res.Gaps, inventory.Gap{Setting: inventory.Setting{Kind: string(manifest.KindBackupJob),
		Name: a.name, Key: key, Value: value}, Note: note})
}

// guests turns a vmid list into selection entries; a vmid no guest has is a gap.
func (a *jobAdoption) guests(key, list string) []string {
	var out []string
	for _, v := range pveformat.SplitList(list) {
		vmid, err := strconv.Atoi(v)
		if name, ok := a.names[vmid]; err == nil && ok {
			out = append(out, name)
			continue
		}
		a.gap(key, v, fmt.Sprintf("guest %s is neither adopted nor declared: left out of the job's %s; add it once it has a manifest", v, key))
	}
	return out
}

func (a *jobAdoption) spec() *manifest.BackupJobSpec {
	o := a.job.Options
	s := &manifest.BackupJobSpec{Schedule: o["schedule"], Storage: o["storage"], NotesTemplate: o["notes-template"],
		Node: o["node"], Comment: pveformat.CommentText(a.job.Comment)}
	switch {
	case o["vmid"] != "":
		s.Selection.Guests = a.guests("vmid", o["vmid"])
	case o["pool"] != "":
		s.Selection.Pool = o["pool"]
		s.Selection.Exclude = a.guests("exclude", o["exclude"])
	case o["all"] == "1":
		s.Selection.All = true
		s.Selection.Exclude = a.guests("exclude", o["exclude"])
	}
	if v := o["mode"]; v != "" && v != "snapshot" {
		s.Mode = v
	}
	if v := o["notification-mode"]; v != "" && v != "auto" {
		s.NotificationMode = v
	}
	switch v := o["compress"]; v {
	case "", "0":
	case "gzip", "lzo", "zstd":
		s.Compression = v
	default:
		a.gap("compress", v, "compression "+v+" is not one of none, gzip, lzo, zstd: the manifest leaves compression out (none)")
	}
	if v := o["protected"]; v == "1" {
		s.Protected = manifest.Bool(true)
	}
	if v := o["enabled"]; v == "0" {
		s.Enabled = manifest.Bool(false)
	}
	if v := o["prune-backups"]; v != "" {
		s.Retention = a.retention(v)
	}
	for _, k := range slices.Sorted(maps.Keys(o)) {
		if !slices.Contains(manifest.BackupJobOptions, k) {
			a.gap(k, o[k], backupJobNote)
		}
	}
	return s
}

// retention reads prune-backups: keep-all, or the positive keep-* counts.
func (a *jobAdoption) retention(v string) *manifest.BackupRetention {
	rt := &manifest.BackupRetention{}
	if slices.Contains(strings.Split(v, ","), "keep-all=1") {
		rt.KeepAll = manifest.Bool(true)
		return rt
	}
	fields := map[string]**int{"keep-last": &rt.KeepLast, "keep-hourly": &rt.KeepHourly, "keep-daily": &rt.KeepDaily,
		"keep-weekly": &rt.KeepWeekly, "keep-monthly": &rt.KeepMonthly, "keep-yearly": &rt.KeepYearly}
	set := false
	for _, part := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(part, "=")
		n, err := strconv.Atoi(val)
		if f := fields[k]; f != nil && err == nil && n > 0 {
			*f = manifest.Int(n)
			set = true
		}
	}
	if !set {
		a.gap("prune-backups", v, "a retention without a positive count has no BackupJob form: the manifest leaves retention out, and a committed manifest removes it from the job, so the storage's retention applies")
		return nil
	}
	return rt
}
