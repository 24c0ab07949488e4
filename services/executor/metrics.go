package executor

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the executor's Prometheus series.
type metrics struct {
	requests   *prometheus.HistogramVec
	tasks      *prometheus.HistogramVec
	operations *prometheus.CounterVec
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
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.tasks, m.operations} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// unregister removes the series from the registry, so an executor of the same node can start again in the
// same process.
func (m *metrics) unregister(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	for _, c := range []prometheus.Collector{m.requests, m.tasks, m.operations} {
		reg.Unregister(c)
	}
}

// Request implements pve.Metrics.
func (m *metrics) Request(method, path, status string, d time.Duration) {
	m.requests.WithLabelValues(method, path, status).Observe(d.Seconds())
}

// Task implements pve.Metrics.
func (m *metrics) Task(taskType, result string, d time.Duration) {
	m.tasks.WithLabelValues(taskType, result).Observe(d.Seconds())
}

func (m *metrics) operation(action, result string) {
	m.operations.WithLabelValues(action, result).Inc()
}
