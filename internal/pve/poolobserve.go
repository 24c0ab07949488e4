package pve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"

	"github.com/proxops/proxops/internal/inventory"
)

// observePools reads the cluster's resource pools for an inventory with two requests whatever their number:
// GET /pools (ids and comments) and GET /cluster/resources?type=vm, whose pool field gives each guest's pool.
func (c *Client) observePools(ctx context.Context) ([]inventory.Pool, error) {
	pools, err := c.ListPools(ctx)
	if err != nil {
		return nil, failed(err, "observe pools")
	}
	raw, err := c.getRaw(ctx, "/cluster/resources", nil, url.Values{"type": {"vm"}})
	if err != nil {
		return nil, failed(err, "observe pools: read the cluster resources")
	}
	var rs []struct {
		VMID json.RawMessage `json:"vmid"`
		Pool string          `json:"pool"`
	}
	if err := json.Unmarshal(raw, &rs); err != nil {
		return nil, fmt.Errorf("observe pools: read the cluster resources: %w", err)
	}
	members := map[string][]int{}
	for _, r := range rs {
		if r.Pool == "" {
			continue
		}
		vmid, err := strconv.Atoi(string(r.VMID))
		if err != nil {
			return nil, fmt.Errorf("observe pools: vmid %s: %w", r.VMID, err)
		}
		members[r.Pool] = append(members[r.Pool], vmid)
	}
	out := make([]inventory.Pool, 0, len(pools))
	for _, p := range pools {
		m := members[p.ID]
		slices.Sort(m)
		out = append(out, inventory.Pool{ID: p.ID, Comment: p.Comment, Members: slices.Compact(m)})
	}
	slices.SortFunc(out, func(a, b inventory.Pool) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out, nil
}
