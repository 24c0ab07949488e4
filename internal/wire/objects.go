package wire

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	planv1 "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
	"github.com/proxops/proxops/internal/plan"
)

func objectRecordsToProto(rs []plan.ObjectRecord) []*planv1.ObjectRecord {
	var out []*planv1.ObjectRecord
	for _, r := range rs {
		out = append(out, &planv1.ObjectRecord{Kind: r.Kind, Id: r.ID, Ref: r.Ref})
	}
	return out
}

func objectRecordsFromProto(ps []*planv1.ObjectRecord) []plan.ObjectRecord {
	var out []plan.ObjectRecord
	for _, p := range ps {
		out = append(out, plan.ObjectRecord{Kind: p.GetKind(), ID: p.GetId(), Ref: p.GetRef()})
	}
	return out
}

// OwnedObject is one cluster object of the ownership inventory (KV proxops_owned, key
// <cluster>.obj.<kind>.<id>).
type OwnedObject struct {
	Cluster string
	plan.ObjectRecord
	// RunID is the run that recorded the object.
	RunID      string
	RecordedAt time.Time
}

// OwnedObjectToProto converts an object's ownership record into a proxops.plan.v1.OwnedObject. A record
// without a kind or an id is refused.
func OwnedObjectToProto(o OwnedObject) (proto.Message, error) {
	if o.Kind == "" || o.ID == "" {
		return nil, fmt.Errorf("owned object %s: kind %q, id %q: both are required", o.Cluster, o.Kind, o.ID)
	}
	p := &planv1.OwnedObject{Cluster: o.Cluster, Kind: o.Kind, Id: o.ID, Ref: o.Ref, RunId: o.RunID}
	if !o.RecordedAt.IsZero() {
		p.RecordedAt = timeToProto(o.RecordedAt)
	}
	return p, nil
}

// UnmarshalOwnedObject decodes an object's ownership record as stored in the proxops_owned KV bucket.
func UnmarshalOwnedObject(data []byte) (OwnedObject, error) {
	p := &planv1.OwnedObject{}
	if err := proto.Unmarshal(data, p); err != nil {
		return OwnedObject{}, fmt.Errorf("owned object: %w", err)
	}
	o := OwnedObject{Cluster: p.GetCluster(), RunID: p.GetRunId(),
		ObjectRecord: plan.ObjectRecord{Kind: p.GetKind(), ID: p.GetId(), Ref: p.GetRef()}}
	if p.GetRecordedAt() != nil {
		var err error
		if o.RecordedAt, err = timeFromProto(p.GetRecordedAt()); err != nil {
			return OwnedObject{}, fmt.Errorf("owned object %s/%s/%s: recorded at: %w", o.Cluster, o.Kind, o.ID, err)
		}
	}
	if o.Kind == "" || o.ID == "" {
		return OwnedObject{}, fmt.Errorf("owned object %s: kind %q, id %q: both are required", o.Cluster, o.Kind, o.ID)
	}
	return o, nil
}
