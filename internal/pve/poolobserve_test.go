package pve_test

import (
	"slices"
	"testing"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pve"
)

// An observe asked for the pools reads them with two requests whatever their number, each with its comment
// and its guests from every node; one not asked reads none.
func TestObserveReadsThePoolsWithTheirMembersOnlyWhenAsked(t *testing.T) {
	c := poolSim(t)
	c.root(t, "POST", "/pools", "poolid", "web", "comment", "front")
	c.root(t, "POST", "/pools", "poolid", "web/prod")
	c.root(t, "POST", "/pools", "poolid", "empty")
	c.root(t, "PUT", "/pools", "poolid", "web", "vms", "100")
	c.root(t, "PUT", "/pools", "poolid", "web/prod", "vms", "101")
	cl := c.client(t)
	ctx := testContext(t)

	n, err := cl.Observe(ctx, pve.ObserveRequest{Cluster: "lab", Node: "pve1"})
	if err != nil {
		t.Fatal(err)
	}
	if n.PoolsObserved || len(n.Pools) != 0 {
		t.Fatalf("an observe not asked for pools reported %v (observed %v)", n.Pools, n.PoolsObserved)
	}
	c.sim.ResetLog()
	n, err = cl.Observe(ctx, pve.ObserveRequest{Cluster: "lab", Node: "pve1", Pools: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []inventory.Pool{{ID: "empty"}, {ID: "web", Comment: "front", Members: []int{100}}, {ID: "web/prod", Members: []int{101}}}
	if !n.PoolsObserved || !slices.EqualFunc(n.Pools, want, func(a, b inventory.Pool) bool {
		return a.ID == b.ID && a.Comment == b.Comment && slices.Equal(a.Members, b.Members)
	}) {
		t.Fatalf("pools %+v (observed %v), want %+v", n.Pools, n.PoolsObserved, want)
	}
	counts := c.sim.Counts()
	if counts["GET /pools"] != 1 || counts["GET /cluster/resources"] != 1 {
		t.Fatalf("pool reads: %v; want one GET /pools and one GET /cluster/resources", counts)
	}
}
