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
	ctx, cancel := context.WithTimeout(ctx, o.c.cfg.TaskTimeout)
	defer cancel()
	delay := o.c.cfg.TaskPollMin
	for {
		status, err := o.c.guestRunState(ctx, node, o.op)
		if err != nil {
			return failed(err, "%s: wait for HA to make the guest %s", o.what(), want)
		}
		if status == want {
			o.out.Message = fmt.Sprintf("HA made %s %s", o.id, want)
			return nil
		}
		if o.opts.Progress != nil {
			o.opts.Progress(TaskStatus{Running: true})
		}
		if err := clock.Sleep(ctx, delay); err != nil {
			return failed(err, "%s: wait for HA to make the guest %s (it is %s)", o.what(), want, status)
		}
		delay = min(delay*3/2, o.c.cfg.TaskPollMax)
	}
}

// guestRunState reads a guest's status (running or stopped): GET …/status/current.
func (c *Client) guestRunState(ctx context.Context, node string, op plan.Operation) (string, error) {
	raw, err := c.get(ctx, "/nodes/{node}/"+string(op.GuestType)+"/{vmid}/status/current", []string{node, fmt.Sprint(op.VMID)}, nil)
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
