package wire

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	planv1 "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
	"github.com/proxops/proxops/internal/plan"
)

// OperationRecord is an executor's journal entry for one operation of a run (KV proxops_ops, key
// <run>.<op>): the intent recorded before a non-idempotent request, the task it started, and the outcome.
type OperationRecord struct {
	RunID   string
	OpID    string
	Cluster string
	Node    string
	VMID    int
	Action  plan.Action
	// TaskType and TaskID name the PVE task the request starts.
	TaskType string
	TaskID   string
	// IntentAt is zero until an intent is recorded.
	IntentAt time.Time
	UPID     string
	// Status is empty while the operation is open, else its final status.
	Status      plan.ResultStatus
	Message     string
	Fingerprint string
	Executor    string
}

// OperationRecordToProto converts a record into a proxops.plan.v1.OperationRecord.
func OperationRecordToProto(r OperationRecord) (proto.Message, error) {
	action, err := actionEnum.toProto(r.Action)
	if err != nil {
		return nil, fmt.Errorf("operation record %s.%s: %w", r.RunID, r.OpID, err)
	}
	p := &planv1.OperationRecord{RunId: r.RunID, OpId: r.OpID, Cluster: r.Cluster, Node: r.Node, Vmid: int64(r.VMID),
		Action: action, TaskType: r.TaskType, TaskId: r.TaskID, Upid: r.UPID, Message: r.Message,
		Fingerprint: r.Fingerprint, Executor: r.Executor}
	if !r.IntentAt.IsZero() {
		p.IntentAt = timeToProto(r.IntentAt)
	}
	if r.Status != "" {
		if p.Status, err = resultStatusEnum.toProto(r.Status); err != nil {
			return nil, fmt.Errorf("operation record %s.%s: %w", r.RunID, r.OpID, err)
		}
	}
	return p, nil
}

// OperationRecordFromProto converts a proxops.plan.v1.OperationRecord.
func OperationRecordFromProto(m proto.Message) (OperationRecord, error) {
	p, err := as[*planv1.OperationRecord](m)
	if err != nil {
		return OperationRecord{}, fmt.Errorf("operation record: %w", err)
	}
	action, err := actionEnum.fromProto(p.GetAction())
	if err != nil {
		return OperationRecord{}, fmt.Errorf("operation record %s.%s: %w", p.GetRunId(), p.GetOpId(), err)
	}
	r := OperationRecord{RunID: p.GetRunId(), OpID: p.GetOpId(), Cluster: p.GetCluster(), Node: p.GetNode(),
		VMID: int(p.GetVmid()), Action: action, TaskType: p.GetTaskType(), TaskID: p.GetTaskId(), UPID: p.GetUpid(),
		Message: p.GetMessage(), Fingerprint: p.GetFingerprint(), Executor: p.GetExecutor()}
	if p.GetIntentAt() != nil {
		if r.IntentAt, err = timeFromProto(p.GetIntentAt()); err != nil {
			return OperationRecord{}, fmt.Errorf("operation record %s.%s: intent at: %w", p.GetRunId(), p.GetOpId(), err)
		}
	}
	if p.GetStatus() != planv1.ResultStatus_RESULT_STATUS_UNSPECIFIED {
		if r.Status, err = resultStatusEnum.fromProto(p.GetStatus()); err != nil {
			return OperationRecord{}, fmt.Errorf("operation record %s.%s: %w", p.GetRunId(), p.GetOpId(), err)
		}
	}
	return r, nil
}

// NewOperationRecord is an empty proxops.plan.v1.OperationRecord to read a KV value into.
func NewOperationRecord() proto.Message { return &planv1.OperationRecord{} }

// DecodeOperationRecord decodes a received proxops.plan.v1.OperationRecord.
func DecodeOperationRecord(ctx context.Context, decode DecodeFunc) (OperationRecord, error) {
	return decodeAs(ctx, decode, &planv1.OperationRecord{}, func(p *planv1.OperationRecord) (OperationRecord, error) {
		return OperationRecordFromProto(p)
	})
}
