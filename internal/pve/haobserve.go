package pve

import (
	"cmp"
	"context"
	"slices"

	"github.com/proxops/proxops/internal/inventory"
)

// observeHA reads the cluster's HA resources and rules for an inventory with two requests whatever their
// number: GET /cluster/ha/resources and GET /cluster/ha/rules. A PVE 8 cluster serves no rules (it has HA
// groups): its inventory says the rules were not read.
func (c *Client) observeHA(ctx context.Context) (*inventory.HA, error) {
	resources, err := c.haResources(ctx)
	if err != nil {
		return nil, failed(err, "observe ha")
	}
	h := &inventory.HA{}
	for _, r := range resources {
		h.Resources = append(h.Resources, inventory.HAResource{SID: r.SID, State: r.State, Comment: r.Comment,
			MaxRestart: r.MaxRestart, MaxRelocate: r.MaxRelocate, Failback: r.Failback, Group: r.Group})
	}
	slices.SortFunc(h.Resources, func(a, b inventory.HAResource) int { return cmp.Compare(a.SID, b.SID) })
	rules, err := c.ListHARules(ctx)
	switch {
	case NotServed(err):
		return h, nil
	case err != nil:
		return nil, failed(err, "observe ha")
	}
	h.RulesRead = true
	for _, r := range rules {
		h.Rules = append(h.Rules, inventory.HARule{ID: r.ID, Type: r.Type, Resources: r.Resources, Nodes: r.Nodes,
			Strict: r.Strict, Affinity: r.Affinity, Disable: r.Disable, Comment: r.Comment})
	}
	slices.SortFunc(h.Rules, func(a, b inventory.HARule) int { return cmp.Compare(a.ID, b.ID) })
	return h, nil
}
