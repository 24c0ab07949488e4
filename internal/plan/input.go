package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/repo"
)

// Owned is one record of the ownership inventory (KV proxops_owned): a guest ProxOps created or claimed, with
// the identity fingerprint it had then (inventory.Fingerprint). A guest is deleted only when it carries the
// ownership tag and its live fingerprint equals its record's.
type Owned struct {
	VMID int
	// Ref is the Kind/name the guest was declared as.
	Ref  string
	Node string
	// Fingerprint is never empty in a stored record; an empty one matches no guest.
	Fingerprint string
	// AppliedNode is the node ProxOps last put the guest on (created, cloned or migrated it there), or learned
	// it on while it stood where its manifest placed it; empty when not known. Node follows the guest where it
	// is observed; AppliedNode changes only by ProxOps' own doing, so a manifest whose spec.node differs from
	// it is a move asked for in git, and a guest elsewhere for any other reason is only misplaced.
	AppliedNode string
}

// Record asks the planner to store an ownership record once the guest is ProxOps'.
type Record struct {
	Owned Owned
	// After names the operation whose success makes the guest ProxOps' (create, clone, claim-tag,
	// configure); empty when it already is. When Owned.Fingerprint is empty, the fingerprint is the one the
	// operation's result reports.
	After string
}

// SecretResolver gives the planner what it needs of the cluster's secrets without ever showing it a secret.
// The consumer owns the implementation (the planner service decrypts the SOPS file).
type SecretResolver interface {
	// SSHKeysDigest returns inventory.SSHKeysDigest of the keys the references (cloud-init.ssh-keys.<name>)
	// resolve to, or an error naming the reference that does not resolve.
	SSHKeysDigest(refs []string) (string, error)
	// CheckPassword reports whether a password reference (cloud-init.passwords.<name>) resolves.
	CheckPassword(ref string) error
}

// Restart policies (reconcile.restart).
const (
	// RestartAuto finishes pending changes with a planned graceful restart.
	RestartAuto = "auto"
	// RestartNever writes the changes and reports what stays pending until someone restarts the guest.
	RestartNever = "never"
)

// Settings are the reconcile settings that shape a plan.
type Settings struct {
	// Restart is RestartAuto (default when empty) or RestartNever.
	Restart string
	// ShutdownTimeout is how long a graceful shutdown may take before the guest is stopped (default 60s).
	ShutdownTimeout time.Duration
	// PruneBudget caps the deletions of one plan; 0 is unlimited.
	PruneBudget int
	// Migrate is how guests move when their spec.node changes: manifest.MigrateOnline (default when empty),
	// MigrateOffline or MigrateNever.
	Migrate string
	// MaxMigrations is how many guests one plan moves before it is held for confirmation; 0 is unlimited.
	MaxMigrations int
	// MigrationConcurrency is how many migrations of the cluster run at once (default 2).
	MigrationConcurrency int
	// Snapshots is the cluster's safety-snapshot policy (manifest.SnapshotsDisruptive when empty);
	// SnapshotRetention and SnapshotKeep say when ProxOps deletes its own snapshots of a converged guest
	// (24h and 3 when zero).
	Snapshots         string
	SnapshotRetention time.Duration
	SnapshotKeep      int
	// Rollback is RollbackOnFailure or RollbackNever (default): what a failed protected change does.
	Rollback string
}

// SettingsFor returns a cluster's settings from the process configuration and its cluster entry.
func SettingsFor(cfg *repo.Config, cl *repo.ClusterConfig) Settings {
	if cfg == nil {
		cfg = repo.DefaultConfig()
	}
	st := Settings{Restart: cfg.Reconcile.Restart, ShutdownTimeout: cfg.Reconcile.ShutdownTimeout, PruneBudget: cfg.PruneBudget(cl),
		Snapshots: cfg.Reconcile.Snapshots, SnapshotRetention: cfg.Reconcile.SnapshotRetention, SnapshotKeep: cfg.Reconcile.SnapshotKeep,
		Rollback: cfg.Reconcile.Rollback, Migrate: cfg.Reconcile.Migrate, MaxMigrations: cfg.Reconcile.MaxMigrations,
		MigrationConcurrency: cfg.Reconcile.MigrationConcurrency}
	if cl != nil && cl.Snapshots != "" {
		st.Snapshots = cl.Snapshots
	}
	return st
}

func (s Settings) restart() string {
	if s.Restart == "" {
		return RestartAuto
	}
	return s.Restart
}

func (s Settings) shutdownSeconds() int {
	if s.ShutdownTimeout <= 0 {
		return 60
	}
	return int((s.ShutdownTimeout + time.Second - 1) / time.Second)
}

// Input is everything one cluster's plan is computed from.
type Input struct {
	// Cluster is the desired state (repo.Load); its resources are resolved by Diff.
	Cluster *repo.Cluster
	// Observed holds every allowed node of the cluster.
	Observed inventory.Cluster
	// Owned is the cluster's ownership inventory.
	Owned []Owned
	// OwnedObjects are the cluster's ownership records of cluster objects (pools, ...).
	OwnedObjects []ObjectRecord
	// Secrets resolves ssh-key-refs and ci-password-ref; nil when the cluster has no secrets.
	Secrets  SecretResolver
	Settings Settings
	// Tree identifies the desired state (the git tree hash); it is part of the plan id.
	Tree string
	// SnapshotRecords are the inventory's records of the safety snapshots ProxOps took in the cluster.
	SnapshotRecords []SnapshotRecord
	// Now is the planner's clock, for the retention of safety snapshots; zero: none is deleted for age.
	Now time.Time
	// MoveMisplaced moves guests found on another node than their manifest's back to it (an operator's
	// explicit request: apply --move-misplaced); without it they are only reported.
	MoveMisplaced bool
	// Suspended are the guests suspended from correction after an operator's rollback: Diff reports their
	// drift and plans nothing for them.
	Suspended []SuspendedGuest
}

// RejectedError is returned by Diff when the cluster cannot be planned; nothing may be written.
type RejectedError struct {
	Rejection Rejection
}

func (e *RejectedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cluster %s rejected (%s)", e.Rejection.Cluster, e.Rejection.Reason)
	for _, d := range e.Rejection.Diagnostics {
		b.WriteString("; ")
		b.WriteString(d.String())
	}
	return b.String()
}

// ContentStorages lists, per node, the storages whose content an observe must list so the plan can tell
// which artifacts are present: the storages of the artifacts placed on that node, sorted. A shared storage
// needs listing on one of its nodes only; Diff treats a shared storage listed anywhere as listed.
func ContentStorages(c *repo.Cluster) map[string][]string {
	out := map[string][]string{}
	if c == nil {
		return out
	}
	for _, r := range c.Resources {
		a := r.Artifact()
		if a == nil {
			continue
		}
		for _, n := range a.PlacementNodes() {
			if !slices.Contains(out[n], a.Storage) {
				out[n] = append(out[n], a.Storage)
			}
		}
	}
	for n := range out {
		slices.Sort(out[n])
	}
	return out
}
