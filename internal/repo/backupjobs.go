package repo

import (
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/yamldecode"
)

// checkBackupJobs reports a job id declared twice in a cluster, and a job's selection entry that names no
// guest of the cluster (or several). Whether a selection's pool exists is known only with the live pools, so
// the planner checks it.
func (l *loader) checkBackupJobs(c *Cluster) {
	ids := newOnceDeclared(c)
	for _, r := range c.Resources {
		j := r.BackupJob()
		if j == nil {
			continue
		}
		id := j.IDOrName(r.Metadata.Name)
		ids.declare(r, id, idField(func(r *manifest.Resource) string { return r.BackupJob().ID }), "backup job id "+id, "a job")
		for _, l := range []struct {
			field string
			list  []string
		}{{"spec.selection.guests", j.Selection.Guests}, {"spec.selection.exclude", j.Selection.Exclude}} {
			for i, entry := range l.list {
				if _, _, ok := manifest.SplitGuestName(entry); !ok {
					continue // reported by validation
				}
				if _, msg := manifest.SelectedGuest(c.Resources, entry); msg != "" {
					f := yamldecode.Index(l.field, i)
					clusterError(c, r.Source.File, r.Source.Pos(f), r.Ref().String(), f, "%s", msg)
				}
			}
		}
	}
}
