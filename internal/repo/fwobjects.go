package repo

import (
	"fmt"
	"strings"

	"github.com/proxops/proxops/internal/manifest"
)

// checkFirewallObjectNames reports a security group, IP set or alias declared twice in a cluster (an alias's
// name compared without case, as PVE does): two manifests would own one PVE object. Whether a name a rule
// uses exists is known only with the live cluster, so the planner checks those.
func (l *loader) checkFirewallObjectNames(c *Cluster) {
	ids := newOnceDeclared(c)
	for _, r := range c.Resources {
		if !r.Kind.IsFirewallObject() {
			continue
		}
		key := string(r.Kind) + "/" + r.FirewallObjectName()
		if r.Kind == manifest.KindAlias {
			key = strings.ToLower(key)
		}
		ids.declare(r, key, (*manifest.Resource).FirewallObjectNameField,
			fmt.Sprintf("%s name %s", r.Kind, r.FirewallObjectName()), "each")
	}
}
