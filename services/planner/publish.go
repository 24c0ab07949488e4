package planner

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

// encodeEvent converts a plan event into its message.
func encodeEvent(e bus.PlanEvent, v any) (proto.Message, error) {
	switch x := v.(type) {
	case plan.Planned:
		return wire.PlannedToProto(x)
	case plan.Rejected:
		return wire.RejectedToProto(x)
	case plan.Held:
		return wire.HeldToProto(x), nil
	case plan.FinishedRun:
		return wire.FinishedToProto(x)
	}
	return nil, fmt.Errorf("plan event %s: unexpected value %T", e, v)
}

// publishFree publishes a dry run's event: it drives nothing, so it takes no lease and no sequence check;
// the message id <run>.<event> makes a republication a no-op.
func (p *planner) publishFree(ctx context.Context, cluster, runID string, e bus.PlanEvent, v any) error {
	subject, err := bus.PlanSubject(cluster, e)
	if err != nil {
		return err
	}
	m, err := encodeEvent(e, v)
	if err != nil {
		return err
	}
	_, err = p.bus.Publish(ctx, subject, m, bus.WithMsgID(runID+"."+string(e)))
	return err
}

// publish publishes an event of the run this driver drives, expecting the cluster's plan subjects to end
// where this driver last saw them. When another party wrote in between, the lease decides: still held (a dry
// run published, or a planner that lost the lease has not noticed yet), the driver carries on from the new
// end; lost, it stops.
func (d *driver) publish(ctx context.Context, runID string, e bus.PlanEvent, v any) error {
	subject, err := bus.PlanSubject(d.cluster, e)
	if err != nil {
		return err
	}
	m, err := encodeEvent(e, v)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		ack, err := d.p.bus.Publish(ctx, subject, m, bus.WithMsgID(runID+"."+string(e)), bus.ExpectLastSequenceOn(d.filter, d.lastSeq))
		if err == nil {
			if !ack.Duplicate {
				d.lastSeq = ack.Sequence
			}
			return nil
		}
		if !errors.Is(err, bus.ErrWrongLastSequence) || attempt >= 8 {
			return err
		}
		if rerr := d.lease.Renew(ctx); rerr != nil {
			d.lost(rerr)
			return fmt.Errorf("publish %s of %s: %w", e, runID, rerr)
		}
		seq, lerr := d.p.bus.LastSequence(ctx, bus.StreamPlans, d.filter)
		if lerr != nil {
			return lerr
		}
		d.log.Debug("plan events were written by another party; the lease is still held", "from_seq", d.lastSeq, "to_seq", seq)
		d.lastSeq = seq
	}
}
