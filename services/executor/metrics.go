package executor

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pmetrics "github.com/proxops/proxops/internal/metrics"
)

// metrics are the executor's Prometheus series.
type metrics struct {
	requests   *prometheus.HistogramVec
	tasks      *prometheus.HistogramVec
	operations *prometheus.CounterVec
	refused    *prometheus.CounterVec
	// std are the series every executor shares with the predecessor's names (internal/metrics):
	// proxops_pve_last_read_age_seconds, proxops_read_only, proxops_pve_request_duration_seconds, ...; nil
	// without a registry.
	std *pmetrics.Executor
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proxops_executor_pve_request_duration_seconds",
			Help:    "PVE API requests by method, path template and status code.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"method", "path", "status"}),
		tasks: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "proxops_executor_task_duration_seconds",
			Help:    "PVE task waits by task type and result (ok, failed, error).",
			Buckets: prometheus.ExponentialBuckets(0.1, 2, 14),
		}, []string{"type", "result"}),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxops_executor_operations_total",
			Help: "Operations by action and result (succeeded, already_done, failed, retried, dead_lettered, refused).",
		}, []string{"action", "result"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxops_executor_operations_refused_total",
			Help: "Operations refused before anything was written, by reason (unsigned, unknown_key, bad_signature, run_not_open, not_owned, claim_mismatch, secret_reference, ...).",
		}, []string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.tasks, m.operations, m.refused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	std, err := pmetrics.NewExecutor(reg)
	if err != nil {
		m.unregister(reg)
		return nil, err
	}
	m.std = std
	return m, nil
}

// unregister removes the series from the registry, so an executor of the same node can start again in the
// same process.
func (m *metrics) unregister(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	for _, c := range []prometheus.Collector{m.requests, m.tasks, m.operations, m.refused} {
		reg.Unregister(c)
	}
	if m.std != nil {
		m.std.Unregister(reg)
	}
}

// Request implements pve.Metrics.
func (m *metrics) Request(method, path, status string, d time.Duration) {
	m.requests.WithLabelValues(method, path, status).Observe(d.Seconds())
	if m.std != nil {
		result := "error"
		if strings.HasPrefix(status, "2") {
			result = "ok"
		}
		m.std.PVERequestDuration.WithLabelValues(method, result).Observe(d.Seconds())
	}
}

// Task implements pve.Metrics.
func (m *metrics) Task(taskType, result string, d time.Duration) {
	m.tasks.WithLabelValues(taskType, result).Observe(d.Seconds())
	if m.std != nil {
		m.std.PVETaskDuration.WithLabelValues(taskType, result).Observe(d.Seconds())
	}
}

// pveRead records a successful observe of the node.
func (m *metrics) pveRead(t time.Time) {
	if m.std != nil {
		m.std.PVERead(t)
	}
}

// readOnly sets proxops_read_only: the executor refuses every write.
func (m *metrics) readOnly(on bool) {
	if m.std != nil {
		v := 0.0
		if on {
			v = 1
		}
		m.std.ReadOnly.Set(v)
	}
}

// applying counts one operation in flight until the returned function is called.
func (m *metrics) applying() func() {
	if m.std == nil {
		return func() {}
	}
	m.std.InFlight.Inc()
	return m.std.InFlight.Dec
}

func (m *metrics) operation(action, result string) {
	m.operations.WithLabelValues(action, result).Inc()
}
