package adopt

import (
	"maps"
	"slices"

	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
)

// adoptPools writes a Pool manifest for every live resource pool no declared Pool has the id of: its id
// (when the manifest's name cannot be it) and its comment without the ownership marker. Committed, it plans
// a claim of the pool (the marker added), as an adopted guest plans the claim of its tag. A pool's storages
// are not observed and not modelled.
func (r *run) adoptPools() error {
	pools, observed := r.in.Observed.Pools()
	if !observed {
		return nil
	}
	declared := map[string]bool{}
	for _, d := range r.in.Declared {
		if p := d.Pool(); p != nil {
			declared[p.IDOrName(d.Metadata.Name)] = true
		}
	}
	r.poolOf = map[int]string{}
	for _, p := range pools {
		for _, vmid := range p.Members {
			if _, dup := r.poolOf[vmid]; !dup {
				r.poolOf[vmid] = p.ID
			}
		}
	}
	byID := map[string]string{}
	for _, p := range pools {
		byID[p.ID] = p.Comment
	}
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		if declared[id] {
			continue
		}
		name := r.objectName(manifest.KindPool, id, "pool")
		spec := &manifest.PoolSpec{Comment: pveformat.CommentText(byID[id])}
		if name != id {
			spec.ID = id
		}
		if err := r.emitObject(manifest.KindPool, name, spec, "pool "+id); err != nil {
			return err
		}
	}
	return nil
}
