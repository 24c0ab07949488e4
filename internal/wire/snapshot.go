package wire

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	planv1 "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
	"github.com/proxops/proxops/internal/plan"
)

// OwnedSnapshotToProto converts the record of a safety snapshot into a proxops.plan.v1.OwnedSnapshot.
func OwnedSnapshotToProto(cluster string, r plan.SnapshotRecord) (proto.Message, error) {
	if r.VMID <= 0 || !plan.IsOwnSnapshotName(r.Name) {
		return nil, fmt.Errorf("snapshot record %s/%d %q: needs a vmid and a name starting with %s", cluster, r.VMID, r.Name, plan.SnapshotPrefix)
	}
	p := &planv1.OwnedSnapshot{Cluster: cluster, Vmid: int64(r.VMID), Name: r.Name, Ref: r.Ref, Node: r.Node,
		RunId: r.RunID, Commit: r.Commit, Change: r.Change}
	if !r.RecordedAt.IsZero() {
		p.RecordedAt = timeToProto(r.RecordedAt)
	}
	return p, nil
}

// UnmarshalOwnedSnapshot decodes a snapshot record as stored in the proxops_owned KV bucket; it returns the
// record and its cluster.
func UnmarshalOwnedSnapshot(data []byte) (plan.SnapshotRecord, string, error) {
	p := &planv1.OwnedSnapshot{}
	if err := proto.Unmarshal(data, p); err != nil {
		return plan.SnapshotRecord{}, "", fmt.Errorf("owned snapshot: %w", err)
	}
	r := plan.SnapshotRecord{VMID: int(p.GetVmid()), Name: p.GetName(), Ref: p.GetRef(), Node: p.GetNode(),
		RunID: p.GetRunId(), Commit: p.GetCommit(), Change: p.GetChange()}
	if p.GetRecordedAt() != nil {
		t, err := timeFromProto(p.GetRecordedAt())
		if err != nil {
			return plan.SnapshotRecord{}, "", fmt.Errorf("owned snapshot %s/%d %s: recorded at: %w", p.GetCluster(), r.VMID, r.Name, err)
		}
		r.RecordedAt = t
	}
	return r, p.GetCluster(), nil
}
