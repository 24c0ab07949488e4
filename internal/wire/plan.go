package wire

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	planv1 "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
)

var actionEnum = enumMap[plan.Action, planv1.Action]{field: "action", pairs: []enumPair[plan.Action, planv1.Action]{
	{plan.ActionCreate, planv1.Action_ACTION_CREATE},
	{plan.ActionClone, planv1.Action_ACTION_CLONE},
	{plan.ActionConfigure, planv1.Action_ACTION_CONFIGURE},
	{plan.ActionResize, planv1.Action_ACTION_RESIZE},
	{plan.ActionStart, planv1.Action_ACTION_START},
	{plan.ActionShutdown, planv1.Action_ACTION_SHUTDOWN},
	{plan.ActionStop, planv1.Action_ACTION_STOP},
	{plan.ActionResume, planv1.Action_ACTION_RESUME},
	{plan.ActionMarkTemplate, planv1.Action_ACTION_MARK_TEMPLATE},
	{plan.ActionDownload, planv1.Action_ACTION_DOWNLOAD},
	{plan.ActionDelete, planv1.Action_ACTION_DELETE},
	{plan.ActionClaimTag, planv1.Action_ACTION_CLAIM_TAG},
	{plan.ActionRegenerateCloudInit, planv1.Action_ACTION_REGENERATE_CLOUDINIT},
	{plan.ActionCreatePool, planv1.Action_ACTION_CREATE_POOL},
	{plan.ActionConfigurePool, planv1.Action_ACTION_CONFIGURE_POOL},
	{plan.ActionDeletePool, planv1.Action_ACTION_DELETE_POOL},
	{plan.ActionClaimPool, planv1.Action_ACTION_CLAIM_POOL},
	{plan.ActionSetPoolMembers, planv1.Action_ACTION_SET_POOL_MEMBERS},
	{plan.ActionCreateHAResource, planv1.Action_ACTION_CREATE_HA_RESOURCE},
	{plan.ActionConfigureHAResource, planv1.Action_ACTION_CONFIGURE_HA_RESOURCE},
	{plan.ActionDeleteHAResource, planv1.Action_ACTION_DELETE_HA_RESOURCE},
	{plan.ActionCreateHARule, planv1.Action_ACTION_CREATE_HA_RULE},
	{plan.ActionConfigureHARule, planv1.Action_ACTION_CONFIGURE_HA_RULE},
	{plan.ActionDeleteHARule, planv1.Action_ACTION_DELETE_HA_RULE},
	{plan.ActionCreateBackupJob, planv1.Action_ACTION_CREATE_BACKUP_JOB},
	{plan.ActionConfigureBackupJob, planv1.Action_ACTION_CONFIGURE_BACKUP_JOB},
	{plan.ActionDeleteBackupJob, planv1.Action_ACTION_DELETE_BACKUP_JOB},
	{plan.ActionClaimClusterObject, planv1.Action_ACTION_CLAIM_CLUSTER_OBJECT},
	{plan.ActionApplyGuestFirewall, planv1.Action_ACTION_APPLY_GUEST_FIREWALL},
	{plan.ActionCreateFirewallObject, planv1.Action_ACTION_CREATE_FIREWALL_OBJECT},
	{plan.ActionConfigureFirewallObject, planv1.Action_ACTION_CONFIGURE_FIREWALL_OBJECT},
	{plan.ActionClaimFirewallObject, planv1.Action_ACTION_CLAIM_FIREWALL_OBJECT},
	{plan.ActionDeleteFirewallObject, planv1.Action_ACTION_DELETE_FIREWALL_OBJECT},
	{plan.ActionApplyClusterFirewall, planv1.Action_ACTION_APPLY_CLUSTER_FIREWALL},
	{plan.ActionMigrate, planv1.Action_ACTION_MIGRATE},
	{plan.ActionSnapshot, planv1.Action_ACTION_SNAPSHOT},
	{plan.ActionDeleteSnapshot, planv1.Action_ACTION_DELETE_SNAPSHOT},
	{plan.ActionRollback, planv1.Action_ACTION_ROLLBACK},
	{plan.ActionHAMigrate, planv1.Action_ACTION_HA_MIGRATE},
}}

var planGuestTypeEnum = enumMap[inventory.GuestType, planv1.GuestType]{field: "guest type", pairs: []enumPair[inventory.GuestType, planv1.GuestType]{
	{inventory.QEMU, planv1.GuestType_GUEST_TYPE_QEMU},
	{inventory.LXC, planv1.GuestType_GUEST_TYPE_LXC},
}}

var resultStatusEnum = enumMap[plan.ResultStatus, planv1.ResultStatus]{field: "status", pairs: []enumPair[plan.ResultStatus, planv1.ResultStatus]{
	{plan.StatusStarted, planv1.ResultStatus_RESULT_STATUS_STARTED},
	{plan.StatusProgress, planv1.ResultStatus_RESULT_STATUS_PROGRESS},
	{plan.StatusSucceeded, planv1.ResultStatus_RESULT_STATUS_SUCCEEDED},
	{plan.StatusFailed, planv1.ResultStatus_RESULT_STATUS_FAILED},
	{plan.StatusSkipped, planv1.ResultStatus_RESULT_STATUS_SKIPPED},
}}

// errorClassEnum maps ErrorNone to ERROR_CLASS_UNSPECIFIED: the contract has no "none" value.
var errorClassEnum = enumMap[plan.ErrorClass, planv1.ErrorClass]{field: "error class", pairs: []enumPair[plan.ErrorClass, planv1.ErrorClass]{
	{plan.ErrorNone, planv1.ErrorClass_ERROR_CLASS_UNSPECIFIED},
	{plan.ErrorRetryable, planv1.ErrorClass_ERROR_CLASS_RETRYABLE},
	{plan.ErrorConflict, planv1.ErrorClass_ERROR_CLASS_CONFLICT},
	{plan.ErrorTerminal, planv1.ErrorClass_ERROR_CLASS_TERMINAL},
}}

// guestTypeToProto: an operation on an artifact (vmid 0) has no guest type; a guest's must be known.
func guestTypeToProto(t inventory.GuestType, vmid int) (planv1.GuestType, error) {
	if t == "" && vmid == 0 {
		return planv1.GuestType_GUEST_TYPE_UNSPECIFIED, nil
	}
	return planGuestTypeEnum.toProto(t)
}

func guestTypeFromProto(t planv1.GuestType, vmid int64) (inventory.GuestType, error) {
	if t == planv1.GuestType_GUEST_TYPE_UNSPECIFIED && vmid == 0 {
		return "", nil
	}
	return planGuestTypeEnum.fromProto(t)
}

func kvsToProto(kvs []plan.KV) []*planv1.KeyValue {
	var out []*planv1.KeyValue
	for _, kv := range kvs {
		out = append(out, &planv1.KeyValue{Key: kv.Key, Value: kv.Value, SecretRefs: kv.SecretRefs})
	}
	return out
}

func kvsFromProto(ps []*planv1.KeyValue) []plan.KV {
	var out []plan.KV
	for _, p := range ps {
		out = append(out, plan.KV{Key: p.GetKey(), Value: p.GetValue(), SecretRefs: p.GetSecretRefs()})
	}
	return out
}

func operationToProto(o plan.Operation) (*planv1.Operation, error) {
	action, err := actionEnum.toProto(o.Action)
	if err != nil {
		return nil, err
	}
	gt, err := guestTypeToProto(o.GuestType, o.VMID)
	if err != nil {
		return nil, err
	}
	p := &planv1.Operation{
		RunId: o.RunID, OpId: o.ID, PlanId: o.PlanID, Cluster: o.Cluster, Node: o.Node,
		Vmid: int64(o.VMID), GuestType: gt, Ref: o.Ref, Action: action,
		Values: kvsToProto(o.Values), Delete: o.Delete, DependsOn: o.DependsOn, Reason: o.Reason,
		Params: kvsToProto(o.Params), SourceVmid: int64(o.SourceVMID), Storage: o.Storage,
		SecretsDigest: o.SecretsDigest, BaseUrl: o.BaseURL,
		Precondition: &planv1.Precondition{
			ExpectAbsent: o.Precondition.ExpectAbsent, Digest: o.Precondition.Digest,
			Expect: kvsToProto(o.Precondition.Expect), Fingerprint: o.Precondition.Fingerprint,
			ExpectTag: o.Precondition.ExpectTag, Name: o.Precondition.Name,
		},
	}
	for _, c := range o.Changes {
		p.Changes = append(p.Changes, &planv1.FieldChange{Field: c.Field, Before: c.Before, After: c.After})
	}
	return p, nil
}

func operationFromProto(p *planv1.Operation) (plan.Operation, error) {
	action, err := actionEnum.fromProto(p.GetAction())
	if err != nil {
		return plan.Operation{}, err
	}
	gt, err := guestTypeFromProto(p.GetGuestType(), p.GetVmid())
	if err != nil {
		return plan.Operation{}, err
	}
	pre := p.GetPrecondition()
	o := plan.Operation{
		ID: p.GetOpId(), RunID: p.GetRunId(), PlanID: p.GetPlanId(), Cluster: p.GetCluster(), Node: p.GetNode(),
		VMID: int(p.GetVmid()), GuestType: gt, Ref: p.GetRef(), Action: action,
		Values: kvsFromProto(p.GetValues()), Delete: p.GetDelete(), Params: kvsFromProto(p.GetParams()),
		SourceVMID: int(p.GetSourceVmid()), Storage: p.GetStorage(),
		SecretsDigest: p.GetSecretsDigest(), BaseURL: p.GetBaseUrl(),
		Precondition: plan.Precondition{
			ExpectAbsent: pre.GetExpectAbsent(), Digest: pre.GetDigest(), Expect: kvsFromProto(pre.GetExpect()),
			Fingerprint: pre.GetFingerprint(), ExpectTag: pre.GetExpectTag(), Name: pre.GetName(),
		},
		DependsOn: p.GetDependsOn(), Reason: p.GetReason(),
	}
	for _, c := range p.GetChanges() {
		o.Changes = append(o.Changes, plan.Change{Field: c.GetField(), Before: c.GetBefore(), After: c.GetAfter()})
	}
	return o, nil
}

// OperationToProto converts an operation into a proxops.plan.v1.Operation.
func OperationToProto(o plan.Operation) (proto.Message, error) {
	p, err := operationToProto(o)
	if err != nil {
		return nil, fmt.Errorf("operation %s: %w", o.ID, err)
	}
	return p, nil
}

// OperationFromProto converts a proxops.plan.v1.Operation.
func OperationFromProto(m proto.Message) (plan.Operation, error) {
	p, err := as[*planv1.Operation](m)
	if err != nil {
		return plan.Operation{}, fmt.Errorf("operation: %w", err)
	}
	o, err := operationFromProto(p)
	if err != nil {
		return plan.Operation{}, fmt.Errorf("operation %s: %w", p.GetOpId(), err)
	}
	return o, nil
}

// DecodeOperation decodes a received proxops.plan.v1.Operation.
func DecodeOperation(ctx context.Context, decode DecodeFunc) (plan.Operation, error) {
	return decodeAs(ctx, decode, &planv1.Operation{}, func(p *planv1.Operation) (plan.Operation, error) { return OperationFromProto(p) })
}

func resultToProto(r plan.Result) (*planv1.OperationResult, error) {
	action, err := actionEnum.toProto(r.Action)
	if err != nil {
		return nil, err
	}
	status, err := resultStatusEnum.toProto(r.Status)
	if err != nil {
		return nil, err
	}
	class, err := errorClassEnum.toProto(r.ErrorClass)
	if err != nil {
		return nil, err
	}
	gt, err := guestTypeToProto(r.GuestType, r.VMID)
	if err != nil {
		return nil, err
	}
	attempt, err := int32Of("attempt", r.Attempt)
	if err != nil {
		return nil, err
	}
	return &planv1.OperationResult{
		RunId: r.RunID, OpId: r.OpID, PlanId: r.PlanID, Cluster: r.Cluster, Node: r.Node, Vmid: int64(r.VMID),
		Ref: r.Ref, Action: action, Status: status, Message: r.Message, Upid: r.UPID, TaskLog: r.TaskLog,
		ErrorClass: class, AlreadyDone: r.AlreadyDone, Fingerprint: r.Fingerprint, Attempt: attempt,
		Executor: r.Executor, At: timeToProto(r.At), ElapsedMs: r.Elapsed.Milliseconds(), GuestType: gt,
	}, nil
}

func resultFromProto(p *planv1.OperationResult) (plan.Result, error) {
	action, err := actionEnum.fromProto(p.GetAction())
	if err != nil {
		return plan.Result{}, err
	}
	status, err := resultStatusEnum.fromProto(p.GetStatus())
	if err != nil {
		return plan.Result{}, err
	}
	class, err := errorClassEnum.fromProto(p.GetErrorClass())
	if err != nil {
		return plan.Result{}, err
	}
	gt, err := guestTypeFromProto(p.GetGuestType(), p.GetVmid())
	if err != nil {
		return plan.Result{}, err
	}
	at, err := timeFromProto(p.GetAt())
	if err != nil {
		return plan.Result{}, fmt.Errorf("at: %w", err)
	}
	return plan.Result{
		RunID: p.GetRunId(), OpID: p.GetOpId(), PlanID: p.GetPlanId(), Cluster: p.GetCluster(), Node: p.GetNode(),
		VMID: int(p.GetVmid()), GuestType: gt, Ref: p.GetRef(), Action: action, Status: status,
		Message: p.GetMessage(), UPID: p.GetUpid(), TaskLog: p.GetTaskLog(), ErrorClass: class,
		AlreadyDone: p.GetAlreadyDone(), Fingerprint: p.GetFingerprint(), Attempt: int(p.GetAttempt()),
		Executor: p.GetExecutor(), At: at, Elapsed: time.Duration(p.GetElapsedMs()) * time.Millisecond,
	}, nil
}

// ResultToProto converts a result into a proxops.plan.v1.OperationResult. Elapsed travels in milliseconds.
func ResultToProto(r plan.Result) (proto.Message, error) {
	p, err := resultToProto(r)
	if err != nil {
		return nil, fmt.Errorf("result of %s: %w", r.OpID, err)
	}
	return p, nil
}

// ResultFromProto converts a proxops.plan.v1.OperationResult.
func ResultFromProto(m proto.Message) (plan.Result, error) {
	p, err := as[*planv1.OperationResult](m)
	if err != nil {
		return plan.Result{}, fmt.Errorf("result: %w", err)
	}
	r, err := resultFromProto(p)
	if err != nil {
		return plan.Result{}, fmt.Errorf("result of %s: %w", p.GetOpId(), err)
	}
	return r, nil
}

// DecodeResult decodes a received proxops.plan.v1.OperationResult.
func DecodeResult(ctx context.Context, decode DecodeFunc) (plan.Result, error) {
	return decodeAs(ctx, decode, &planv1.OperationResult{}, func(p *planv1.OperationResult) (plan.Result, error) { return ResultFromProto(p) })
}
