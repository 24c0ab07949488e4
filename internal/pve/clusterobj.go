package pve

import (
	"context"
	"fmt"
	"net/http"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pveformat"
)

// HA resources, HA rules and backup jobs: the operations of the cluster's work queue on the cluster objects
// PVE keeps a comment for. Ownership is as for pools (pool.go): the marker in the live comment and the
// record in the ownership inventory, both checked on the object read right before each write; a claim adds
// the marker only while the comment is still the one the plan observed.

// The ownership inventory's kinds of these objects.
const (
	ObjectKindHAResource = "haresource"
	ObjectKindHARule     = "harule"
	ObjectKindBackupJob  = "backupjob"
)

// clusterObject is how the operations reach one kind of object.
type clusterObject struct {
	kind string // ObjectKind…
	noun string // in messages
	// idParam is the operation parameter naming the object.
	idParam string
	// read returns the object's live comment; found is false when PVE has none of that id.
	read func(ctx context.Context, c *Client, id string) (comment string, found bool, err error)
	// create, update and remove write it; body holds the options, comment marked.
	create func(ctx context.Context, c *Client, id string, body map[string]string) error
	update func(ctx context.Context, c *Client, id string, body map[string]string) error
	remove func(ctx context.Context, c *Client, id string) error
}

// restObject is a cluster object PVE lists, creates at collection (the id under idParam in the body) and updates and
// deletes at collection/{id}; match returns an entry's comment and whether it is the one of that id.
func restObject[T any](kind, noun, idParam, collection string, list func(*Client, context.Context) ([]T, error),
	match func(x T, id string) (string, bool)) clusterObject {
	item := collection + "/{" + idParam + "}"
	return clusterObject{
		kind: kind, noun: noun, idParam: idParam,
		read: func(ctx context.Context, c *Client, id string) (string, bool, error) {
			entries, err := list(c, ctx)
			if err != nil {
				return "", false, err
			}
			comment, found := readComment(entries, func(x T) (string, bool) { return match(x, id) })
			return comment, found, nil
		},
		create: func(ctx context.Context, c *Client, id string, body map[string]string) error {
			body[idParam] = id
			_, err := c.request(ctx, true, http.MethodPost, collection, nil, nil, body)
			return err
		},
		update: func(ctx context.Context, c *Client, id string, body map[string]string) error {
			_, err := c.request(ctx, true, http.MethodPut, item, []string{id}, nil, body)
			return err
		},
		remove: func(ctx context.Context, c *Client, id string) error {
			_, err := c.request(ctx, true, http.MethodDelete, item, []string{id}, nil, nil)
			return err
		},
	}
}

// clusterObjects are the kinds by the claim's object parameter.
var clusterObjects = map[string]*clusterObject{
	"ha-resource": &haResourceObject,
	"ha-rule":     &haRuleObject,
	"backup-job":  &backupJobObject,
}

// objectOf is the kind an action writes.
func objectOf(op plan.Operation) (*clusterObject, error) {
	switch op.Action {
	case plan.ActionCreateHAResource, plan.ActionConfigureHAResource, plan.ActionDeleteHAResource:
		return &haResourceObject, nil
	case plan.ActionCreateHARule, plan.ActionConfigureHARule, plan.ActionDeleteHARule:
		return &haRuleObject, nil
	case plan.ActionCreateBackupJob, plan.ActionConfigureBackupJob, plan.ActionDeleteBackupJob:
		return &backupJobObject, nil
	case plan.ActionClaimClusterObject:
		name, _ := op.Param("object")
		if o := clusterObjects[name]; o != nil {
			return o, nil
		}
		return nil, terminal("%s: unknown object %q", op.Action, name)
	default:
		return nil, terminal("%s is not an action on an HA resource, HA rule or backup job", op.Action)
	}
}

// applyClusterObject applies an operation on an HA resource, HA rule or backup job.
func (c *Client) applyClusterObject(ctx context.Context, op plan.Operation, opts ApplyOptions) (Outcome, error) {
	a := &applier{c: c, op: op, opts: opts}
	o := &objApplier{applier: a}
	if err := o.run(ctx); err != nil {
		return a.out, classify(err)
	}
	return a.out, nil
}

type objApplier struct {
	*applier
	obj *clusterObject
	id  string
}

func (o *objApplier) what() string { return fmt.Sprintf("%s %s %s", o.op.Action, o.obj.noun, o.id) }

func (o *objApplier) run(ctx context.Context) error {
	op := o.op
	if op.Node != plan.ClusterScope {
		return terminal("%s: an operation on a cluster object runs on the cluster's work queue, not on node %q", op.Action, op.Node)
	}
	obj, err := objectOf(op)
	if err != nil {
		return err
	}
	o.obj = obj
	o.id, _ = op.Param(obj.idParam)
	if o.id == "" {
		return terminal("%s: no %s", op.Action, obj.idParam)
	}
	switch op.Action {
	case plan.ActionCreateHAResource, plan.ActionCreateHARule, plan.ActionCreateBackupJob:
		return o.create(ctx)
	case plan.ActionConfigureHAResource, plan.ActionConfigureHARule, plan.ActionConfigureBackupJob:
		return o.configure(ctx)
	case plan.ActionDeleteHAResource, plan.ActionDeleteHARule, plan.ActionDeleteBackupJob:
		return o.delete(ctx)
	default:
		return o.claim(ctx)
	}
}

// body is what the operation writes: its parameters but the object's id and the claim's object, the
// comment with the ownership marker.
func (o *objApplier) body() map[string]string {
	out := map[string]string{}
	for _, kv := range o.op.Params {
		if kv.Key == o.obj.idParam || kv.Key == "object" {
			continue
		}
		out[kv.Key] = kv.Value
	}
	out["comment"] = pveformat.MarkComment(out["comment"])
	return out
}

func (o *objApplier) read(ctx context.Context) (string, error) {
	comment, found, err := o.obj.read(ctx, o.c, o.id)
	if err != nil {
		return "", fmt.Errorf("%s: %w", o.what(), err)
	}
	if !found {
		return "", conflict("%s: the %s no longer exists", o.what(), o.obj.noun)
	}
	return comment, nil
}

// marked is the object as its ownership checks name it.
func (o *objApplier) marked() markedObject {
	return markedObject{what: o.what(), noun: o.obj.noun, kind: o.obj.kind, id: o.id}
}

// create creates the object with the marked comment. One of that id that exists is a conflict, unless an
// earlier delivery of this operation sent the create and the object carries exactly the comment it wrote.
func (o *objApplier) create(ctx context.Context) error {
	body := o.body()
	comment, found, err := o.obj.read(ctx, o.c, o.id)
	if err != nil {
		return fmt.Errorf("%s: %w", o.what(), err)
	}
	if found {
		if o.opts.Prior.Intent != nil && comment == body["comment"] {
			o.out.AlreadyDone = true
			return nil
		}
		return conflict("%s: a %s of that id exists", o.what(), o.obj.noun)
	}
	if o.opts.Journal != nil {
		if err := o.opts.Journal.Intend(ctx, Intent{TaskType: o.obj.kind + "create", Node: plan.ClusterScope, ID: o.id, At: o.opts.Now()}); err != nil {
			return err
		}
	}
	delete(body, "delete")
	if o.op.Action == plan.ActionCreateHAResource {
		// The HA manager takes over the guest's run state: the guest must be owned as for any write to it.
		delete(body, "node")
		if err := o.guestOwned(ctx); err != nil {
			return err
		}
	}
	if err := o.obj.create(ctx, o.c, o.id, body); err != nil {
		return failed(err, "%s", o.what())
	}
	return o.waitHA(ctx)
}

// guestOwned checks that ProxOps owns the guest the operation names (VMID, GuestType, Params node).
func (o *objApplier) guestOwned(ctx context.Context) error {
	node, err := o.opGuest(o.what())
	if err != nil {
		return err
	}
	return o.ownedGuestAt(ctx, node, o.op.VMID)
}

// opGuest checks the guest a cluster object's operation names (VMID, GuestType, and the node parameter,
// which it returns); what names the operation in errors.
func (a *applier) opGuest(what string) (node string, err error) {
	op := a.op
	if op.VMID < 100 || (op.GuestType != inventory.QEMU && op.GuestType != inventory.LXC) {
		return "", terminal("%s: invalid guest %s %d", what, op.GuestType, op.VMID)
	}
	node, _ = op.Param("node")
	if !pveformat.ValidNodeName(node) {
		return "", terminal("%s: invalid guest node %q", what, node)
	}
	return node, nil
}

// ownedGuestAt reads guest vmid on node and checks that ProxOps owns it, right before a write that
// concerns it.
func (a *applier) ownedGuestAt(ctx context.Context, node string, vmid int) error {
	g, err := a.readGuest(ctx, node, vmid)
	if err != nil {
		return err
	}
	return a.owned(ctx, g)
}

// configure writes the options of an owned object, the marker kept.
func (o *objApplier) configure(ctx context.Context) error {
	comment, err := o.read(ctx)
	if err != nil {
		return err
	}
	if err := o.marked().owned(ctx, o.opts.Objects, comment); err != nil {
		return err
	}
	if err := o.marked().expected(comment, o.op.Precondition); err != nil {
		return err
	}
	body := o.body()
	if o.op.Action == plan.ActionConfigureHAResource {
		// The node names the guest for the ownership check; PVE's update takes no node.
		delete(body, "node")
		if err := o.guestOwned(ctx); err != nil {
			return err
		}
	}
	if err := o.obj.update(ctx, o.c, o.id, body); err != nil {
		return failed(err, "%s", o.what())
	}
	return o.waitHA(ctx)
}

// claim adds the marker to the comment of the object the plan named, only while the comment is still the
// one the plan observed; the rest of the comment is kept.
func (o *objApplier) claim(ctx context.Context) error {
	comment, err := o.read(ctx)
	if err != nil {
		return err
	}
	if pveformat.Marked(comment) {
		o.out.AlreadyDone = true
		return nil
	}
	if err := o.marked().claimable(comment, o.op.Precondition); err != nil {
		return err
	}
	body := map[string]string{"comment": pveformat.MarkComment(comment)}
	if err := o.obj.update(ctx, o.c, o.id, body); err != nil {
		return failed(err, "%s", o.what())
	}
	return nil
}

// delete deletes an owned object; one already gone is done.
func (o *objApplier) delete(ctx context.Context) error {
	comment, found, err := o.obj.read(ctx, o.c, o.id)
	if err != nil {
		return fmt.Errorf("%s: %w", o.what(), err)
	}
	if !found {
		o.out.AlreadyDone = true
		return nil
	}
	if err := o.marked().owned(ctx, o.opts.Objects, comment); err != nil {
		return err
	}
	if err := o.marked().expected(comment, o.op.Precondition); err != nil {
		return err
	}
	if err := o.obj.remove(ctx, o.c, o.id); err != nil {
		return failed(err, "%s", o.what())
	}
	return nil
}
