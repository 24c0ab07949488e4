// Package plan computes the ordered plan that makes a cluster's live state equal to its desired state, and
// holds the plan runner's state machine. It is pure: no I/O, no clock, no randomness.
package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/inventory"
)

// Action is what an operation does to PVE.
type Action string

const (
	ActionCreate       Action = "create"
	ActionClone        Action = "clone"
	ActionConfigure    Action = "configure"
	ActionResize       Action = "resize"
	ActionStart        Action = "start"
	ActionShutdown     Action = "shutdown"
	ActionStop         Action = "stop"
	ActionResume       Action = "resume"
	ActionMarkTemplate Action = "mark-template"
	ActionDownload     Action = "download"
	ActionDelete       Action = "delete"
	ActionClaimTag     Action = "claim-tag"
	// ActionRegenerateCloudInit rebuilds a VM's cloud-init drive from its config (PUT …/cloudinit).
	ActionRegenerateCloudInit Action = "regenerate-cloudinit"

	// The actions on resource pools run on the cluster's work queue (Node is ClusterScope). Their Params
	// name the pool (poolid) and what they write (comment; vms, delete and node for members).
	ActionCreatePool    Action = "create-pool"
	ActionConfigurePool Action = "configure-pool"
	ActionDeletePool    Action = "delete-pool"
	ActionClaimPool     Action = "claim-pool"
	// ActionSetPoolMembers adds the operation's guest (VMID, GuestType, Params node) to the pool, moving it
	// out of its current pool, or with Params delete=1 removes it.
	ActionSetPoolMembers Action = "set-pool-members"

	// The actions on HA resources, HA rules and backup jobs run on the cluster's work queue too. Their
	// Params name the object (sid, rule or id) and the options they write (comment without the marker;
	// delete lists the options a configure removes).
	ActionCreateHAResource    Action = "create-ha-resource"
	ActionConfigureHAResource Action = "configure-ha-resource"
	ActionDeleteHAResource    Action = "delete-ha-resource"
	ActionCreateHARule        Action = "create-ha-rule"
	ActionConfigureHARule     Action = "configure-ha-rule"
	ActionDeleteHARule        Action = "delete-ha-rule"
	ActionCreateBackupJob     Action = "create-backup-job"
	ActionConfigureBackupJob  Action = "configure-backup-job"
	ActionDeleteBackupJob     Action = "delete-backup-job"
	// ActionClaimClusterObject adds the ownership marker to an HA resource, HA rule or backup job (Params
	// object: ha-resource, ha-rule or backup-job).
	ActionClaimClusterObject Action = "claim-cluster-object"
	// ActionApplyGuestFirewall makes a guest's firewall (options, rules, IP sets, aliases) the declared one
	// on the guest's node; its Params carry what is declared (see internal/pve/firewall.go).
	ActionApplyGuestFirewall Action = "apply-guest-firewall"
	// The actions on the cluster's firewall objects run on the cluster's work queue. Params kind
	// (securitygroup, ipset, alias) and name say which object; comment, rules, entries and cidr what it
	// holds.
	ActionCreateFirewallObject    Action = "create-firewall-object"
	ActionConfigureFirewallObject Action = "configure-firewall-object"
	ActionClaimFirewallObject     Action = "claim-firewall-object"
	ActionDeleteFirewallObject    Action = "delete-firewall-object"
	// ActionApplyClusterFirewall makes the cluster's own (datacenter) firewall options and rules the declared
	// ones (firewall.manage-cluster in the cluster's config.yaml), on the cluster's work queue: the options as
	// Values (an empty value deletes one), the rules as Params rules, the observed rule digest as Expect
	// rules-digest.
	ActionApplyClusterFirewall Action = "apply-cluster-firewall"
	// ActionMigrate moves the guest from its Node to the node Params target names (POST …/migrate), with
	// Params online, restart and timeout (containers), with-local-disks and targetstorage (VMs).
	ActionMigrate Action = "migrate"
	// The safety snapshot actions. Params: snapname (always proxops-<short plan id> or another snapshot
	// ProxOps took), description and vmstate for a snapshot, start for a rollback.
	ActionSnapshot       Action = "snapshot"
	ActionDeleteSnapshot Action = "delete-snapshot"
	ActionRollback       Action = "rollback"
	// ActionHAMigrate moves an HA-managed guest through HA (POST /cluster/ha/resources/{sid}/migrate) from
	// its Node to the node Params target names: HA decides how (online for a running VM, restart mode for a
	// running container, offline for a stopped guest); the operation is done when HA reports the guest there.
	ActionHAMigrate Action = "ha-migrate"
)

// ClusterObjectActions are the actions on HA resources, HA rules and backup jobs.
var ClusterObjectActions = []Action{
	ActionCreateHAResource, ActionConfigureHAResource, ActionDeleteHAResource,
	ActionCreateHARule, ActionConfigureHARule, ActionDeleteHARule,
	ActionCreateBackupJob, ActionConfigureBackupJob, ActionDeleteBackupJob, ActionClaimClusterObject,
}

// ClusterScope is the Node of an operation on an object that belongs to no node (a resource pool): it runs
// on the cluster's work queue, which every executor of the cluster serves (the bus's ClusterScope).
const ClusterScope = "_cluster"

// PoolActions are the actions on resource pools.
var PoolActions = []Action{ActionCreatePool, ActionConfigurePool, ActionDeletePool, ActionClaimPool, ActionSetPoolMembers}

// FirewallObjectActions are the actions on the cluster's firewall objects.
var FirewallObjectActions = []Action{ActionCreateFirewallObject, ActionConfigureFirewallObject,
	ActionClaimFirewallObject, ActionDeleteFirewallObject}

// OnCluster reports whether an action runs on the cluster's work queue.
func (a Action) OnCluster() bool {
	return slices.Contains(PoolActions, a) || slices.Contains(ClusterObjectActions, a) ||
		slices.Contains(FirewallObjectActions, a) || a == ActionApplyClusterFirewall
}

// Actions lists every action in a fixed order.
var Actions = []Action{
	ActionCreate, ActionClone, ActionConfigure, ActionResize, ActionStart, ActionShutdown, ActionStop,
	ActionResume, ActionMarkTemplate, ActionDownload, ActionDelete, ActionClaimTag, ActionRegenerateCloudInit,
	ActionCreatePool, ActionConfigurePool, ActionDeletePool, ActionClaimPool, ActionSetPoolMembers,
	ActionCreateHAResource, ActionConfigureHAResource, ActionDeleteHAResource,
	ActionCreateHARule, ActionConfigureHARule, ActionDeleteHARule,
	ActionCreateBackupJob, ActionConfigureBackupJob, ActionDeleteBackupJob, ActionClaimClusterObject,
	ActionApplyGuestFirewall, ActionCreateFirewallObject, ActionConfigureFirewallObject,
	ActionClaimFirewallObject, ActionDeleteFirewallObject, ActionApplyClusterFirewall, ActionMigrate, ActionSnapshot, ActionDeleteSnapshot, ActionRollback, ActionHAMigrate,
}

// Moves reports whether an action moves a guest to another node (a migration, directly or through HA).
func (a Action) Moves() bool {
	return a == ActionMigrate || a == ActionHAMigrate
}

// KV is one PVE parameter. A secret value is never carried: SecretRefs name the secrets (for example
// cloud-init.ssh-keys.main) that the executor resolves and substitutes when it writes.
type KV struct {
	Key        string
	Value      string
	SecretRefs []string
}

// SecretKeys are the only PVE keys whose value an operation may carry as a secret reference: the cloud-init
// password and SSH keys. A reference under any other key (description, a tag, an argument) would have the
// executor write a secret where PVE shows it to anyone who reads the config, so the planner never emits
// one and the executor refuses one.
var SecretKeys = []string{"cipassword", "sshkeys"}

// MayReferToSecret reports whether key is one of SecretKeys.
func MayReferToSecret(key string) bool { return slices.Contains(SecretKeys, key) }

// CheckSecretRefs returns an error naming every value, parameter or expectation of the operation that
// refers to a secret under a key that does not carry secrets.
func (o Operation) CheckSecretRefs() error {
	var bad []string
	check := func(where string, kvs []KV, allowed bool) {
		for _, kv := range kvs {
			if len(kv.SecretRefs) > 0 && (!allowed || !MayReferToSecret(kv.Key)) {
				bad = append(bad, where+" "+kv.Key)
			}
		}
	}
	check("value", o.Values, true)
	check("parameter", o.Params, false)
	check("precondition", o.Precondition.Expect, false)
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%s %s: secret references are only allowed for %s, not for %s", o.Action, o.Ref,
		strings.Join(SecretKeys, " and "), strings.Join(bad, ", "))
}

// Precondition is what must hold on PVE before an operation is applied.
type Precondition struct {
	// ExpectAbsent: the guest or artifact must not exist (create, clone, download).
	ExpectAbsent bool
	// Digest is the observed config digest (the first write of a guest in a plan).
	Digest string
	// Expect lists, for a later write in a guest's sequence, the values the keys it changes must still hold
	// (an empty Value means absent).
	Expect []KV
	// Fingerprint is the identity the live guest must carry (delete, claim).
	Fingerprint string
	// ExpectTag: the live guest must carry the ownership tag (delete).
	ExpectTag bool
	// Name is, for a claim, the guest's name (qemu name, lxc hostname) as the plan observed it; empty when it
	// had none. The executor claims only a guest that still has this name and Fingerprint.
	Name string
}

// Change is a field-level before → after, for display. Secret values are shown as references.
type Change struct {
	Field  string
	Before string
	After  string
}

// Operation is one unit of work for the executors of one node.
type Operation struct {
	// ID is deterministic within a plan.
	ID string
	// RunID and PlanID are set when a run dispatches the operation.
	RunID  string
	PlanID string

	Cluster   string
	Node      string
	VMID      int
	GuestType inventory.GuestType
	// Ref is Kind/name.
	Ref    string
	Action Action

	// Values are the PVE config values to write (create parameters, config keys), in order.
	Values []KV
	// Delete lists config keys to delete.
	Delete []string
	// Params are the action's own parameters: clone (newid, name, full, target, storage), resize (disk,
	// size), shutdown (timeout, forceStop), download (url, filename, content, checksum, checksum-algorithm).
	Params []KV
	// SourceVMID is the clone source.
	SourceVMID int
	// Storage is the storage a clone or download writes to (per-storage concurrency).
	Storage string
	// SecretsDigest identifies the secrets file (its Digest) the planner resolved the secret references
	// against; set by the planner when a value carries SecretRefs, so an executor holding another version
	// of the file refuses the operation.
	SecretsDigest string
	// BaseURL is the base-url the repository declares for the cluster, set by the planner (empty: not
	// said). An executor with its own endpoint refuses an operation whose BaseURL names another endpoint.
	// It is not part of the plan's content id.
	BaseURL string

	Precondition Precondition
	DependsOn    []string
	Reason       string
	Changes      []Change
}

// Param returns the value of an action parameter.
func (o Operation) Param(key string) (string, bool) {
	for _, p := range o.Params {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// ResultStatus is the state an executor reports for an operation.
type ResultStatus string

const (
	StatusStarted   ResultStatus = "started"
	StatusProgress  ResultStatus = "progress"
	StatusSucceeded ResultStatus = "succeeded"
	StatusFailed    ResultStatus = "failed"
	StatusSkipped   ResultStatus = "skipped"
)

// Final reports whether the status ends the operation.
func (s ResultStatus) Final() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusSkipped
}

// ErrorClass classifies a failure at the PVE boundary.
type ErrorClass string

const (
	// ErrorNone: no failure.
	ErrorNone ErrorClass = ""
	// ErrorRetryable: lock timeouts, transport failures, 5xx, 595/596/599.
	ErrorRetryable ErrorClass = "retryable"
	// ErrorConflict: the guest changed since it was observed; re-plan.
	ErrorConflict ErrorClass = "conflict"
	// ErrorTerminal: parameter errors, permissions, refusals; never retried.
	ErrorTerminal ErrorClass = "terminal"
)

// Result is what an executor reports about an operation: progress while it runs, then the outcome.
type Result struct {
	RunID     string
	OpID      string
	PlanID    string
	Cluster   string
	Node      string
	VMID      int
	GuestType inventory.GuestType
	Ref       string
	Action    Action
	Status    ResultStatus
	Message   string
	UPID      string
	// TaskLog holds the last lines of the PVE task log.
	TaskLog    []string
	ErrorClass ErrorClass
	// AlreadyDone: the operation was found done on redelivery or re-attach.
	AlreadyDone bool
	// Fingerprint is the guest's identity after create, clone or claim.
	Fingerprint string
	Attempt     int
	Executor    string
	At          time.Time
	Elapsed     time.Duration
}
