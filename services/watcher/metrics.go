package watcher

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pmetrics "github.com/proxops/proxops/internal/metrics"
)

// metrics are the watcher's Prometheus series. Labels carry no credentials: the repository label is its
// identity without userinfo.
type metrics struct {
	revision            *prometheus.GaugeVec
	gitDuration         *prometheus.HistogramVec
	fetchFailures       prometheus.Counter
	consecutiveFailures prometheus.Gauge
	lastSuccess         prometheus.Gauge
	stale               prometheus.Gauge
	webhooks            *prometheus.CounterVec
	published           *prometheus.CounterVec
	publishFailures     prometheus.Counter
	treesStored         prometheus.Counter
	// std are the series every ProxOps watcher shares with the predecessor's names (internal/metrics):
	// proxops_desired_stale, proxops_git_last_fetch_age_seconds, proxops_git_fetch_duration_seconds and
	// proxops_webhook_requests_total.
	std *pmetrics.Watcher
}

// Webhook request results, the result label of proxops_watcher_webhook_requests_total.
const (
	webhookAccepted         = "accepted"
	webhookIgnored          = "ignored"
	webhookReplayed         = "replayed"
	webhookUnauthorized     = "unauthorized"
	webhookTooLarge         = "too_large"
	webhookBadPayload       = "bad_payload"
	webhookMethodNotAllowed = "method_not_allowed"
	webhookError            = "error"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		revision: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "proxops_watcher_revision_info",
			Help: "The last revision fetched from the repository (value 1).",
		}, []string{"repo", "branch", "commit"}),
		gitDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proxops_watcher_git_duration_seconds",
			Help:    "Duration of git operations against the repository: list (ref listing) and fetch.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"operation"}),
		fetchFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "proxops_watcher_fetch_failures_total",
			Help: "Failed attempts to list, fetch or read the repository.",
		}),
		consecutiveFailures: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "proxops_watcher_fetch_consecutive_failures",
			Help: "Failed attempts since the last successful one.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "proxops_watcher_last_fetch_success_timestamp_seconds",
			Help: "Unix time of the last successful look at the repository.",
		}),
		stale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "proxops_watcher_stale",
			Help: "1 while the last look at the repository failed and the last good tree is kept.",
		}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxops_watcher_webhook_requests_total",
			Help: "Webhook requests by provider and result.",
		}, []string{"provider", "result"}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxops_watcher_events_published_total",
			Help: "RepoChanged events published, by trigger.",
		}, []string{"trigger"}),
		publishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "proxops_watcher_publish_failures_total",
			Help: "RepoChanged events or tree snapshots that could not be stored.",
		}),
		treesStored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "proxops_watcher_trees_stored_total",
			Help: "Tree snapshots written to the tree store.",
		}),
	}
	var err error
	m.revision = register(reg, m.revision, &err)
	m.gitDuration = register(reg, m.gitDuration, &err)
	m.fetchFailures = register(reg, m.fetchFailures, &err)
	m.consecutiveFailures = register(reg, m.consecutiveFailures, &err)
	m.lastSuccess = register(reg, m.lastSuccess, &err)
	m.stale = register(reg, m.stale, &err)
	m.webhooks = register(reg, m.webhooks, &err)
	m.published = register(reg, m.published, &err)
	m.publishFailures = register(reg, m.publishFailures, &err)
	m.treesStored = register(reg, m.treesStored, &err)
	if err != nil {
		return nil, err
	}
	if m.std, err = pmetrics.NewWatcher(reg); err != nil {
		return nil, err
	}
	return m, nil
}

// gitOp records one ref listing or fetch.
func (m *metrics) gitOp(operation string, d time.Duration, err error) {
	m.gitDuration.WithLabelValues(operation).Observe(d.Seconds())
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.std.GitFetchDuration.WithLabelValues(result).Observe(d.Seconds())
}

// webhook counts one webhook request.
func (m *metrics) webhook(provider, result string) {
	m.webhooks.WithLabelValues(provider, result).Inc()
	m.std.WebhookRequests.WithLabelValues(provider, result).Inc()
}

// register registers c, or returns the collector already registered under the same description (a watcher
// started again on the same registry keeps its series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		if *errp == nil {
			*errp = err
		}
	}
	return c
}
