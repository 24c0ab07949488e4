package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/wire"
)

// journal is an operation's record in proxops_ops (op.<cluster>.<node>.<run>.<op>, bus.OpKey): the intent
// written before a non-idempotent request, the UPID once PVE accepted it, and the outcome. It implements
// pve.Journal. A record an executor of an earlier release kept under <run>.<op> (bus.LegacyOpKey) is read
// when the new key holds none, and carried on under the new key.
type journal struct {
	b     *bus.Bus
	key   string
	rec   wire.OperationRecord
	fault func(string)
}

func loadJournal(ctx context.Context, b *bus.Bus, op plan.Operation, replica string, fault func(string)) (*journal, error) {
	key, err := bus.OpKey(op.Cluster, op.Node, op.RunID, op.ID)
	if err != nil {
		return nil, err
	}
	j := &journal{b: b, key: key, fault: fault, rec: wire.OperationRecord{RunID: op.RunID, OpID: op.ID,
		Cluster: op.Cluster, Node: op.Node, VMID: op.VMID, Action: op.Action, Executor: replica}}
	m := wire.NewOperationRecord()
	if _, err := b.GetOpRecord(ctx, op.Cluster, op.Node, op.RunID, op.ID, m); err != nil {
		if errors.Is(err, bus.ErrNotFound) {
			return j, nil
		}
		return nil, fmt.Errorf("read operation record %s: %w", key, err)
	}
	rec, err := wire.OperationRecordFromProto(m)
	if err != nil {
		return nil, fmt.Errorf("read operation record %s: %w", key, err)
	}
	rec.Executor = replica
	j.rec = rec
	return j, nil
}

// prior is what an earlier delivery recorded.
func (j *journal) prior() pve.Prior {
	var p pve.Prior
	if !j.rec.IntentAt.IsZero() {
		p.Intent = &pve.Intent{TaskType: j.rec.TaskType, Node: j.rec.Node, ID: j.rec.TaskID, VMID: j.rec.VMID, At: j.rec.IntentAt}
	}
	p.UPID = j.rec.UPID
	return p
}

func (j *journal) put(ctx context.Context) error {
	m, err := wire.OperationRecordToProto(j.rec)
	if err != nil {
		return err
	}
	// The record must outlive a cancelled handler: it is what the next delivery reads.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := j.b.PutProto(ctx, bus.BucketOps, j.key, m); err != nil {
		return fmt.Errorf("write operation record %s: %w", j.key, err)
	}
	return nil
}

// Intend implements pve.Journal.
func (j *journal) Intend(ctx context.Context, in pve.Intent) error {
	j.rec.TaskType, j.rec.TaskID, j.rec.IntentAt, j.rec.UPID = in.TaskType, in.ID, in.At, ""
	if in.Node != "" {
		j.rec.Node = in.Node
	}
	return j.put(ctx)
}

// Submitted implements pve.Journal.
func (j *journal) Submitted(ctx context.Context, u pve.UPID) error {
	if j.fault != nil {
		j.fault("submitted")
	}
	j.rec.UPID = u.String()
	return j.put(ctx)
}

// finish records the outcome.
func (j *journal) finish(ctx context.Context, status plan.ResultStatus, msg, fingerprint string) error {
	j.rec.Status, j.rec.Message, j.rec.Fingerprint = status, msg, fingerprint
	return j.put(ctx)
}
