package pve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pveformat"
)

// Resource pools: the operations of the cluster's work queue (plan.ClusterScope). PVE cannot tag a pool, so
// ProxOps owns one only when both hold, checked on the pool read right before each write: its comment
// carries the ownership marker (pveformat.OwnershipMarker), and the ownership inventory the executor reads
// itself holds a record of it (ObjectOwnership). A claim is the one write to a pool without them: it adds the
// marker to the pool the plan named, only while its comment is still the one the plan observed.

// ObjectKindPool is the ownership inventory's kind of a resource pool (the bus's ObjectPool).
const ObjectKindPool = "pool"

// ObjectOwnership gives Apply the ownership records of cluster objects (KV proxops_owned), read by the
// executor itself.
type ObjectOwnership interface {
	// ObjectRecorded reports whether the inventory holds a record of the object of kind and id in the
	// operation's cluster.
	ObjectRecorded(ctx context.Context, kind, id string) (bool, error)
}

// Pool is a resource pool as GET /pools?poolid= reports it.
type Pool struct {
	ID      string
	Comment string
	// Members are the pool's guests.
	Members []PoolMember
}

// PoolMember is a guest of a pool.
type PoolMember struct {
	VMID int
	Type inventory.GuestType
	Node string
}

// Has reports whether a guest is a member of the pool.
func (p Pool) Has(vmid int) bool {
	for _, m := range p.Members {
		if m.VMID == vmid {
			return true
		}
	}
	return false
}

// ReadPool reads one pool; found is false when PVE has none of that id.
func (c *Client) ReadPool(ctx context.Context, id string) (p Pool, found bool, err error) {
	pools, err := c.ListPools(ctx)
	if err != nil {
		return Pool{}, false, err
	}
	known := false
	for _, q := range pools {
		known = known || q.ID == id
	}
	if !known {
		return Pool{}, false, nil
	}
	raw, err := c.getRaw(ctx, "/pools", nil, url.Values{"poolid": {id}})
	if err != nil {
		return Pool{}, false, fmt.Errorf("read pool %s: %w", id, err)
	}
	var entries []struct {
		PoolID  string `json:"poolid"`
		Comment string `json:"comment"`
		Members []struct {
			Type string          `json:"type"`
			VMID json.RawMessage `json:"vmid"`
			Node string          `json:"node"`
		} `json:"members"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil || len(entries) != 1 || entries[0].PoolID != id {
		return Pool{}, false, fmt.Errorf("read pool %s: unexpected answer %.200s", id, raw)
	}
	p = Pool{ID: id, Comment: entries[0].Comment}
	for _, m := range entries[0].Members {
		if m.Type != string(inventory.QEMU) && m.Type != string(inventory.LXC) {
			continue
		}
		vmid, err := strconv.Atoi(string(m.VMID))
		if err != nil {
			return Pool{}, false, fmt.Errorf("read pool %s: member vmid %s: %w", id, m.VMID, err)
		}
		p.Members = append(p.Members, PoolMember{VMID: vmid, Type: inventory.GuestType(m.Type), Node: m.Node})
	}
	return p, true, nil
}

// ListPools lists the pools with their comments (no members): one GET /pools.
func (c *Client) ListPools(ctx context.Context) ([]Pool, error) {
	raw, err := c.getRaw(ctx, "/pools", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	var entries []struct {
		PoolID  string `json:"poolid"`
		Comment string `json:"comment"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	out := make([]Pool, 0, len(entries))
	for _, e := range entries {
		out = append(out, Pool{ID: e.PoolID, Comment: e.Comment})
	}
	return out, nil
}

// applyPool applies an operation on a resource pool.
func (c *Client) applyPool(ctx context.Context, op plan.Operation, opts ApplyOptions) (Outcome, error) {
	a := &applier{c: c, op: op, opts: opts}
	p := &poolApplier{applier: a}
	err := p.run(ctx)
	if err != nil {
		return a.out, classify(err)
	}
	return a.out, nil
}

type poolApplier struct {
	*applier
	id string
}

func (p *poolApplier) what() string { return fmt.Sprintf("%s %s", p.op.Action, p.id) }

func (p *poolApplier) run(ctx context.Context) error {
	op := p.op
	if op.Node != plan.ClusterScope {
		return terminal("%s: a pool operation runs on the cluster's work queue, not on node %q", op.Action, op.Node)
	}
	p.id, _ = op.Param("poolid")
	if p.id == "" {
		return terminal("%s: no poolid", op.Action)
	}
	switch op.Action {
	case plan.ActionCreatePool:
		return p.create(ctx)
	case plan.ActionConfigurePool:
		return p.configure(ctx)
	case plan.ActionClaimPool:
		return p.claim(ctx)
	case plan.ActionDeletePool:
		return p.delete(ctx)
	case plan.ActionSetPoolMembers:
		return p.members(ctx)
	default:
		// A guest's or an artifact's action is no pool operation.
		return terminal("%s is not a pool action", op.Action)
	}
}

// read reads the pool; an absent pool is a conflict (the plan saw it).
func (p *poolApplier) read(ctx context.Context) (Pool, error) {
	pool, found, err := p.c.ReadPool(ctx, p.id)
	if err != nil {
		return Pool{}, err
	}
	if !found {
		return Pool{}, conflict("%s: the pool no longer exists", p.what())
	}
	return pool, nil
}

// marked is the pool as its ownership checks name it.
func (p *poolApplier) marked() markedObject {
	return markedObject{what: p.what(), noun: "pool", kind: ObjectKindPool, id: p.id}
}

func (p *poolApplier) write(ctx context.Context, method string, body map[string]string) error {
	body["poolid"] = p.id
	var query url.Values
	if method == http.MethodDelete {
		query, body = url.Values{"poolid": {p.id}}, nil
	}
	if _, err := p.c.request(ctx, true, method, "/pools", nil, query, body); err != nil {
		return failed(err, "%s", p.what())
	}
	return nil
}

// create creates the pool with the marked comment. A pool of that id that exists is a conflict, unless an
// earlier delivery of this operation sent the create and the pool carries exactly the comment it wrote.
func (p *poolApplier) create(ctx context.Context) error {
	pool, found, err := p.c.ReadPool(ctx, p.id)
	if err != nil {
		return err
	}
	if found {
		if p.opts.Prior.Intent != nil && pool.Comment == p.comment() {
			p.out.AlreadyDone = true
			return nil
		}
		return conflict("%s: a pool of that id exists", p.what())
	}
	if p.opts.Journal != nil {
		if err := p.opts.Journal.Intend(ctx, Intent{TaskType: "poolcreate", Node: plan.ClusterScope, ID: p.id, At: p.opts.Now()}); err != nil {
			return err
		}
	}
	return p.write(ctx, http.MethodPost, map[string]string{"comment": p.comment()})
}

// configure writes the comment of an owned pool, the marker kept.
func (p *poolApplier) configure(ctx context.Context) error {
	pool, err := p.read(ctx)
	if err != nil {
		return err
	}
	if err := p.marked().owned(ctx, p.opts.Objects, pool.Comment); err != nil {
		return err
	}
	if pool.Comment == p.comment() {
		p.out.AlreadyDone = true
		return nil
	}
	if err := p.marked().expected(pool.Comment, p.op.Precondition); err != nil {
		return err
	}
	return p.write(ctx, http.MethodPut, map[string]string{"comment": p.comment()})
}

// claim adds the marker to the comment of the pool the plan named, only while the comment is still the one
// the plan observed; the rest of the comment is kept.
func (p *poolApplier) claim(ctx context.Context) error {
	pool, err := p.read(ctx)
	if err != nil {
		return err
	}
	if pveformat.Marked(pool.Comment) {
		p.out.AlreadyDone = true
		return nil
	}
	if err := p.marked().claimable(pool.Comment, p.op.Precondition); err != nil {
		return err
	}
	return p.write(ctx, http.MethodPut, map[string]string{"comment": pveformat.MarkComment(pool.Comment)})
}

// delete deletes an owned pool; one already gone is done. PVE refuses a pool that is not empty.
func (p *poolApplier) delete(ctx context.Context) error {
	pool, found, err := p.c.ReadPool(ctx, p.id)
	if err != nil {
		return err
	}
	if !found {
		p.out.AlreadyDone = true
		return nil
	}
	if err := p.marked().owned(ctx, p.opts.Objects, pool.Comment); err != nil {
		return err
	}
	if err := p.marked().expected(pool.Comment, p.op.Precondition); err != nil {
		return err
	}
	return p.write(ctx, http.MethodDelete, map[string]string{})
}

// members adds the operation's guest to an owned pool (moving it out of its current pool, which must be
// owned too) or removes it. The guest must be owned as for any write to it.
func (p *poolApplier) members(ctx context.Context) error {
	op := p.op
	node, err := p.opGuest(p.what())
	if err != nil {
		return err
	}
	remove := false
	if v, _ := op.Param("delete"); v == "1" {
		remove = true
	}
	pool, err := p.read(ctx)
	if err != nil {
		return err
	}
	if err := p.marked().owned(ctx, p.opts.Objects, pool.Comment); err != nil {
		return err
	}
	if pool.Has(op.VMID) != remove {
		p.out.AlreadyDone = true
		return nil
	}
	if err := p.ownedGuestAt(ctx, node, op.VMID); err != nil {
		return err
	}
	body := map[string]string{"vms": strconv.Itoa(op.VMID)}
	if remove {
		body["delete"] = "1"
		return p.write(ctx, http.MethodPut, body)
	}
	from, err := p.poolOf(ctx, op.VMID)
	if err != nil {
		return err
	}
	if from != "" {
		other := &poolApplier{applier: p.applier, id: from}
		pool, err := other.read(ctx)
		if err != nil {
			return err
		}
		if err := other.marked().owned(ctx, p.opts.Objects, pool.Comment); err != nil {
			return refused(RefusalNotOwned, "%s: refused: the guest is in pool %s, which ProxOps does not own: %v", p.what(), from, err)
		}
		body["allow-move"] = "1"
	}
	return p.write(ctx, http.MethodPut, body)
}

// poolOf is the pool a guest is in, from the cluster's resources ("" for none).
func (p *poolApplier) poolOf(ctx context.Context, vmid int) (string, error) {
	raw, err := p.c.getRaw(ctx, "/cluster/resources", nil, url.Values{"type": {"vm"}})
	if err != nil {
		return "", fmt.Errorf("%s: read the cluster resources: %w", p.what(), err)
	}
	var rs []struct {
		VMID json.RawMessage `json:"vmid"`
		Pool string          `json:"pool"`
	}
	if err := json.Unmarshal(raw, &rs); err != nil {
		return "", fmt.Errorf("%s: read the cluster resources: %w", p.what(), err)
	}
	for _, r := range rs {
		if string(r.VMID) == strconv.Itoa(vmid) {
			return r.Pool, nil
		}
	}
	return "", nil
}
