package bus

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/proxops/proxops/internal/defaults"
)

// Provisioning defaults.
const (
	DefaultDuplicateWindow = 30 * time.Minute
	DefaultLeaseTTL        = 30 * time.Second
	DefaultDeliveriesTTL   = 30 * 24 * time.Hour
	DefaultBlobTTL         = 30 * 24 * time.Hour
	DefaultOpRecordTTL     = 30 * 24 * time.Hour
	DefaultPreviewTTL      = 30 * 24 * time.Hour

	day = 24 * time.Hour
)

// ProvisionConfig sets what may differ between deployments.
type ProvisionConfig struct {
	// Replicas of every stream, bucket and object store: 1 on a single host, 3 on a cluster.
	Replicas int
	// DuplicateWindow of every stream (default 30 min); keep it longer than any retry horizon.
	DuplicateWindow time.Duration
	// LeaseTTL is how long a plan lease lives without renewal (default 30 s).
	LeaseTTL time.Duration
	// DeliveriesTTL is how long the watcher remembers a pushed commit and its last state (default 30 days).
	DeliveriesTTL time.Duration
	// BlobTTL is how long large message bodies are kept (default 30 d, the longest stream retention).
	BlobTTL time.Duration
	// OpRecordTTL is how long proxops_ops keeps an operation's intent and outcome (default 30 d).
	OpRecordTTL time.Duration
	// PreviewTTL is how long proxops_previews keeps a client's snapshot (default 30 d).
	PreviewTTL time.Duration
	// Memory keeps everything in memory instead of files (tests only: nothing survives a restart).
	Memory bool
}

func (c ProvisionConfig) withDefaults() ProvisionConfig {
	defaults.Positive(&c.Replicas, 1)
	defaults.Positive(&c.DuplicateWindow, DefaultDuplicateWindow)
	defaults.Positive(&c.LeaseTTL, DefaultLeaseTTL)
	defaults.Positive(&c.DeliveriesTTL, DefaultDeliveriesTTL)
	defaults.Positive(&c.BlobTTL, DefaultBlobTTL)
	defaults.Positive(&c.OpRecordTTL, DefaultOpRecordTTL)
	defaults.Positive(&c.PreviewTTL, DefaultPreviewTTL)
	return c
}

func (c ProvisionConfig) storage() jetstream.StorageType {
	if c.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// StreamConfigs returns the configuration of every stream, in a fixed order.
func StreamConfigs(cfg ProvisionConfig) []jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	base := func(name, desc string, subjects ...string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    subjects,
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			Storage:     cfg.storage(),
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.DuplicateWindow,
		}
	}
	repo := base(StreamRepo, "repository events, source health, reconcile requests and work-tree applies", SubjectRepoChanged, SubjectRepoHealth, SubjectReconcileRequest, FilterWorktreeApply)
	repo.MaxAge = 7 * day
	plans := base(StreamPlans, "plans, rejections, holds, finished runs and confirmations", FilterPlans, FilterConfirms)
	plans.MaxAge = 30 * day
	ops := base(StreamOps, "operations: one work queue per node", FilterOps)
	ops.Retention = jetstream.WorkQueuePolicy
	results := base(StreamResults, "operation results and progress", FilterResults)
	results.MaxAge = 30 * day
	inventory := base(StreamInventory, "latest node inventory per node", FilterInventory)
	inventory.MaxMsgsPerSubject = 1
	inventory.AllowDirect = true
	gaps := base(StreamGaps, "latest gap report per cluster", FilterGaps)
	gaps.MaxMsgsPerSubject = 1
	gaps.AllowDirect = true
	status := base(StreamStatus, "latest cluster status per cluster", FilterStatus)
	status.MaxMsgsPerSubject = 1
	status.AllowDirect = true
	dlq := base(StreamDLQ, "operations that exhausted their deliveries", FilterDLQ)
	dlq.MaxAge = 30 * day
	notify := base(StreamNotify, "latest notification delivery outcome per cluster", FilterNotify)
	notify.MaxMsgsPerSubject = 1
	notify.AllowDirect = true
	return []jetstream.StreamConfig{repo, plans, ops, results, inventory, gaps, status, dlq, notify}
}

// KeyValueConfigs returns the configuration of every key-value bucket, in a fixed order.
func KeyValueConfigs(cfg ProvisionConfig) []jetstream.KeyValueConfig {
	cfg = cfg.withDefaults()
	kv := func(bucket, desc string) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{Bucket: bucket, Description: desc, History: 1, Storage: cfg.storage(), Replicas: cfg.Replicas}
	}
	leases := kv(BucketLeases, "plan lease per cluster")
	leases.TTL = cfg.LeaseTTL
	leases.LimitMarkerTTL = max(cfg.LeaseTTL, time.Second)
	owned := kv(BucketOwned, "ownership inventory: cluster.vmid to the managed guest's identity")
	owned.History = 5
	ops := kv(BucketOps, "operation records per cluster, node, run and op (intent, task UPID, outcome) and guest guards")
	ops.TTL = cfg.OpRecordTTL
	status := kv(BucketStatus, "latest cluster status per cluster")
	deliveries := kv(BucketDeliveries, "webhook delivery ids already accepted")
	deliveries.TTL = cfg.DeliveriesTTL
	clusters := kv(BucketClusters, "planner state per cluster: newest event to apply, last handled, run in progress, suspension")
	notify := kv(BucketNotify, "notifier state per cluster: last outcome, security warnings notified")
	return []jetstream.KeyValueConfig{leases, owned, ops, status, deliveries, clusters, notify}
}

// ObjectStoreConfigs returns the configuration of every object store, in a fixed order.
func ObjectStoreConfigs(cfg ProvisionConfig) []jetstream.ObjectStoreConfig {
	cfg = cfg.withDefaults()
	return []jetstream.ObjectStoreConfig{
		{Bucket: ObjectTrees, Description: "snapshots of the commits the watcher fetched, by content hash", Storage: cfg.storage(), Replicas: cfg.Replicas, Compression: true},
		{Bucket: ObjectPreviews, Description: "snapshots clients stored to preview or apply a work tree, by content hash", TTL: cfg.PreviewTTL, Storage: cfg.storage(), Replicas: cfg.Replicas, Compression: true},
		{Bucket: ObjectBlobs, Description: "bodies of messages above the payload limit", TTL: cfg.BlobTTL, Storage: cfg.storage(), Replicas: cfg.Replicas, Compression: true},
	}
}

// ProvisionAction says what provisioning did to one resource.
type ProvisionAction string

const (
	Created   ProvisionAction = "created"
	Updated   ProvisionAction = "updated"
	Unchanged ProvisionAction = "unchanged"
)

// ProvisionResult is what provisioning did to one stream, bucket or object store.
type ProvisionResult struct {
	// Kind is stream, kv or object.
	Kind   string
	Name   string
	Action ProvisionAction
}

// Provision creates every stream, bucket and object store of the contract, or updates the settings that
// changed. A second run with the same configuration changes nothing.
func (b *Bus) Provision(ctx context.Context, cfg ProvisionConfig) ([]ProvisionResult, error) {
	var out []ProvisionResult
	for _, sc := range StreamConfigs(cfg) {
		act, err := b.provisionStream(ctx, sc)
		if err != nil {
			return out, fmt.Errorf("provision stream %s: %w", sc.Name, err)
		}
		out = append(out, ProvisionResult{Kind: "stream", Name: sc.Name, Action: act})
	}
	for _, kc := range KeyValueConfigs(cfg) {
		act, err := b.provisionKV(ctx, kc)
		if err != nil {
			return out, fmt.Errorf("provision bucket %s: %w", kc.Bucket, err)
		}
		out = append(out, ProvisionResult{Kind: "kv", Name: kc.Bucket, Action: act})
	}
	for _, oc := range ObjectStoreConfigs(cfg) {
		act, err := b.provisionObjectStore(ctx, oc)
		if err != nil {
			return out, fmt.Errorf("provision object store %s: %w", oc.Bucket, err)
		}
		out = append(out, ProvisionResult{Kind: "object", Name: oc.Bucket, Action: act})
	}
	return out, nil
}

// existingStream returns a stream's configuration, or nil when it does not exist.
func (b *Bus) existingStream(ctx context.Context, name string) (*jetstream.StreamConfig, error) {
	ctx, cancel := b.api(ctx)
	defer cancel()
	s, err := b.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cfg := s.CachedInfo().Config
	return &cfg, nil
}

func (b *Bus) provisionStream(ctx context.Context, want jetstream.StreamConfig) (ProvisionAction, error) {
	have, err := b.existingStream(ctx, want.Name)
	if err != nil {
		return "", err
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	if have == nil {
		if _, err := b.js.CreateStream(actx, want); err != nil {
			return "", err
		}
		return Created, nil
	}
	// Overlay the settings ProvisionConfig manages onto what the server reports (it fills in defaults), so
	// an unchanged stream compares equal and a changed one keeps the settings an operator tuned by hand.
	merged := *have
	merged.Description = want.Description
	merged.Subjects = want.Subjects
	merged.Retention = want.Retention
	merged.Discard = want.Discard
	merged.Storage = want.Storage
	merged.Replicas = want.Replicas
	merged.Duplicates = want.Duplicates
	merged.MaxAge = want.MaxAge
	merged.MaxMsgsPerSubject = want.MaxMsgsPerSubject
	if merged.MaxMsgsPerSubject == 0 {
		merged.MaxMsgsPerSubject = -1 // the server reports "unlimited" as -1
	}
	merged.AllowDirect = want.AllowDirect
	if reflect.DeepEqual(merged, *have) {
		return Unchanged, nil
	}
	if _, err := b.js.UpdateStream(actx, merged); err != nil {
		return "", err
	}
	return Updated, nil
}

func (b *Bus) provisionKV(ctx context.Context, want jetstream.KeyValueConfig) (ProvisionAction, error) {
	have, err := b.existingStream(ctx, "KV_"+want.Bucket)
	if err != nil {
		return "", err
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	if have == nil {
		if _, err := b.js.CreateKeyValue(actx, want); err != nil {
			return "", err
		}
		return Created, nil
	}
	if have.Description == want.Description && have.MaxMsgsPerSubject == int64(want.History) &&
		have.MaxAge == want.TTL && have.SubjectDeleteMarkerTTL == want.LimitMarkerTTL &&
		have.Storage == want.Storage && have.Replicas == want.Replicas {
		return Unchanged, nil
	}
	if _, err := b.js.UpdateKeyValue(actx, want); err != nil {
		return "", err
	}
	return Updated, nil
}

func (b *Bus) provisionObjectStore(ctx context.Context, want jetstream.ObjectStoreConfig) (ProvisionAction, error) {
	have, err := b.existingStream(ctx, "OBJ_"+want.Bucket)
	if err != nil {
		return "", err
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	if have == nil {
		if _, err := b.js.CreateObjectStore(actx, want); err != nil {
			return "", err
		}
		return Created, nil
	}
	compressed := have.Compression == jetstream.S2Compression
	if have.Description == want.Description && have.MaxAge == want.TTL && have.Storage == want.Storage &&
		have.Replicas == want.Replicas && compressed == want.Compression {
		return Unchanged, nil
	}
	if _, err := b.js.UpdateObjectStore(actx, want); err != nil {
		return "", err
	}
	return Updated, nil
}

// CheckProvisioned says whether every stream of the contract exists, naming the first one missing: a client
// of a deployed system fails with that instead of an error deep in its first consumer.
func (b *Bus) CheckProvisioned(ctx context.Context) error {
	for _, sc := range StreamConfigs(ProvisionConfig{}) {
		have, err := b.existingStream(ctx, sc.Name)
		if err != nil {
			return fmt.Errorf("look up stream %s: %w", sc.Name, err)
		}
		if have == nil {
			return fmt.Errorf("stream %s does not exist: the NATS server is not provisioned for ProxOps (run proxops provision against it)", sc.Name)
		}
	}
	return nil
}
