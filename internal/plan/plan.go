package plan

import (
	"time"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/inventory"
)

// FindingKind classifies what a plan reports without acting on it.
type FindingKind string

const (
	// FindingAnomaly is a difference ProxOps will not write (data loss, live-only slots, template mismatch).
	FindingAnomaly FindingKind = "anomaly"
	// FindingMisplaced is a declared guest found on another allowed node.
	FindingMisplaced FindingKind = "misplaced"
	// FindingSkipped is a live guest ProxOps does not own and never touches.
	FindingSkipped FindingKind = "skipped"
	// FindingDeferredPrune is a prune held back by the budget or the latch.
	FindingDeferredPrune FindingKind = "deferred-prune"
	// FindingPending is a change PVE keeps pending until the guest restarts (reconcile.restart: never).
	FindingPending FindingKind = "pending"
	// FindingWarning does not block the plan.
	FindingWarning FindingKind = "warning"
	// FindingSuspended is a guest suspended from correction after an operator's rollback: its drift from git
	// is reported, not corrected.
	FindingSuspended FindingKind = "suspended"
)

// Finding is one reported, not acted upon, item of a plan.
type Finding struct {
	Kind    FindingKind
	Ref     string
	Node    string
	VMID    int
	Field   string
	Message string
}

// Plan is the ordered set of operations that makes one cluster equal to git.
type Plan struct {
	// ID is the content id: the same desired and observed state give the same id.
	ID      string
	Cluster string
	// Operations in dispatch order; DependsOn only points backwards.
	Operations []Operation
	// Findings, totally ordered.
	Findings []Finding
	// Held plans wait for a Confirmation carrying ID (mass-prune latch).
	Held       bool
	HeldReason string
	// HeldPrunes lists the Kind/name of the prunes that need confirmation.
	HeldPrunes []string
	// Resources are the declared resources, Kind/name sorted.
	Resources []string
	// Record lists the guests to store in the ownership inventory, by vmid.
	Record []Record
	// ObjectRecords lists the cluster objects (pools, ...) to store in the ownership inventory before the
	// plan's first operation is dispatched, sorted by kind and id.
	ObjectRecords []ObjectRecord
	// Gaps are the live settings of the declared guests the manifest model does not carry (adopt.Gaps),
	// sorted by node, vmid, key: shown with the plan, not part of its content id, never acted on.
	Gaps []inventory.Gap
}

// Empty reports whether the plan has nothing to do.
func (p Plan) Empty() bool { return len(p.Operations) == 0 }

// Rejection says a cluster's plan could not be computed; nothing is written.
type Rejection struct {
	Cluster string
	// Reason classifies the rejection: parse_error, unknown_node, secrets, observe_failed, cannot_create,
	// plan_error.
	Reason      string
	Diagnostics diag.List
	// Transient: the cause may go away by itself (PVE unreachable, 5xx, lock timeouts, no executor
	// answering); the cluster is planned again at RetryAt (zero for a dry run, which is not retried).
	Transient bool
	RetryAt   time.Time
}

// Rejection reasons.
const (
	RejectParse   = "parse_error"
	RejectNode    = "unknown_node"
	RejectSecrets = "secrets"
	RejectObserve = "observe_failed"
	// RejectCreate: a guest that is not on PVE lacks what creating it needs (manifest.MissingToCreate).
	RejectCreate   = "cannot_create"
	RejectInternal = "plan_error"
)
