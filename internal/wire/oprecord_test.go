package wire_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

func TestOperationRecordRoundTrips(t *testing.T) {
	for _, r := range []wire.OperationRecord{
		{RunID: "run-1", OpID: "op-3", Cluster: "lab", Node: "pve1", VMID: 101, Action: plan.ActionClone,
			TaskType: "qmclone", TaskID: "9000", IntentAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC),
			UPID: "UPID:pve1:00001000:00000001:6740A1B2:qmclone:9000:root@pam!proxops:", Executor: "pve1-a"},
		{RunID: "run-1", OpID: "op-4", Cluster: "lab", Node: "pve1", VMID: 101, Action: plan.ActionStart,
			Status: plan.StatusSucceeded, Fingerprint: "uuid=x", Message: "done"},
	} {
		m, err := wire.OperationRecordToProto(r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := wire.OperationRecordFromProto(m)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(r, back); d != "" {
			t.Errorf("round trip (-want +got):\n%s", d)
		}
	}
	if _, err := wire.OperationRecordToProto(wire.OperationRecord{Action: "explode"}); err == nil {
		t.Error("unknown action accepted")
	}
}
