package repo

import "github.com/proxops/proxops/internal/manifest"

// checkPoolIDs reports a pool id declared twice in a cluster: two Pool manifests would own one PVE pool.
// Whether a nested pool's parent or a guest's spec.pool exists is known only with the live pools, so the
// planner checks those.
func (l *loader) checkPoolIDs(c *Cluster) {
	owner := map[string]*manifest.Resource{}
	for _, r := range c.Resources {
		p := r.Pool()
		if p == nil {
			continue
		}
		id := p.IDOrName(r.Metadata.Name)
		field := "spec.id"
		if p.ID == "" {
			field = "metadata.name"
		}
		if first, dup := owner[id]; dup {
			firstField := "spec.id"
			if first.Pool().ID == "" {
				firstField = "metadata.name"
			}
			clusterError(c, r.Source.File, r.Source.Pos(field), r.Ref().String(), field,
				"pool id %s is declared by both %s (%s) and %s; a pool is declared once per cluster",
				id, first.Ref(), where(first, firstField), r.Ref())
			continue
		}
		owner[id] = r
	}
}
