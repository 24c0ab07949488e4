package repo

import (
	"strings"

	"github.com/proxops/proxops/internal/manifest"
)

// checkFirewallObjectNames reports a security group, IP set or alias declared twice in a cluster (an alias's
// name compared without case, as PVE does): two manifests would own one PVE object. Whether a name a rule
// uses exists is known only with the live cluster, so the planner checks those.
func (l *loader) checkFirewallObjectNames(c *Cluster) {
	type key struct {
		kind manifest.Kind
		name string
	}
	owner := map[key]*manifest.Resource{}
	for _, r := range c.Resources {
		if !r.Kind.IsFirewallObject() {
			continue
		}
		k := key{r.Kind, r.FirewallObjectName()}
		if r.Kind == manifest.KindAlias {
			k.name = strings.ToLower(k.name)
		}
		field := r.FirewallObjectNameField()
		if first, dup := owner[k]; dup {
			clusterError(c, r.Source.File, r.Source.Pos(field), r.Ref().String(), field,
				"%s name %s is declared by both %s (%s) and %s; each is declared once per cluster",
				r.Kind, r.FirewallObjectName(), first.Ref(), where(first, first.FirewallObjectNameField()), r.Ref())
			continue
		}
		owner[k] = r
	}
}
