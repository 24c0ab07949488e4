package repo

import "github.com/proxops/proxops/internal/manifest"

// checkPoolIDs reports a pool id declared twice in a cluster: two Pool manifests would own one PVE pool.
// Whether a nested pool's parent or a guest's spec.pool exists is known only with the live pools, so the
// planner checks those.
func (l *loader) checkPoolIDs(c *Cluster) {
	ids := newOnceDeclared(c)
	for _, r := range c.Resources {
		if p := r.Pool(); p != nil {
			id := p.IDOrName(r.Metadata.Name)
			ids.declare(r, id, idField(func(r *manifest.Resource) string { return r.Pool().ID }), "pool id "+id, "a pool")
		}
	}
}

// onceDeclared remembers the cluster objects of one kind a cluster declares, by key, and reports a second
// manifest that declares one: two manifests would own one PVE object.
type onceDeclared struct {
	c     *Cluster
	first map[string]*manifest.Resource
}

func newOnceDeclared(c *Cluster) *onceDeclared {
	return &onceDeclared{c: c, first: map[string]*manifest.Resource{}}
}

// declare records that r declares the object key (what names it in the message, one names the kind: "a
// pool"), at the field fieldOf names; it reports whether r is the first to declare it.
func (o *onceDeclared) declare(r *manifest.Resource, key string, fieldOf func(*manifest.Resource) string, what, one string) bool {
	first, dup := o.first[key]
	if !dup {
		o.first[key] = r
		return true
	}
	field := fieldOf(r)
	clusterError(o.c, r.Source.File, r.Source.Pos(field), r.Ref().String(), field,
		"%s is declared by both %s (%s) and %s; %s is declared once per cluster", what, first.Ref(), where(first, fieldOf(first)), r.Ref(), one)
	return false
}

// idField names where a manifest sets its object's id: spec.id when explicit returns one, else metadata.name.
func idField(explicit func(*manifest.Resource) string) func(*manifest.Resource) string {
	return func(r *manifest.Resource) string {
		if explicit(r) != "" {
			return "spec.id"
		}
		return "metadata.name"
	}
}
