package bus

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/proxops/proxops/internal/pveformat"
)

// Every subject, stream, consumer, bucket, object store and header ProxOps uses on NATS is spelled here and
// nowhere else. Subjects carry the contract's major version; a breaking change is a v2 contract on new
// subjects and streams.

// Subjects without variable tokens.
const (
	// SubjectRoot is the first two tokens of every ProxOps subject.
	SubjectRoot = "proxops.v1"

	// SubjectRepoChanged carries RepoChanged (watcher → planners).
	SubjectRepoChanged = "proxops.v1.repo.changed"
	// SubjectRepoHealth carries SourceHealth (watcher → status): whether the repository can be read.
	SubjectRepoHealth = "proxops.v1.repo.health"
	// SubjectReconcileRequest carries ReconcileRequest (CLI or operator → watcher). A request here that names a
	// tree is always planned as a dry run.
	SubjectReconcileRequest = "proxops.v1.reconcile.request"
	// FilterWorktreeApply covers the work-tree apply subjects (WorktreeApplySubject): operator → watcher.
	FilterWorktreeApply = subjectWorktreeApply + ".*"

	subjectPlan      = "proxops.v1.plan"
	subjectConfirm   = "proxops.v1.confirm"
	subjectOp        = "proxops.v1.op"
	subjectResult    = "proxops.v1.result"
	subjectObserve   = "proxops.v1.observe"
	subjectInventory = "proxops.v1.inventory"
	subjectGap       = "proxops.v1.gap"
	subjectStatus    = "proxops.v1.status"
	subjectDLQ       = "proxops.v1.dlq"
	subjectAdopt     = "proxops.v1.adopt"
	subjectNotify    = "proxops.v1.notify"

	subjectWorktreeApply = "proxops.v1.apply.worktree"
)

// Subject filters covering every cluster (and node): what the streams store.
const (
	FilterPlans     = subjectPlan + ".*.*"
	FilterConfirms  = subjectConfirm + ".*"
	FilterOps       = subjectOp + ".*.*"
	FilterResults   = subjectResult + ".*.*"
	FilterObserve   = subjectObserve + ".*.*"
	FilterInventory = subjectInventory + ".*.*"
	FilterGaps      = subjectGap + ".*"
	FilterStatus    = subjectStatus + ".*"
	FilterDLQ       = subjectDLQ + ".*.*"
	FilterAdopt     = subjectAdopt + ".*"
	FilterNotify    = subjectNotify + ".*"
)

// Streams.
const (
	StreamRepo      = "PROXOPS_REPO"
	StreamPlans     = "PROXOPS_PLANS"
	StreamOps       = "PROXOPS_OPS"
	StreamResults   = "PROXOPS_RESULTS"
	StreamInventory = "PROXOPS_INVENTORY"
	StreamGaps      = "PROXOPS_GAPS"
	StreamStatus    = "PROXOPS_STATUS"
	StreamDLQ       = "PROXOPS_DLQ"
	StreamNotify    = "PROXOPS_NOTIFY"
)

// Key-value buckets.
const (
	// BucketLeases holds one plan lease per cluster (key = cluster), expiring with the bucket's TTL.
	BucketLeases = "proxops_leases"
	// BucketOwned is the ownership inventory: per cluster and vmid, the guest ProxOps created or manages.
	BucketOwned = "proxops_owned"
	// BucketOps holds the executors' operation records (op.<cluster>.<node>.<run>.<op>: intent, task UPID and
	// outcome) and guest guards (guard.<cluster>.<node>.<vmid>).
	BucketOps = "proxops_ops"
	// BucketStatus holds the latest ClusterStatus per cluster.
	BucketStatus = "proxops_status"
	// BucketDeliveries is the watcher's memory: the last commit it announced and the pushed commits it has
	// accepted by webhook (so a replayed delivery triggers nothing).
	BucketDeliveries = "proxops_deliveries"
	// BucketClusters is the planners' shared state per cluster (key = cluster): the newest event asking to
	// apply it, the last one handled, the run in progress, and the run-time suspension.
	BucketClusters = "proxops_clusters"
	// BucketNotify is the notifier's memory per cluster (key = cluster): whether its last run or plan
	// failed, and the security warnings already notified.
	BucketNotify = "proxops_notify"
)

// Object stores.
const (
	// ObjectTrees holds the snapshots of the commits the watcher fetched, named by content hash
	// (event.TreeName) and written once, by the watcher only.
	ObjectTrees = "proxops_trees"
	// ObjectPreviews holds the snapshots clients store to preview (diff, adopt) or, as an operator, apply a
	// work tree: named by content hash like ObjectTrees, created by the clients, verified by every reader.
	ObjectPreviews = "proxops_previews"
	// ObjectBlobs holds message bodies larger than the server's payload limit.
	ObjectBlobs = "proxops_blobs"
)

// Durable consumers that do not depend on a cluster or node.
const (
	// ConsumerPlannerRepo is the planners' shared durable consumer of RepoChanged on PROXOPS_REPO.
	ConsumerPlannerRepo = "planner_repo"
	// ConsumerPlannerConfirm is the planners' shared durable consumer of PlanConfirmation on PROXOPS_PLANS.
	ConsumerPlannerConfirm = "planner_confirm"
	// ConsumerWatcherReconcile is the watchers' durable consumer of ReconcileRequest on PROXOPS_REPO.
	ConsumerWatcherReconcile = "watcher_reconcile"
	// ConsumerWatcherWorktree is the watchers' durable consumer of work-tree applies on PROXOPS_REPO.
	ConsumerWatcherWorktree = "watcher_worktree"
	// ConsumerAdopterInventory is the adopters' durable consumer of NodeInventory on PROXOPS_INVENTORY.
	ConsumerAdopterInventory = "adopter_inventory"
	// ConsumerNotifierPlans is the notifiers' durable consumer of plan events on PROXOPS_PLANS.
	ConsumerNotifierPlans = "notifier_plans"
	// ConsumerNotifierGaps is the notifiers' durable consumer of gap reports on PROXOPS_GAPS (their security
	// warnings).
	ConsumerNotifierGaps = "notifier_gaps"

	consumerExecutorPrefix       = "exec_"
	consumerPlannerResultsPrefix = "planner_results_"
)

// QueueExecutors is the queue group a node's executors serve observe requests in.
const QueueExecutors = "executors"

// QueueAdopters is the queue group the adopters serve adoption requests in.
const QueueAdopters = "adopters"

// Headers. Nats-* headers are the server's and never invented here.
const (
	// HeaderType carries the full protobuf name of the message, e.g. proxops.plan.v1.Operation.
	HeaderType = "Proxops-Type"
	// HeaderContentType is always ContentTypeProtobuf.
	HeaderContentType = "Content-Type"
	// ContentTypeProtobuf is the only content type ProxOps sends.
	ContentTypeProtobuf = "application/protobuf"
	// HeaderContentID is the content id of the message: "sha256:" and the hex SHA-256 of its protobuf body
	// (deterministic encoding), the same for the same content whoever publishes it. With Proxops-Type it
	// tells a `nats sub` reader what a message is and whether two messages say the same thing.
	HeaderContentID = "Proxops-Content-Id"
	// HeaderBlob names the proxops_blobs object that holds the body of a message too large to carry.
	HeaderBlob = "Proxops-Blob"
	// HeaderBlobSHA256 is the hex SHA-256 of the blob's content, checked when it is read.
	HeaderBlobSHA256 = "Proxops-Blob-Sha256"
	// HeaderError carries a server-side handler's error in a reply (the body is then empty).
	HeaderError = "Proxops-Error"
	// HeaderDeadLetterReason says why a message was moved to PROXOPS_DLQ.
	HeaderDeadLetterReason = "Proxops-Dead-Letter-Reason"
	// HeaderDeadLetterFrom names the stream and sequence a dead letter was copied from (STREAM:seq).
	HeaderDeadLetterFrom = "Proxops-Dead-Letter-From"
	// HeaderRefused marks a dead letter an executor refused to run (not one that ran out of deliveries);
	// its value is the refusal's reason code (unsigned, unknown_key, bad_signature, ...).
	HeaderRefused = "Proxops-Refused"
)

// PlanEvent is the last token of a plan subject.
type PlanEvent string

const (
	PlanPlanned  PlanEvent = "planned"
	PlanRejected PlanEvent = "rejected"
	PlanHeld     PlanEvent = "held"
	PlanFinished PlanEvent = "finished"
)

// PlanEvents lists every plan event in a fixed order.
var PlanEvents = []PlanEvent{PlanPlanned, PlanRejected, PlanHeld, PlanFinished}

const maxClusterName = 64

// The names below are checked on every message of every operation, so byte by byte rather than with regular
// expressions; each check accepts exactly the language written beside it (a test compares them).

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// every reports whether s is not empty and every byte of it passes ok.
func every(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return s != ""
}

// clusterNameOK: ^[a-z0-9-]+$
func clusterNameOK(s string) bool {
	return every(s, func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' })
}

// keyTokenOK: ^[-_=/a-zA-Z0-9]+$
func keyTokenOK(s string) bool {
	return every(s, func(c byte) bool { return isAlnum(c) || c == '-' || c == '_' || c == '=' || c == '/' })
}

// ValidateCluster checks a cluster name: [a-z0-9-], at most 64 characters.
func ValidateCluster(name string) error {
	if name == "" {
		return fmt.Errorf("cluster name is empty")
	}
	if len(name) > maxClusterName {
		return fmt.Errorf("cluster name %q: longer than %d characters", name, maxClusterName)
	}
	if !clusterNameOK(name) {
		return fmt.Errorf("cluster name %q: only lowercase letters, digits and '-' are allowed", name)
	}
	return nil
}

// ValidateNode checks a PVE node name (letters, digits and inner '-'; at most 64 characters).
func ValidateNode(name string) error {
	if name == "" {
		return fmt.Errorf("node name is empty")
	}
	if len(name) > pveformat.MaxNodeName {
		return fmt.Errorf("node name %q: longer than %d characters", name, pveformat.MaxNodeName)
	}
	if !pveformat.ValidNodeName(name) {
		return fmt.Errorf("node name %q: only letters, digits and inner '-' are allowed", name)
	}
	return nil
}

func validateClusterNode(cluster, node string) error {
	if err := ValidateCluster(cluster); err != nil {
		return err
	}
	return ValidateNode(node)
}

// ClusterScope stands where a node name stands in the subjects, consumer and keys of the work that belongs to
// no node (pools, and the cluster's other objects): proxops.v1.op.<cluster>._cluster is the cluster's work
// queue, served by any of its executors. No PVE node name can start with '_', so it never names a node.
const ClusterScope = "_cluster"

// validateClusterScope checks a cluster and a node name or ClusterScope.
func validateClusterScope(cluster, scope string) error {
	if scope == ClusterScope {
		return ValidateCluster(cluster)
	}
	return validateClusterNode(cluster, scope)
}

// PlanSubject is proxops.v1.plan.<cluster>.<event>.
func PlanSubject(cluster string, ev PlanEvent) (string, error) {
	if err := ValidateCluster(cluster); err != nil {
		return "", err
	}
	switch ev {
	case PlanPlanned, PlanRejected, PlanHeld, PlanFinished:
	default:
		return "", fmt.Errorf("unknown plan event %q", string(ev))
	}
	return subjectPlan + "." + cluster + "." + string(ev), nil
}

// PlanFilter is proxops.v1.plan.<cluster>.*: every plan event of one cluster.
func PlanFilter(cluster string) (string, error) {
	if err := ValidateCluster(cluster); err != nil {
		return "", err
	}
	return subjectPlan + "." + cluster + ".*", nil
}

// ConfirmSubject is proxops.v1.confirm.<cluster>.
func ConfirmSubject(cluster string) (string, error) { return clusterSubject(subjectConfirm, cluster) }

// GapSubject is proxops.v1.gap.<cluster>.
func GapSubject(cluster string) (string, error) { return clusterSubject(subjectGap, cluster) }

// NotifySubject is proxops.v1.notify.<cluster>: the notifier's latest delivery outcome per provider for a
// cluster (NotificationHealth).
func NotifySubject(cluster string) (string, error) { return clusterSubject(subjectNotify, cluster) }

// AdoptSubject is proxops.v1.adopt.<cluster> (request/reply): adoption on request.
func AdoptSubject(cluster string) (string, error) { return clusterSubject(subjectAdopt, cluster) }

// StatusSubject is proxops.v1.status.<cluster>.
func StatusSubject(cluster string) (string, error) { return clusterSubject(subjectStatus, cluster) }

// OpSubject is proxops.v1.op.<cluster>.<node>: the node's work queue; with ClusterScope for the node, the
// cluster's.
func OpSubject(cluster, node string) (string, error) { return scopeSubject(subjectOp, cluster, node) }

// ResultSubject is proxops.v1.result.<cluster>.<node> (or ClusterScope).
func ResultSubject(cluster, node string) (string, error) {
	return scopeSubject(subjectResult, cluster, node)
}

// ResultFilter is proxops.v1.result.<cluster>.*: every result of one cluster.
func ResultFilter(cluster string) (string, error) {
	if err := ValidateCluster(cluster); err != nil {
		return "", err
	}
	return subjectResult + "." + cluster + ".*", nil
}

// ObserveSubject is proxops.v1.observe.<cluster>.<node> (request/reply).
func ObserveSubject(cluster, node string) (string, error) {
	return nodeSubject(subjectObserve, cluster, node)
}

// InventorySubject is proxops.v1.inventory.<cluster>.<node>.
func InventorySubject(cluster, node string) (string, error) {
	return nodeSubject(subjectInventory, cluster, node)
}

// InventoryFilter is proxops.v1.inventory.<cluster>.*: the inventories of every node of one cluster.
func InventoryFilter(cluster string) (string, error) {
	if err := ValidateCluster(cluster); err != nil {
		return "", err
	}
	return subjectInventory + "." + cluster + ".*", nil
}

// DLQSubject is proxops.v1.dlq.<cluster>.<node> (or ClusterScope).
func DLQSubject(cluster, node string) (string, error) { return scopeSubject(subjectDLQ, cluster, node) }

// ParseDLQSubject returns the cluster and node of a dead-letter subject (what the executor that
// published it may publish: its own node's).
func ParseDLQSubject(subject string) (cluster, node string, err error) {
	rest, ok := strings.CutPrefix(subject, subjectDLQ+".")
	cluster, node, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return "", "", fmt.Errorf("dead-letter subject %q: want %s.<cluster>.<node>", subject, subjectDLQ)
	}
	if err := validateClusterScope(cluster, node); err != nil {
		return "", "", fmt.Errorf("dead-letter subject %q: %w", subject, err)
	}
	return cluster, node, nil
}

var userTokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// WorktreeApplySubject is proxops.v1.apply.worktree.<user>: an operator's request to apply a work tree. Each
// operator user may publish on its own subject only, so the watcher takes who asked from the last token.
func WorktreeApplySubject(user string) (string, error) {
	if !userTokenRE.MatchString(user) {
		return "", fmt.Errorf("user %q: only letters, digits, '-' and '_' (at most 64) can name a work-tree apply subject", user)
	}
	return subjectWorktreeApply + "." + user, nil
}

// WorktreeApplyUser is the user a work-tree apply subject names, or an error for any other subject.
func WorktreeApplyUser(subject string) (string, error) {
	user, ok := strings.CutPrefix(subject, subjectWorktreeApply+".")
	if !ok || !userTokenRE.MatchString(user) {
		return "", fmt.Errorf("subject %q is not a work-tree apply subject", subject)
	}
	return user, nil
}

// ExecutorConsumer is the durable consumer shared by a node's executors: exec_<cluster>_<node>. Durable
// names cannot contain '.', so '_' (which neither a cluster nor a node name may contain) separates them.
// With ClusterScope it is exec_<cluster>__cluster, the cluster's work queue that all its executors share.
func ExecutorConsumer(cluster, node string) (string, error) {
	if err := validateClusterScope(cluster, node); err != nil {
		return "", err
	}
	return consumerExecutorPrefix + cluster + "_" + node, nil
}

// MaxDeliveriesAdvisorySubject is where the server announces that a message of a stream ran out of
// deliveries on a durable consumer: $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>.
func MaxDeliveriesAdvisorySubject(stream, durable string) (string, error) {
	if stream == "" || durable == "" || strings.ContainsAny(stream+durable, ".*> \t") {
		return "", fmt.Errorf("max-deliveries advisory: invalid stream %q or consumer %q", stream, durable)
	}
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + durable, nil
}

// PlannerResultsConsumer is the durable consumer through which the planner driving a cluster reads that
// cluster's operation results: planner_results_<cluster>.
func PlannerResultsConsumer(cluster string) (string, error) {
	if err := ValidateCluster(cluster); err != nil {
		return "", err
	}
	return consumerPlannerResultsPrefix + cluster, nil
}

// ExecutorUser is the NATS user name of a node's executors: executor_<cluster>_<node>.
func ExecutorUser(cluster, node string) (string, error) {
	if err := validateClusterNode(cluster, node); err != nil {
		return "", err
	}
	return "executor_" + cluster + "_" + node, nil
}

// LeaseKey is the proxops_leases key of a cluster's plan lease.
func LeaseKey(cluster string) (string, error) {
	if err := ValidateCluster(cluster); err != nil {
		return "", err
	}
	return cluster, nil
}

// ClusterKey is the proxops_clusters key of a cluster's control state.
func ClusterKey(cluster string) (string, error) {
	if err := ValidateCluster(cluster); err != nil {
		return "", err
	}
	return cluster, nil
}

// OwnedKey is the proxops_owned key of a guest: <cluster>.<vmid>.
func OwnedKey(cluster string, vmid int) (string, error) {
	if err := ValidateCluster(cluster); err != nil {
		return "", err
	}
	if vmid <= 0 {
		return "", fmt.Errorf("vmid %d: must be positive", vmid)
	}
	return fmt.Sprintf("%s.%d", cluster, vmid), nil
}

// ObjectKind names a kind of cluster object in the ownership inventory: [a-z]+ (pool, and later harule,
// backupjob, ...).
type ObjectKind string

// ObjectPool is the ownership inventory's kind of a resource pool.
const ObjectPool ObjectKind = "pool"

// ObjectSnapshot is the ownership inventory's kind of a safety snapshot ProxOps took (id <vmid>/<name>);
// its records are plan.v1.OwnedSnapshot messages, not OwnedObject ones.
const ObjectSnapshot ObjectKind = "snapshot"

var objectKindRE = regexp.MustCompile(`^[a-z]+$`)

// ObjectOwnedKey is the proxops_owned key of a cluster object (a pool, ...): <cluster>.obj.<kind>.<id>, the
// id escaped as OpKey escapes an operation id (a pool id's "/" is kept, a "." becomes =2E). A guest's key
// <cluster>.<vmid> has two tokens, an object's four or more, so neither reader sees the other's records.
func ObjectOwnedKey(cluster string, kind ObjectKind, id string) (string, error) {
	if err := ValidateCluster(cluster); err != nil {
		return "", err
	}
	if !objectKindRE.MatchString(string(kind)) {
		return "", fmt.Errorf("object kind %q: only lowercase letters", string(kind))
	}
	if id == "" {
		return "", fmt.Errorf("%s id is empty", string(kind))
	}
	return cluster + "." + objectKeyToken + "." + string(kind) + "." + escapeKeyToken(id), nil
}

// ObjectOwnedFilter is <cluster>.obj.>: the keys of every cluster object of one cluster.
func ObjectOwnedFilter(cluster string) (string, error) {
	if err := ValidateCluster(cluster); err != nil {
		return "", err
	}
	return cluster + "." + objectKeyToken + ".>", nil
}

// objectKeyToken is the second token of an object's ownership key; no vmid is a word.
const objectKeyToken = "obj"

// OpKey is the proxops_ops key of an operation of a run, kept by the executors of the node that runs it:
// op.<cluster>.<node>.<run>.<op>. Naming the cluster and node lets each node's executors be allowed to write
// their own records only (NodeOpsFilters). The run id must be a plain token; the operation id is escaped so any
// id is a valid key: every byte outside [-_/a-zA-Z0-9] (a '.' of a file name, say) becomes '=' and two hex
// digits. Ids made of plain characters are their own escape.
func OpKey(cluster, node, run, op string) (string, error) {
	if err := validateClusterScope(cluster, node); err != nil {
		return "", err
	}
	legacy, err := LegacyOpKey(run, op)
	if err != nil {
		return "", err
	}
	return opKeyPrefix + "." + cluster + "." + node + "." + legacy, nil
}

// LegacyOpKey is the key an operation record had before records named their node: <run>.<op>. Readers of a
// record look there when OpKey holds none, so a run opened before an upgrade finishes after it.
func LegacyOpKey(run, op string) (string, error) {
	if err := validateKeyToken("run id", run); err != nil {
		return "", err
	}
	if op == "" {
		return "", fmt.Errorf("operation id is empty")
	}
	return run + "." + escapeKeyToken(op), nil
}

// GuardKey is the proxops_ops key of a guest's guard, which the executors of the guest's node share:
// guard.<cluster>.<node>.<vmid>.
func GuardKey(cluster, node string, vmid int) (string, error) {
	if err := validateClusterNode(cluster, node); err != nil {
		return "", err
	}
	if vmid <= 0 {
		return "", fmt.Errorf("vmid %d: must be positive", vmid)
	}
	return fmt.Sprintf("%s.%s.%s.%d", guardKeyPrefix, cluster, node, vmid), nil
}

// NodeOpsFilters are the proxops_ops keys the executors of one node write: their operation records and their
// guest guards.
func NodeOpsFilters(cluster, node string) ([]string, error) {
	if err := validateClusterScope(cluster, node); err != nil {
		return nil, err
	}
	return []string{opKeyPrefix + "." + cluster + "." + node + ".>", guardKeyPrefix + "." + cluster + "." + node + ".>"}, nil
}

// First tokens of the proxops_ops keys: no run id is either, so they never collide with a legacy <run>.<op>.
const (
	opKeyPrefix    = "op"
	guardKeyPrefix = "guard"
)

func escapeKeyToken(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' || c == '_' || c == '/' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "=%02X", c)
	}
	return b.String()
}

func validateKeyToken(what, s string) error {
	if !keyTokenOK(s) {
		return fmt.Errorf("%s %q: only letters, digits and -_=/ are allowed", what, s)
	}
	return nil
}

func clusterSubject(prefix, cluster string) (string, error) {
	if err := ValidateCluster(cluster); err != nil {
		return "", err
	}
	return prefix + "." + cluster, nil
}

func scopeSubject(prefix, cluster, scope string) (string, error) {
	if err := validateClusterScope(cluster, scope); err != nil {
		return "", err
	}
	return prefix + "." + cluster + "." + scope, nil
}

func nodeSubject(prefix, cluster, node string) (string, error) {
	if err := validateClusterNode(cluster, node); err != nil {
		return "", err
	}
	return prefix + "." + cluster + "." + node, nil
}
