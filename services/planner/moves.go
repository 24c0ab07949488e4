package planner

import (
	"context"
	"maps"
	"slices"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/repo"
)

// askAboutMoves asks PVE, through the executors of the source nodes, about the moves a plan is about to emit:
// each guest's migration precondition (GET …/migrate?target=) and the cluster's HA resources and rules (read
// once, from the first of those nodes: which guests move through HA, and where HA would place them). A
// converged plan moves nothing and asks nothing. It reports whether observed learned anything, so that the plan is computed again with it. A node
// that does not answer leaves its moves to the planner's own checks.
func (p *planner) askAboutMoves(ctx context.Context, c *repo.Cluster, observed *inventory.Cluster, pl plan.Plan) bool {
	queries := plan.MoveQueries(pl)
	if len(queries) == 0 {
		return false
	}
	rules := true
	learned := false
	for _, n := range slices.Sorted(maps.Keys(queries)) {
		req := p.observeRequest(c, n, nil, false, false)
		req.ChecksOnly, req.MigrationChecks, req.HARules = true, queries[n], rules
		req.FirewallVMIDs, req.Pools, req.BackupJobs = nil, false, false // a checks-only answer reads nothing else
		inv, err := p.observer().Node(ctx, req)
		if err != nil {
			p.log.Warn("migration preconditions not read; the planner's own checks stand in", "cluster", c.Name, "node", n, "err", err)
			continue
		}
		observed.MigrationChecks = append(observed.MigrationChecks, inv.MigrationChecks...)
		if rules && inv.HARulesRead {
			observed.HARules, observed.HARulesRead, rules = inv.HARules, true, false
			observed.MarkHA(inv.HAResources)
		}
		learned = true
	}
	return learned
}
