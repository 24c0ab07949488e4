package repo

import (
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/yamldecode"
)

// checkHARules reports what is wrong with a cluster's HA rules across manifests: a rule id declared twice, a
// resource that names no guest with spec.ha, a guest in two node-affinity rules (PVE keeps a resource in one).
// Whether the rules fit the live cluster (its PVE release, its nodes) is the planner's to check.
func (l *loader) checkHARules(c *Cluster) {
	ids := newOnceDeclared(c)
	nodeRule := map[manifest.Ref]*manifest.Resource{}
	for _, r := range c.Resources {
		s := r.HARule()
		if s == nil {
			continue
		}
		id := s.IDOrName(r.Metadata.Name)
		ids.declare(r, id, idField(func(r *manifest.Resource) string { return r.HARule().ID }), "HA rule id "+id, "a rule")
		for i, entry := range s.Resources {
			f := yamldecode.Index("spec.resources", i)
			g, why := manifest.FindHAGuest(entry, c.Resources)
			if g == nil {
				clusterError(c, r.Source.File, r.Source.Pos(f), r.Ref().String(), f, "%s", why)
				continue
			}
			if s.Type != manifest.HARuleNodeAffinity {
				continue
			}
			if other, dup := nodeRule[g.Ref()]; dup && other != r {
				clusterError(c, r.Source.File, r.Source.Pos(f), r.Ref().String(), f,
					"%s is already in node-affinity rule %s (%s); PVE keeps a resource in one node-affinity rule", g.Ref(), other.Ref(), other.Source.File)
				continue
			}
			nodeRule[g.Ref()] = r
		}
	}
}
