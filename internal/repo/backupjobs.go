package repo

import (
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/yamldecode"
)

// checkBackupJobs reports a job id declared twice in a cluster, and a job's selection entry that names no
// guest of the cluster (or several). Whether a selection's pool exists is known only with the live pools, so
// the planner checks it.
func (l *loader) checkBackupJobs(c *Cluster) {
	owner := map[string]*manifest.Resource{}
	for _, r := range c.Resources {
		j := r.BackupJob()
		if j == nil {
			continue
		}
		id := j.IDOrName(r.Metadata.Name)
		field := "spec.id"
		if j.ID == "" {
			field = "metadata.name"
		}
		if first, dup := owner[id]; dup {
			firstField := "spec.id"
			if first.BackupJob().ID == "" {
				firstField = "metadata.name"
			}
			clusterError(c, r.Source.File, r.Source.Pos(field), r.Ref().String(), field,
				"backup job id %s is declared by both %s (%s) and %s; a job is declared once per cluster",
				id, first.Ref(), where(first, firstField), r.Ref())
		} else {
			owner[id] = r
		}
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
