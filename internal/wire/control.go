package wire

import (
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/event"
	planv1 "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
	repov1 "github.com/proxops/proxops/internal/gen/proxops/repo/v1"
	"github.com/proxops/proxops/internal/plan"
)

// OwnedGuest is one entry of the ownership inventory (KV proxops_owned, key <cluster>.<vmid>).
type OwnedGuest struct {
	Cluster string
	plan.Owned
	// RunID is the run that recorded the guest.
	RunID      string
	RecordedAt time.Time
}

// OwnedGuestToProto converts an ownership record into a proxops.plan.v1.OwnedGuest. A record without a
// fingerprint is refused: it could match no guest and would only hide a missing one.
func OwnedGuestToProto(o OwnedGuest) (proto.Message, error) {
	if o.Fingerprint == "" {
		return nil, fmt.Errorf("owned guest %s/%d: empty fingerprint", o.Cluster, o.VMID)
	}
	if o.VMID <= 0 {
		return nil, fmt.Errorf("owned guest %s/%d: vmid must be positive", o.Cluster, o.VMID)
	}
	p := &planv1.OwnedGuest{Cluster: o.Cluster, Vmid: int64(o.VMID), Ref: o.Ref, Node: o.Node, Fingerprint: o.Fingerprint,
		RunId: o.RunID, AppliedNode: o.AppliedNode}
	if !o.RecordedAt.IsZero() {
		p.RecordedAt = timeToProto(o.RecordedAt)
	}
	return p, nil
}

// OwnedGuestFromProto converts a proxops.plan.v1.OwnedGuest.
func OwnedGuestFromProto(m proto.Message) (OwnedGuest, error) {
	p, err := as[*planv1.OwnedGuest](m)
	if err != nil {
		return OwnedGuest{}, fmt.Errorf("owned guest: %w", err)
	}
	o := OwnedGuest{Cluster: p.GetCluster(), RunID: p.GetRunId(), Owned: plan.Owned{VMID: int(p.GetVmid()), Ref: p.GetRef(),
		Node: p.GetNode(), Fingerprint: p.GetFingerprint(), AppliedNode: p.GetAppliedNode()}}
	if p.GetRecordedAt() != nil {
		if o.RecordedAt, err = timeFromProto(p.GetRecordedAt()); err != nil {
			return OwnedGuest{}, fmt.Errorf("owned guest %s/%d: recorded at: %w", o.Cluster, o.VMID, err)
		}
	}
	return o, nil
}

// UnmarshalOwnedGuest decodes an ownership record as stored in the proxops_owned KV bucket.
func UnmarshalOwnedGuest(data []byte) (OwnedGuest, error) {
	m := &planv1.OwnedGuest{}
	if err := proto.Unmarshal(data, m); err != nil {
		return OwnedGuest{}, fmt.Errorf("owned guest: %w", err)
	}
	return OwnedGuestFromProto(m)
}

// ClusterControl is the planners' shared state of one cluster (KV proxops_clusters, key <cluster>): the
// newest repository event asking to apply it, the last one handled, the run in progress and the run-time
// suspension.
type ClusterControl struct {
	Cluster string
	// Want is the newest RepoChanged (not a dry run) for the cluster; WantSeq its PROXOPS_REPO sequence, or
	// one more than the previous WantSeq when the event is wanted again for a request that came late
	// (0: none yet). It only grows.
	Want    event.RepoChanged
	WantSeq uint64
	// DoneSeq is the WantSeq of the last event fully handled.
	DoneSeq uint64
	// RunID is the run in progress ("" when none), RunWantSeq the event it serves, RunPlansSeq and
	// RunResultsSeq the last PROXOPS_PLANS and PROXOPS_RESULTS sequences before it started.
	RunID         string
	RunWantSeq    uint64
	RunPlansSeq   uint64
	RunResultsSeq uint64
	// Suspended is the run-time suspension (proxops suspend), with who set it and when.
	Suspended   bool
	SuspendedBy string
	SuspendedAt time.Time
	// WantRequests are the requests coalesced into Want besides its own RequestID; RunRequests those the
	// run in progress answers. RunPublished: the run's plan or rejection is out, no request joins it any
	// more. RunTree and RunCommit are what the run plans.
	WantRequests []string
	RunRequests  []string
	RunPublished bool
	RunTree      string
	RunCommit    string
	// SeenSeq is the sequence of the newest event recorded in any way (wanted or coalesced).
	SeenSeq uint64
	// RetryAt is when a plan rejected for a transient cause is planned again (zero: no retry waits),
	// RetryAttempt the rejections in a row, RetryReason the cause.
	RetryAt      time.Time
	RetryAttempt uint32
	RetryReason  string
	// Blocked is set while a plan rejected for a permanent cause waits for a change (zero: nothing waits).
	Blocked Blocked
	// SuspendedGuests are the guests suspended from correction after an operator's rollback, by vmid.
	SuspendedGuests []plan.SuspendedGuest
}

// SuspendedGuest returns the suspension of a guest, if it has one.
func (c ClusterControl) SuspendedGuest(vmid int) (plan.SuspendedGuest, bool) {
	for _, s := range c.SuspendedGuests {
		if s.VMID == vmid {
			return s, true
		}
	}
	return plan.SuspendedGuest{}, false
}

// Blocked is what a plan rejected for a permanent cause was rejected against: triggers nobody waits on for
// the same tree are skipped until the tree, the inputs from outside the repository or a blocked node's
// executor changes, or an operator asks.
type Blocked struct {
	// Tree and Commit are what the rejected plan planned.
	Tree   string
	Commit string
	// Inputs is the digest of the inputs from outside the repository the plan was made with.
	Inputs string
	// Reason is the cause (the rejection's reason and first diagnostic); At when it was rejected.
	Reason string
	At     time.Time
	// Nodes are the nodes whose executors refused to observe for a permanent cause; InventorySeq the last
	// PROXOPS_INVENTORY sequence of the cluster before the plan.
	Nodes        []string
	InventorySeq uint64
}

// Waiting reports whether a permanent rejection waits for a change.
func (b Blocked) Waiting() bool { return b.Tree != "" || b.Commit != "" }

// Answers reports whether the control state holds a request: coalesced into the wanted event, or answered
// by the run in progress.
func (c ClusterControl) Answers(requestID string) bool {
	return requestID != "" && ((c.Pending() && c.Want.RequestID == requestID) || slices.Contains(c.WantRequests, requestID) ||
		slices.Contains(c.RunRequests, requestID))
}

// Pending reports whether an event waits to be handled.
func (c ClusterControl) Pending() bool { return c.WantSeq > c.DoneSeq }

// ClusterControlToProto converts a cluster's control state into a proxops.plan.v1.ClusterControl.
func ClusterControlToProto(c ClusterControl) (proto.Message, error) {
	p := &planv1.ClusterControl{Cluster: c.Cluster, WantSeq: c.WantSeq, DoneSeq: c.DoneSeq, RunId: c.RunID,
		RunWantSeq: c.RunWantSeq, RunPlansSeq: c.RunPlansSeq, RunResultsSeq: c.RunResultsSeq, Suspended: c.Suspended,
		SuspendedBy: c.SuspendedBy, WantRequestIds: c.WantRequests, RunRequestIds: c.RunRequests, RunPublished: c.RunPublished,
		RunTree: c.RunTree, RunCommit: c.RunCommit, SeenSeq: c.SeenSeq, RetryAttempt: c.RetryAttempt, RetryReason: c.RetryReason,
		BlockedTree: c.Blocked.Tree, BlockedCommit: c.Blocked.Commit, BlockedInputs: c.Blocked.Inputs, BlockedReason: c.Blocked.Reason,
		BlockedNodes: c.Blocked.Nodes, BlockedInventorySeq: c.Blocked.InventorySeq}
	if !c.RetryAt.IsZero() {
		p.RetryAt = timeToProto(c.RetryAt)
	}
	if !c.Blocked.At.IsZero() {
		p.BlockedAt = timeToProto(c.Blocked.At)
	}
	if c.WantSeq > 0 {
		m, err := RepoChangedToProto(c.Want)
		if err != nil {
			return nil, fmt.Errorf("cluster control %s: %w", c.Cluster, err)
		}
		p.Want = m.(*repov1.RepoChanged)
	}
	if !c.SuspendedAt.IsZero() {
		p.SuspendedAt = timeToProto(c.SuspendedAt)
	}
	for _, s := range c.SuspendedGuests {
		if s.VMID <= 0 || s.VMID > math.MaxInt32 {
			return nil, fmt.Errorf("cluster control %s: suspended guest: vmid %d out of range", c.Cluster, s.VMID)
		}
		g := &planv1.GuestSuspension{Vmid: int32(s.VMID), Ref: s.Ref, Snapshot: s.Snapshot, By: s.By, Manifest: s.Manifest, RunId: s.RunID}
		if !s.At.IsZero() {
			g.At = timeToProto(s.At)
		}
		p.SuspendedGuests = append(p.SuspendedGuests, g)
	}
	return p, nil
}

// ClusterControlFromProto converts a proxops.plan.v1.ClusterControl.
func ClusterControlFromProto(m proto.Message) (ClusterControl, error) {
	p, err := as[*planv1.ClusterControl](m)
	if err != nil {
		return ClusterControl{}, fmt.Errorf("cluster control: %w", err)
	}
	c := ClusterControl{Cluster: p.GetCluster(), WantSeq: p.GetWantSeq(), DoneSeq: p.GetDoneSeq(), RunID: p.GetRunId(),
		RunWantSeq: p.GetRunWantSeq(), RunPlansSeq: p.GetRunPlansSeq(), RunResultsSeq: p.GetRunResultsSeq(),
		Suspended: p.GetSuspended(), SuspendedBy: p.GetSuspendedBy(), WantRequests: p.GetWantRequestIds(),
		RunRequests: p.GetRunRequestIds(), RunPublished: p.GetRunPublished(), RunTree: p.GetRunTree(), RunCommit: p.GetRunCommit(),
		SeenSeq: p.GetSeenSeq(), RetryAttempt: p.GetRetryAttempt(), RetryReason: p.GetRetryReason(),
		Blocked: Blocked{Tree: p.GetBlockedTree(), Commit: p.GetBlockedCommit(), Inputs: p.GetBlockedInputs(),
			Reason: p.GetBlockedReason(), Nodes: p.GetBlockedNodes(), InventorySeq: p.GetBlockedInventorySeq()}}
	if p.GetBlockedAt() != nil {
		if c.Blocked.At, err = timeFromProto(p.GetBlockedAt()); err != nil {
			return ClusterControl{}, fmt.Errorf("cluster control %s: blocked at: %w", c.Cluster, err)
		}
	}
	if p.GetRetryAt() != nil {
		if c.RetryAt, err = timeFromProto(p.GetRetryAt()); err != nil {
			return ClusterControl{}, fmt.Errorf("cluster control %s: retry at: %w", c.Cluster, err)
		}
	}
	if p.GetWant() != nil {
		if c.Want, err = RepoChangedFromProto(p.GetWant()); err != nil {
			return ClusterControl{}, fmt.Errorf("cluster control %s: %w", c.Cluster, err)
		}
	}
	if p.GetSuspendedAt() != nil {
		if c.SuspendedAt, err = timeFromProto(p.GetSuspendedAt()); err != nil {
			return ClusterControl{}, fmt.Errorf("cluster control %s: suspended at: %w", c.Cluster, err)
		}
	}
	for _, g := range p.GetSuspendedGuests() {
		s := plan.SuspendedGuest{VMID: int(g.GetVmid()), Ref: g.GetRef(), Snapshot: g.GetSnapshot(), By: g.GetBy(),
			Manifest: g.GetManifest(), RunID: g.GetRunId()}
		if g.GetAt() != nil {
			if s.At, err = timeFromProto(g.GetAt()); err != nil {
				return ClusterControl{}, fmt.Errorf("cluster control %s: suspended guest %d: %w", c.Cluster, s.VMID, err)
			}
		}
		c.SuspendedGuests = append(c.SuspendedGuests, s)
	}
	return c, nil
}

// NewClusterControl is an empty proxops.plan.v1.ClusterControl to read a KV value into.
func NewClusterControl() proto.Message { return &planv1.ClusterControl{} }
