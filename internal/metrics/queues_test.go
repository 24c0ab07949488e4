package metrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/metrics"
)

const readOK = `# HELP proxops_queue_read_ok 1 when the last scrape could read the durable consumers' state from NATS, 0 when it could not.
# TYPE proxops_queue_read_ok gauge
`

// The queue metrics report, per durable consumer, the messages waiting and in flight and the last delivered
// sequence, as the NATS server counts them at scrape time; a scrape that cannot reach the server says so.
func TestQueueMetricsReportDurableConsumersBacklog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	b, err := srv.Connect(bus.Options{APITimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	if _, err := b.Provision(ctx, bus.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	subject, _ := bus.OpSubject("lab", "pve1")
	durable, _ := bus.ExecutorConsumer("lab", "pve1")
	if err := b.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamOps, Durable: durable, Filter: subject}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := b.Publish(ctx, subject, wrapperspb.Int64(int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	if err := metrics.RegisterQueues(reg, metrics.BusQueues(b), nil); err != nil {
		t.Fatal(err)
	}
	value := func(name string) float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["stream"] == bus.StreamOps && labels["consumer"] == durable {
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("no %s for %s", name, durable)
		return 0
	}
	if got := value("proxops_queue_pending_messages"); got != 3 {
		t.Fatalf("pending %v, want 3", got)
	}
	if got := value("proxops_queue_delivered_sequence"); got != 0 {
		t.Fatalf("delivered sequence %v before any delivery, want 0", got)
	}
	// Take one message and keep it unacknowledged.
	cons, err := b.JetStream().Consumer(ctx, bus.StreamOps, durable)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() {
	}
	if got := value("proxops_queue_pending_messages"); got != 2 {
		t.Fatalf("pending %v after one delivery, want 2", got)
	}
	if got := value("proxops_queue_ack_pending_messages"); got != 1 {
		t.Fatalf("ack pending %v, want 1", got)
	}
	if got := value("proxops_queue_delivered_sequence"); got != 1 {
		t.Fatalf("delivered sequence %v, want 1", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(readOK+"proxops_queue_read_ok 1\n"), "proxops_queue_read_ok"); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(readOK+"proxops_queue_read_ok 0\n"), "proxops_queue_read_ok"); err != nil {
		t.Fatalf("with the connection closed: %v", err)
	}
}
