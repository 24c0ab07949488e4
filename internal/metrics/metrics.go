// Package metrics defines ProxOps' Prometheus collectors, in groups: what the status service derives from
// events (Status), what an executor measures at the PVE boundary (Executor), what the watcher measures of
// git and webhooks (Watcher), and the process itself (RegisterProcess). Each service registers its own groups
// on a registry it is given, never on the global one: run as separate processes, each serves its own
// /metrics; `proxops up` registers every group on one registry and serves them together.
//
// Names keep the predecessor's where they map (proxops_cycles_total, proxops_actions_total, proxops_objects,
// proxops_prune_deferred_total, proxops_anomalies_total, proxops_read_only, proxops_desired_stale,
// proxops_git_last_fetch_age_seconds, proxops_pve_last_read_age_seconds); the rest are new.
package metrics

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace prefixes every ProxOps metric.
const Namespace = "proxops"

// BuildInfo is what proxops_build_info reports.
type BuildInfo struct {
	Version string
	Commit  string
}

// RegisterProcess registers the Go runtime and process collectors and proxops_build_info. Call it once per
// registry (a process serving /metrics), not once per service.
func RegisterProcess(reg prometheus.Registerer, b BuildInfo) error {
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help: "Always 1; the labels say which ProxOps build is running.",
	}, []string{"version", "commit", "goversion"})
	info.WithLabelValues(b.Version, b.Commit, runtime.Version()).Set(1)
	return register(reg, "process",
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info)
}

func register(reg prometheus.Registerer, group string, cs ...prometheus.Collector) error {
	if reg == nil {
		return fmt.Errorf("register %s metrics: no registry", group)
	}
	var errs []error
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("register %s metrics: %w", group, err)
	}
	return nil
}

// Shared registers c on reg, or returns the collector of the same description already registered there, so
// a service started again in the same process on the same registry goes on with its series. Other
// registration errors are appended to *errp.
func Shared[C prometheus.Collector](reg prometheus.Registerer, c C, errp *[]error) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	*errp = append(*errp, err)
	return c
}

// Buckets of the duration histograms, in seconds.
var (
	// ReconcileBuckets: from a repository event to its plan's completion (100 ms to 2 h).
	ReconcileBuckets = prometheus.ExponentialBucketsRange(0.1, 7200, 14)
	// RequestBuckets: one PVE API request (5 ms to 60 s).
	RequestBuckets = prometheus.ExponentialBucketsRange(0.005, 60, 14)
	// TaskBuckets: one PVE task, from submission to its end (100 ms to 2 h).
	TaskBuckets = prometheus.ExponentialBucketsRange(0.1, 7200, 14)
)

// Status holds what the status service derives from the events it folds.
type Status struct {
	// Cycles counts completed reconciles by result (the predecessor's name): ok, failed, superseded,
	// dry_run, suspended, or a rejection's reason (parse_error, unknown_node, secrets, pve_read_error,
	// cannot_create, plan_error).
	Cycles *prometheus.CounterVec
	// Reconciles counts completed reconciles per cluster and result (same results as Cycles).
	Reconciles *prometheus.CounterVec
	// ReconcileDuration observes, per cluster and result, the time from the repository event to the
	// reconcile's completion.
	ReconcileDuration *prometheus.HistogramVec
	// LastSuccess is when a cluster last reconciled successfully (Unix seconds).
	LastSuccess *prometheus.GaugeVec
	// Objects counts resources by kind and state over every cluster (the predecessor's name).
	Objects *prometheus.GaugeVec
	// Resources counts resources per cluster, kind and state.
	Resources *prometheus.GaugeVec
	// Drifted counts, per cluster, resources that differ from git (desired, drift, orphan).
	Drifted *prometheus.GaugeVec
	// Phase is 1 for a cluster's current phase and 0 for the others.
	Phase *prometheus.GaugeVec
	// Gaps counts live config keys the model does not cover, per cluster.
	Gaps *prometheus.GaugeVec
	// SecurityWarnings counts live settings that weaken a guest's isolation from its host, per cluster.
	SecurityWarnings *prometheus.GaugeVec
	// Findings counts the last plan's findings per cluster and kind (anomaly, misplaced, skipped, ...).
	Findings *prometheus.GaugeVec
	// Actions counts finished operations by resource kind, action and result ok or error (the predecessor's
	// name).
	Actions *prometheus.CounterVec
	// Operations counts finished operations per cluster, action and final state (succeeded, failed, skipped).
	Operations *prometheus.CounterVec
	// PruneDeferred counts prunes held back by the budget or the latch, per kind, per plan.
	PruneDeferred *prometheus.CounterVec
	// Anomalies counts anomalies reported by plans, per type (anomaly, misplaced).
	Anomalies *prometheus.CounterVec
}

// NewStatus creates the status service's collectors and registers them.
func NewStatus(reg prometheus.Registerer) (*Status, error) {
	m := &Status{
		Cycles: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "cycles_total",
			Help: "Completed reconciles by result, over every cluster."}, []string{"result"}),
		Reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "reconciles_total",
			Help: "Completed reconciles per cluster and result."}, []string{"cluster", "result"}),
		ReconcileDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "reconcile_duration_seconds",
			Help:    "Time from a repository event to the completion of its reconcile, per cluster and result.",
			Buckets: ReconcileBuckets}, []string{"cluster", "result"}),
		LastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "last_successful_reconcile_timestamp_seconds",
			Help: "When a cluster last reconciled successfully (a run succeeded or a plan had nothing to do), in Unix seconds."}, []string{"cluster"}),
		Objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "objects",
			Help: "Resources by kind and state, over every cluster."}, []string{"kind", "state"}),
		Resources: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "resources",
			Help: "Resources per cluster, kind and state."}, []string{"cluster", "kind", "state"}),
		Drifted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "drifted_resources",
			Help: "Resources that differ from git (desired, drift, orphan), per cluster."}, []string{"cluster"}),
		Phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "cluster_phase",
			Help: "1 for a cluster's current phase, 0 for the others."}, []string{"cluster", "phase"}),
		Gaps: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "gaps",
			Help: "Live config keys the manifest model does not cover, per cluster."}, []string{"cluster"}),
		SecurityWarnings: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "security_warnings",
			Help: "Live settings that weaken a guest's isolation from its host (unconfined AppArmor, device allows, raw QEMU arguments, ...), per cluster."}, []string{"cluster"}),
		Findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "findings",
			Help: "Findings of the last plan per cluster and kind."}, []string{"cluster", "kind"}),
		Actions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "actions_total",
			Help: "Finished operations by resource kind, action and result (ok, error)."}, []string{"kind", "action", "result"}),
		Operations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "operations_total",
			Help: "Finished operations per cluster, action and final state (succeeded, failed, skipped)."}, []string{"cluster", "action", "result"}),
		PruneDeferred: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "prune_deferred_total",
			Help: "Prunes held back by the prune budget or the mass-prune latch, per kind, counted per plan."}, []string{"kind"}),
		Anomalies: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "anomalies_total",
			Help: "Anomalies reported by plans, per type, counted per plan."}, []string{"type"}),
	}
	err := register(reg, "status", m.Cycles, m.Reconciles, m.ReconcileDuration, m.LastSuccess, m.Objects, m.Resources,
		m.Drifted, m.Phase, m.Gaps, m.SecurityWarnings, m.Findings, m.Actions, m.Operations, m.PruneDeferred, m.Anomalies)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Executor holds what an executor measures at the PVE boundary. Its series carry no cluster or node label of
// their own: register them through prometheus.WrapRegistererWith(cluster, node), as proxops-executor and
// proxops up do, so one registry holds every node's executor.
type Executor struct {
	// PVERequestDuration observes PVE API requests per method and result (ok, error).
	PVERequestDuration *prometheus.HistogramVec
	// PVETaskDuration observes PVE tasks per task type (qmcreate, qmclone, download, ...) and result (ok,
	// failed, error).
	PVETaskDuration *prometheus.HistogramVec
	// InFlight counts operations being applied.
	InFlight prometheus.Gauge
	// ReadOnly is 1 while the executor refuses every write (the predecessor's name): it serves observes
	// only, or its endpoint differs from the repository's.
	ReadOnly prometheus.Gauge
	// lastRead backs proxops_pve_last_read_age_seconds.
	lastRead *ages
}

// NewExecutor creates an executor's collectors and registers them, or takes over those already registered
// on reg.
func NewExecutor(reg prometheus.Registerer) (*Executor, error) {
	if reg == nil {
		return nil, errors.New("register executor metrics: no registry")
	}
	var errs []error
	m := &Executor{
		PVERequestDuration: Shared(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "pve_request_duration_seconds",
			Help: "PVE API requests per method and result (ok, error).", Buckets: RequestBuckets},
			[]string{"method", "result"}), &errs),
		PVETaskDuration: Shared(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "pve_task_duration_seconds",
			Help: "PVE tasks from submission to their end, per task type and result.", Buckets: TaskBuckets},
			[]string{"task", "result"}), &errs),
		InFlight: Shared(reg, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "operations_in_flight",
			Help: "Operations being applied."}), &errs),
		ReadOnly: Shared(reg, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "read_only",
			Help: "1 while the executor refuses every write (observe only, or an endpoint mismatch)."}), &errs),
		lastRead: Shared(reg, newAges(prometheus.NewDesc(prometheus.BuildFQName(Namespace, "pve", "last_read_age_seconds"),
			"Seconds since the node's live state was last read successfully; absent before the first read.", nil, nil)), &errs),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register executor metrics: %w", err)
	}
	return m, nil
}

// Unregister removes the executor's collectors from reg (an executor of the same node may then start again
// in the same process).
func (m *Executor) Unregister(reg prometheus.Registerer) {
	for _, c := range []prometheus.Collector{m.PVERequestDuration, m.PVETaskDuration, m.InFlight, m.ReadOnly, m.lastRead} {
		reg.Unregister(c)
	}
}

// PVERead records a successful read of the node's live state at t.
func (m *Executor) PVERead(t time.Time) { m.lastRead.set(t) }

// Watcher holds what the watcher measures of git and webhooks.
type Watcher struct {
	// WebhookRequests counts webhook requests by provider (github, gitea, gitlab) and result (accepted,
	// unauthorized, replayed, ignored, ...).
	WebhookRequests *prometheus.CounterVec
	// GitFetchDuration observes ref listings and fetches by result (ok, error).
	GitFetchDuration *prometheus.HistogramVec
	// DesiredStale is 1 while the repository cannot be read and planning goes on with the last good tree
	// (the predecessor's name).
	DesiredStale prometheus.Gauge
	// lastFetch backs proxops_git_last_fetch_age_seconds.
	lastFetch *ages
}

// NewWatcher creates the watcher's collectors and registers them, or takes over those already registered on
// reg (a watcher started again on the same registry keeps its series).
func NewWatcher(reg prometheus.Registerer) (*Watcher, error) {
	if reg == nil {
		return nil, errors.New("register watcher metrics: no registry")
	}
	var errs []error
	m := &Watcher{
		WebhookRequests: Shared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "webhook_requests_total",
			Help: "Webhook requests by provider and result."}, []string{"provider", "result"}), &errs),
		GitFetchDuration: Shared(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "git_fetch_duration_seconds",
			Help: "Git ref listings and fetches by result.", Buckets: RequestBuckets}, []string{"result"}), &errs),
		DesiredStale: Shared(reg, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "desired_stale",
			Help: "1 while the repository cannot be read and the last good tree is used."}), &errs),
		lastFetch: Shared(reg, newAges(prometheus.NewDesc(prometheus.BuildFQName(Namespace, "git", "last_fetch_age_seconds"),
			"Seconds since the repository was last read successfully; absent before the first read.", nil, nil)), &errs),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register watcher metrics: %w", err)
	}
	return m, nil
}

// GitFetched records a successful read of the repository at t.
func (m *Watcher) GitFetched(t time.Time) { m.lastFetch.set(t) }

// ages is a collector of "seconds since" gauges, computed when scraped so they grow between events.
type ages struct {
	desc *prometheus.Desc
	now  func() time.Time

	mu   sync.Mutex
	last map[string]ageEntry
}

type ageEntry struct {
	labels []string
	at     time.Time
}

func newAges(desc *prometheus.Desc) *ages {
	return &ages{desc: desc, now: time.Now, last: map[string]ageEntry{}}
}

func (a *ages) set(t time.Time, labels ...string) {
	key := fmt.Sprintf("%q", labels)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last[key] = ageEntry{labels: labels, at: t}
}

func (a *ages) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

func (a *ages) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for _, e := range a.last {
		m, err := prometheus.NewConstMetric(a.desc, prometheus.GaugeValue, max(now.Sub(e.at).Seconds(), 0), e.labels...)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(a.desc, err)
			continue
		}
		ch <- m
	}
}
