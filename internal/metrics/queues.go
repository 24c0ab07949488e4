package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
)

// QueueState is one durable consumer's backlog, as the NATS server reports it.
type QueueState struct {
	Stream, Consumer string
	// Pending: not yet delivered; AckPending: delivered, not yet acknowledged; Waiting: pull requests
	// waiting; Redelivered: delivered more than once, not yet acknowledged.
	Pending, AckPending, Waiting, Redelivered float64
	// Delivered: stream sequence of the last message delivered.
	Delivered float64
}

// queues reads the durable consumers' state when scraped.
type queues struct {
	read    func(context.Context) ([]QueueState, error)
	timeout time.Duration
	log     *slog.Logger

	pending, ackPending, waiting, redelivered, delivered, up *prometheus.Desc
}

// RegisterQueues registers a collector of the work queues' depths: at each scrape it calls read (within a
// few seconds) and reports, per stream and durable consumer, the messages waiting, in flight and
// redelivered, the pull requests waiting (live consumers keep one open) and the last delivered sequence.
// proxops_queue_read_ok is 0 when the server could not be asked.
func RegisterQueues(reg prometheus.Registerer, read func(context.Context) ([]QueueState, error), log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	labels := []string{"stream", "consumer"}
	q := &queues{read: read, timeout: 5 * time.Second, log: log,
		pending: prometheus.NewDesc("proxops_queue_pending_messages",
			"Messages of a durable consumer's stream not yet delivered to it.", labels, nil),
		ackPending: prometheus.NewDesc("proxops_queue_ack_pending_messages",
			"Messages delivered to a durable consumer and not yet acknowledged.", labels, nil),
		waiting: prometheus.NewDesc("proxops_queue_waiting_pulls",
			"Pull requests waiting on a durable consumer; a live pulling service keeps one open.", labels, nil),
		redelivered: prometheus.NewDesc("proxops_queue_redelivered_messages",
			"Messages delivered more than once to a durable consumer and not yet acknowledged.", labels, nil),
		delivered: prometheus.NewDesc("proxops_queue_delivered_sequence",
			"Stream sequence of the last message delivered to a durable consumer; it stops moving when the queue is stuck.", labels, nil),
		up: prometheus.NewDesc("proxops_queue_read_ok",
			"1 when the last scrape could read the durable consumers' state from NATS, 0 when it could not.", nil, nil),
	}
	return register(reg, "queue", q)
}

func (q *queues) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{q.pending, q.ackPending, q.waiting, q.redelivered, q.delivered, q.up} {
		ch <- d
	}
}

func (q *queues) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
	defer cancel()
	states, err := q.read(ctx)
	if err != nil {
		q.log.Warn("read work queue depths", "err", err)
		gauge(ch, q.up, 0)
		return
	}
	gauge(ch, q.up, 1)
	for _, s := range states {
		for _, v := range []struct {
			d *prometheus.Desc
			v float64
		}{{q.pending, s.Pending}, {q.ackPending, s.AckPending}, {q.waiting, s.Waiting}, {q.redelivered, s.Redelivered}, {q.delivered, s.Delivered}} {
			gauge(ch, v.d, v.v, s.Stream, s.Consumer)
		}
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(d, err)
		return
	}
	ch <- m
}

// BusQueues reads the durable consumers of the work streams (bus.QueueStreams) for RegisterQueues.
func BusQueues(b *bus.Bus) func(context.Context) ([]QueueState, error) {
	return func(ctx context.Context) ([]QueueState, error) {
		cs, err := b.DurableConsumers(ctx, bus.QueueStreams...)
		if err != nil {
			return nil, err
		}
		out := make([]QueueState, 0, len(cs))
		for _, c := range cs {
			out = append(out, QueueState{Stream: c.Stream, Consumer: c.Consumer, Pending: float64(c.Pending),
				AckPending: float64(c.AckPending), Waiting: float64(c.Waiting), Redelivered: float64(c.Redelivered),
				Delivered: float64(c.Delivered)})
		}
		return out, nil
	}
}
