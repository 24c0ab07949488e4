package notifier

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	pmetrics "github.com/proxops/proxops/internal/metrics"
)

type metrics struct {
	notifications *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	failing       *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "proxops_notifications_total",
			Help: "Notification sends per provider, provider type, event and result (sent, failed, refused, rate_limited)."},
			[]string{"provider", "type", "event", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "proxops_notification_send_duration_seconds",
			Help: "Time to send one notification, per provider and type.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)},
			[]string{"provider", "type"}),
		failing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "proxops_notification_failing",
			Help: "1 while the last send to a provider failed or was refused, 0 once one succeeds."}, []string{"provider"}),
	}
	var errs []error
	m.notifications = pmetrics.Shared(reg, m.notifications, &errs)
	m.duration = pmetrics.Shared(reg, m.duration, &errs)
	m.failing = pmetrics.Shared(reg, m.failing, &errs)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register notifier metrics: %w", err)
	}
	return m, nil
}

func (m *metrics) result(p *provider, event, result string) {
	m.notifications.WithLabelValues(p.cfg.Name, p.cfg.Type, event, result).Inc()
}

// RegisterMetrics registers the notifier's collectors on reg ahead of its start (a notifier started later
// on the same registry takes them over), so /metrics describes them even where nothing is notified.
func RegisterMetrics(reg prometheus.Registerer) error {
	_, err := newMetrics(reg)
	return err
}
