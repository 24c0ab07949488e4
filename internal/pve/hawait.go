package pve

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/proxops/proxops/internal/clock"
	"github.com/proxops/proxops/internal/plan"
)

// waitHA waits, after a create or configure of an HA resource that sets its state, until the HA manager has
// acted on it: the guest runs for started, is stopped for stopped and disabled (ignored leaves the guest to
// others). PVE answers the write at once; the manager starts or stops the guest some seconds later, and the
// operation is done only then, within the task timeout.
func (o *objApplier) waitHA(ctx context.Context) error {
	if o.op.Action != plan.ActionCreateHAResource && o.op.Action != plan.ActionConfigureHAResource {
		return nil
	}
	state, _ := o.op.Param("state")
	var want string
	switch state {
	case "started":
		want = "running"
	case "stopped", "disabled":
		want = "stopped"
	default:
		return nil
	}
	node, err := o.opGuest(o.what())
	if err != nil {
		return err
	}
	if err := o.waitRunState(ctx, node, want); err != nil {
		return err
	}
	o.out.Message = fmt.Sprintf("HA made %s %s", o.id, want)
	return nil
}

// haPowerTasks are the tasks PVE starts instead of a start or a stop of an HA-managed guest: they only ask
// the HA manager, which acts after the task has ended.
var haPowerTasks = map[string]string{"hastart": "running", "hastop": "stopped"}

// waitHAPower waits, after a power task, until the HA manager has acted when PVE handed the request to it
// (a hastart or hastop task): a restart through HA must not write the config or start again before the
// guest is actually stopped.
func (a *applier) waitHAPower(ctx context.Context, u UPID) error {
	want, ok := haPowerTasks[u.Type]
	if !ok {
		return nil
	}
	return a.waitRunState(ctx, a.op.Node, want)
}

// waitRunState polls the operation's guest on node until its status is want (running or stopped), within
// the task timeout.
func (a *applier) waitRunState(ctx context.Context, node, want string) error {
	ctx, cancel := context.WithTimeout(ctx, a.c.cfg.TaskTimeout)
	defer cancel()
	delay := a.c.cfg.TaskPollMin
	for {
		status, err := a.c.guestRunState(ctx, node, a.op)
		if err != nil {
			return failed(err, "%s: wait for HA to make the guest %s", a.what(), want)
		}
		if status == want {
			return nil
		}
		if a.opts.Progress != nil {
			a.opts.Progress(TaskStatus{Running: true})
		}
		if err := clock.Sleep(ctx, delay); err != nil {
			return failed(err, "%s: wait for HA to make the guest %s (it is %s)", a.what(), want, status)
		}
		delay = min(delay*3/2, a.c.cfg.TaskPollMax)
	}
}

// guestRunState reads a guest's status (running or stopped): GET …/status/current.
func (c *Client) guestRunState(ctx context.Context, node string, op plan.Operation) (string, error) {
	raw, err := c.getRaw(ctx, "/nodes/{node}/"+string(op.GuestType)+"/{vmid}/status/current", []string{node, fmt.Sprint(op.VMID)}, nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", fmt.Errorf("read status of %s %d: %w", op.GuestType, op.VMID, err)
	}
	return st.Status, nil
}
