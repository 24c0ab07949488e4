package pve_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

// records is an ownership inventory: guests by vmid (their fingerprints) and pools by id.
type records struct {
	guests map[int]string
	pools  map[string]bool
}

func (r records) RecordedFingerprint(_ context.Context, vmid int) (string, bool, error) {
	fp, ok := r.guests[vmid]
	return fp, ok, nil
}

func (r records) ObjectRecorded(_ context.Context, kind, id string) (bool, error) {
	return kind == pve.ObjectKindPool && r.pools[id], nil
}

const seedVMFingerprint = "uuid=6f1b2c3d-0000-4000-8000-000000000100"

// poolSim is a cluster with an owned VM 100 on pve1 and a foreign VM 101 on pve2 (no tag).
func poolSim(t *testing.T) *simCluster {
	t.Helper()
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM},
		{VMID: 101, Type: "qemu", Node: "pve2", Config: "memory: 512\nname: foreign\n"},
	}
	return newSim(t, spec)
}

func poolOp(action plan.Action, id string, params ...string) plan.Operation {
	op := plan.Operation{ID: string(action) + "-" + id, Cluster: "lab", Node: plan.ClusterScope, Ref: "Pool/" + id,
		Action: action, Params: []plan.KV{{Key: "poolid", Value: id}}}
	for i := 0; i+1 < len(params); i += 2 {
		op.Params = append(op.Params, plan.KV{Key: params[i], Value: params[i+1]})
	}
	return op
}

func membersOp(id string, vmid int, node string, params ...string) plan.Operation {
	op := poolOp(plan.ActionSetPoolMembers, id, append([]string{"node", node}, params...)...)
	op.VMID, op.GuestType = vmid, inventory.QEMU
	return op
}

func expectComment(op plan.Operation, observed string) plan.Operation {
	op.Precondition.Expect = []plan.KV{{Key: "comment", Value: observed}}
	return op
}

// root sends a request to the simulator as root@pam, for the test's own arrangements (a hand change).
func (c *simCluster) root(t *testing.T, method, path string, form ...string) {
	t.Helper()
	params := url.Values{}
	for i := 0; i+1 < len(form); i += 2 {
		params.Add(form[i], form[i+1])
	}
	if err := c.sim.AdminRequest(method, path, params); err != nil {
		t.Fatal(err)
	}
}

func readPool(t *testing.T, cl *pve.Client, id string) (pve.Pool, bool) {
	t.Helper()
	p, found, err := cl.ReadPool(testContext(t), id)
	if err != nil {
		t.Fatalf("read pool %s: %v", id, err)
	}
	return p, found
}

func wantRefusal(t *testing.T, err error, reason string) {
	t.Helper()
	if got, ok := pve.RefusalOf(err); !ok || got != reason || pve.ClassOf(err) != plan.ErrorTerminal {
		t.Fatalf("err = %v (refusal %q), want a terminal %s refusal", err, got, reason)
	}
}

func TestPoolCreateConfigureDeleteOwned(t *testing.T) {
	c := poolSim(t)
	cl := c.client(t)
	ctx := testContext(t)
	inv := records{pools: map[string]bool{}}
	opts := pve.ApplyOptions{Objects: inv}

	if _, err := cl.Apply(ctx, poolOp(plan.ActionCreatePool, "web", "comment", "front ends"), opts); err != nil {
		t.Fatalf("create: %v", err)
	}
	if p, _ := readPool(t, cl, "web"); p.Comment != "front ends [proxops]" {
		t.Fatalf("created comment = %q", p.Comment)
	}
	// A second create of the same pool is a conflict unless this operation sent the first.
	_, err := cl.Apply(ctx, poolOp(plan.ActionCreatePool, "web", "comment", "front ends"), opts)
	if pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("create over an existing pool: %v", err)
	}
	again := opts
	again.Prior = pve.Prior{Intent: &pve.Intent{TaskType: "poolcreate", ID: "web"}}
	out, err := cl.Apply(ctx, poolOp(plan.ActionCreatePool, "web", "comment", "front ends"), again)
	if err != nil || !out.AlreadyDone {
		t.Fatalf("redelivered create: %+v %v", out, err)
	}

	// Without its record the pool is not ProxOps', marker or not.
	_, err = cl.Apply(ctx, expectComment(poolOp(plan.ActionConfigurePool, "web", "comment", "edge"), "front ends [proxops]"), opts)
	wantRefusal(t, err, pve.RefusalNotOwned)
	inv.pools["web"] = true
	if _, err := cl.Apply(ctx, expectComment(poolOp(plan.ActionConfigurePool, "web", "comment", "edge"), "front ends [proxops]"), opts); err != nil {
		t.Fatalf("configure: %v", err)
	}
	if p, _ := readPool(t, cl, "web"); p.Comment != "edge [proxops]" {
		t.Fatalf("configured comment = %q", p.Comment)
	}
	// A comment changed by hand since the plan observed it makes the plan stale.
	c.root(t, http.MethodPut, "/pools", "poolid", "web", "comment", "hand edit [proxops]")
	_, err = cl.Apply(ctx, expectComment(poolOp(plan.ActionConfigurePool, "web", "comment", "edge"), "edge [proxops]"), opts)
	if pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("configure over a hand edit: %v", err)
	}
	// A hand edit that drops the marker makes the pool foreign again.
	c.root(t, http.MethodPut, "/pools", "poolid", "web", "comment", "mine now")
	_, err = cl.Apply(ctx, poolOp(plan.ActionDeletePool, "web"), opts)
	wantRefusal(t, err, pve.RefusalNotOwned)
	if _, found := readPool(t, cl, "web"); !found {
		t.Fatal("a foreign pool was deleted")
	}
	c.root(t, http.MethodPut, "/pools", "poolid", "web", "comment", "mine now [proxops]")
	if _, err := cl.Apply(ctx, poolOp(plan.ActionDeletePool, "web"), opts); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, found := readPool(t, cl, "web"); found {
		t.Fatal("pool still exists after delete")
	}
	out, err = cl.Apply(ctx, poolOp(plan.ActionDeletePool, "web"), opts)
	if err != nil || !out.AlreadyDone {
		t.Fatalf("delete of a deleted pool: %+v %v", out, err)
	}
}

func TestPoolClaimAddsTheMarkerOnlyToTheObservedPool(t *testing.T) {
	c := poolSim(t)
	cl := c.client(t)
	ctx := testContext(t)
	opts := pve.ApplyOptions{Objects: records{pools: map[string]bool{}}}
	c.root(t, http.MethodPost, "/pools", "poolid", "ops", "comment", "operations")

	_, err := cl.Apply(ctx, poolOp(plan.ActionClaimPool, "ops"), opts)
	wantRefusal(t, err, pve.RefusalClaimMismatch)
	_, err = cl.Apply(ctx, expectComment(poolOp(plan.ActionClaimPool, "ops"), "other"), opts)
	wantRefusal(t, err, pve.RefusalClaimMismatch)
	if p, _ := readPool(t, cl, "ops"); p.Comment != "operations" {
		t.Fatalf("comment after refused claims = %q", p.Comment)
	}
	if _, err := cl.Apply(ctx, expectComment(poolOp(plan.ActionClaimPool, "ops"), "operations"), opts); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if p, _ := readPool(t, cl, "ops"); p.Comment != "operations [proxops]" {
		t.Fatalf("claimed comment = %q", p.Comment)
	}
	_, err = cl.Apply(ctx, expectComment(poolOp(plan.ActionClaimPool, "gone"), ""), opts)
	if pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("claim of a missing pool: %v", err)
	}
}

func TestPoolMembersMoveOwnedGuestsBetweenOwnedPools(t *testing.T) {
	c := poolSim(t)
	cl := c.client(t)
	ctx := testContext(t)
	inv := records{guests: map[int]string{100: seedVMFingerprint}, pools: map[string]bool{"a": true, "b": true}}
	opts := pve.ApplyOptions{Ownership: inv, Objects: inv}
	c.root(t, http.MethodPost, "/pools", "poolid", "a", "comment", "[proxops]")
	c.root(t, http.MethodPost, "/pools", "poolid", "b", "comment", "[proxops]")
	c.root(t, http.MethodPost, "/pools", "poolid", "foreign")

	if _, err := cl.Apply(ctx, membersOp("a", 100, "pve1"), opts); err != nil {
		t.Fatalf("add: %v", err)
	}
	out, err := cl.Apply(ctx, membersOp("a", 100, "pve1"), opts)
	if err != nil || !out.AlreadyDone {
		t.Fatalf("add again: %+v %v", out, err)
	}
	if _, err := cl.Apply(ctx, membersOp("b", 100, "pve1"), opts); err != nil {
		t.Fatalf("move: %v", err)
	}
	if a, _ := readPool(t, cl, "a"); a.Has(100) {
		t.Fatal("the guest is still in its old pool")
	}
	if b, _ := readPool(t, cl, "b"); !b.Has(100) || b.Members[0].Node != "pve1" {
		t.Fatalf("members of b = %+v", b.Members)
	}
	// A guest ProxOps does not own is never put in a pool.
	_, err = cl.Apply(ctx, membersOp("a", 101, "pve2"), opts)
	wantRefusal(t, err, pve.RefusalNotOwned)
	// A guest is never taken out of a pool ProxOps does not own.
	c.root(t, http.MethodPut, "/pools", "poolid", "b", "vms", "100", "delete", "1")
	c.root(t, http.MethodPut, "/pools", "poolid", "foreign", "vms", "100")
	_, err = cl.Apply(ctx, membersOp("a", 100, "pve1"), opts)
	wantRefusal(t, err, pve.RefusalNotOwned)
	if f, _ := readPool(t, cl, "foreign"); !f.Has(100) {
		t.Fatal("the guest left a foreign pool")
	}
	// Nor is a foreign pool's membership changed.
	_, err = cl.Apply(ctx, membersOp("foreign", 100, "pve1", "delete", "1"), opts)
	wantRefusal(t, err, pve.RefusalNotOwned)
	c.root(t, http.MethodPut, "/pools", "poolid", "foreign", "vms", "100", "delete", "1")
	c.root(t, http.MethodPut, "/pools", "poolid", "a", "vms", "100")
	if _, err := cl.Apply(ctx, membersOp("a", 100, "pve1", "delete", "1"), opts); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if a, _ := readPool(t, cl, "a"); a.Has(100) {
		t.Fatal("the guest is still a member after its removal")
	}
}

func TestPoolOperationsRunOnlyOnTheClusterQueue(t *testing.T) {
	c := poolSim(t)
	cl := c.client(t)
	op := poolOp(plan.ActionCreatePool, "web")
	op.Node = "pve1"
	_, err := cl.Apply(testContext(t), op, pve.ApplyOptions{})
	if pve.ClassOf(err) != plan.ErrorTerminal || !strings.Contains(err.Error(), "cluster's work queue") {
		t.Fatalf("pool operation on a node: %v", err)
	}
	if n := c.count(http.MethodPost, "/pools"); n != 0 {
		t.Fatalf("%d pool creates sent", n)
	}
}
