package bus_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/testkit"
)

func TestSubjectBuildersValidateTokens(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		build   func() (string, error)
		want    string
		wantErr string
	}{
		{"op", func() (string, error) { return bus.OpSubject("lab", "pve1") }, "proxops.v1.op.lab.pve1", ""},
		{"result", func() (string, error) { return bus.ResultSubject("lab-2", "pve-a1") }, "proxops.v1.result.lab-2.pve-a1", ""},
		{"observe", func() (string, error) { return bus.ObserveSubject("lab", "PVE1") }, "proxops.v1.observe.lab.PVE1", ""},
		{"inventory", func() (string, error) { return bus.InventorySubject("lab", "n") }, "proxops.v1.inventory.lab.n", ""},
		{"dlq", func() (string, error) { return bus.DLQSubject("lab", "n") }, "proxops.v1.dlq.lab.n", ""},
		{"plan", func() (string, error) { return bus.PlanSubject("lab", bus.PlanHeld) }, "proxops.v1.plan.lab.held", ""},
		{"confirm", func() (string, error) { return bus.ConfirmSubject("lab") }, "proxops.v1.confirm.lab", ""},
		{"gap", func() (string, error) { return bus.GapSubject("lab") }, "proxops.v1.gap.lab", ""},
		{"status", func() (string, error) { return bus.StatusSubject("lab") }, "proxops.v1.status.lab", ""},
		{"durable", func() (string, error) { return bus.ExecutorConsumer("lab-2", "pve-1") }, "exec_lab-2_pve-1", ""},
		{"results durable", func() (string, error) { return bus.PlannerResultsConsumer("lab") }, "planner_results_lab", ""},
		{"dot in cluster", func() (string, error) { return bus.OpSubject("lab.x", "pve1") }, "", "cluster name"},
		{"upper cluster", func() (string, error) { return bus.OpSubject("Lab", "pve1") }, "", "cluster name"},
		{"wildcard node", func() (string, error) { return bus.OpSubject("lab", "*") }, "", "node name"},
		{"gt node", func() (string, error) { return bus.ResultSubject("lab", ">") }, "", "node name"},
		{"space node", func() (string, error) { return bus.ResultSubject("lab", "pve 1") }, "", "node name"},
		{"dot node", func() (string, error) { return bus.ExecutorConsumer("lab", "pve.1") }, "", "node name"},
		{"trailing dash node", func() (string, error) { return bus.ExecutorConsumer("lab", "pve-") }, "", "node name"},
		{"underscore node", func() (string, error) { return bus.ExecutorConsumer("lab", "pve_1") }, "", "node name"},
		{"empty cluster", func() (string, error) { return bus.GapSubject("") }, "", "empty"},
		{"long cluster", func() (string, error) { return bus.GapSubject(strings.Repeat("a", 65)) }, "", "longer than 64"},
		{"unknown event", func() (string, error) { return bus.PlanSubject("lab", "done") }, "", "unknown plan event"},
		{"op key", func() (string, error) { return bus.OpKey("lab", "pve1", "r1", "vm-100-create") }, "op.lab.pve1.r1.vm-100-create", ""},
		{"op key of a file", func() (string, error) { return bus.OpKey("lab", "pve1", "r1", "iso-pve1-local-a.b+c.iso-download") }, "op.lab.pve1.r1.iso-pve1-local-a=2Eb=2Bc=2Eiso-download", ""},
		{"op key escapes its escape", func() (string, error) { return bus.OpKey("lab", "pve1", "r1", "a=2E") }, "op.lab.pve1.r1.a=3D2E", ""},
		{"op key bad run", func() (string, error) { return bus.OpKey("lab", "pve1", "r.1", "a") }, "", "run id"},
		{"op key bad node", func() (string, error) { return bus.OpKey("lab", "pve.1", "r1", "a") }, "", "node name"},
		{"legacy op key", func() (string, error) { return bus.LegacyOpKey("r1", "vm-100-create") }, "r1.vm-100-create", ""},
		{"guard key", func() (string, error) { return bus.GuardKey("lab", "pve1", 100) }, "guard.lab.pve1.100", ""},
		{"guard key bad vmid", func() (string, error) { return bus.GuardKey("lab", "pve1", 0) }, "", "positive"},
		{"cluster key", func() (string, error) { return bus.ClusterKey("lab") }, "lab", ""},
		{"inventory filter", func() (string, error) { return bus.InventoryFilter("lab") }, "proxops.v1.inventory.lab.*", ""},
		{"cluster queue", func() (string, error) { return bus.OpSubject("lab", bus.ClusterScope) }, "proxops.v1.op.lab._cluster", ""},
		{"cluster queue result", func() (string, error) { return bus.ResultSubject("lab", bus.ClusterScope) }, "proxops.v1.result.lab._cluster", ""},
		{"cluster queue durable", func() (string, error) { return bus.ExecutorConsumer("lab", bus.ClusterScope) }, "exec_lab__cluster", ""},
		{"cluster queue op key", func() (string, error) { return bus.OpKey("lab", bus.ClusterScope, "r1", "pool-web-create") }, "op.lab._cluster.r1.pool-web-create", ""},
		{"cluster scope is no node", func() (string, error) { return bus.ObserveSubject("lab", bus.ClusterScope) }, "", "node name"},
		{"cluster scope has no guards", func() (string, error) { return bus.GuardKey("lab", bus.ClusterScope, 100) }, "", "node name"},
		{"cluster scope has no executor user", func() (string, error) { return bus.ExecutorUser("lab", bus.ClusterScope) }, "", "node name"},
		{"object owned key", func() (string, error) { return bus.ObjectOwnedKey("lab", bus.ObjectPool, "web") }, "lab.obj.pool.web", ""},
		{"object owned key of a nested pool", func() (string, error) { return bus.ObjectOwnedKey("lab", bus.ObjectPool, "prod/db.1") }, "lab.obj.pool.prod/db=2E1", ""},
		{"object owned key without id", func() (string, error) { return bus.ObjectOwnedKey("lab", bus.ObjectPool, "") }, "", "empty"},
		{"object owned key bad kind", func() (string, error) { return bus.ObjectOwnedKey("lab", "po.ol", "web") }, "", "object kind"},
		{"object owned filter", func() (string, error) { return bus.ObjectOwnedFilter("lab") }, "lab.obj.>", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.build()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %q, %v; want error containing %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestProvisionTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	before := streamCreated(t, env.bus)
	res, err := env.bus.Provision(ctx, bus.ProvisionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 9+7+3 {
		t.Fatalf("provisioned %d resources, want 19: %v", len(res), res)
	}
	for _, r := range res {
		if r.Action != bus.Unchanged {
			t.Errorf("%s %s: %s on the second run, want unchanged", r.Kind, r.Name, r.Action)
		}
	}
	if diff := cmp.Diff(before, streamCreated(t, env.bus)); diff != "" {
		t.Errorf("streams changed (-before +after):\n%s", diff)
	}
}

// streamCreated maps every stream to its creation time and configuration summary.
func streamCreated(t *testing.T, b *bus.Bus) map[string]string {
	t.Helper()
	ctx := testContext(t)
	out := map[string]string{}
	lister := b.JetStream().ListStreams(ctx)
	for info := range lister.Info() {
		c := info.Config
		out[c.Name] = fmt.Sprintf("%s subjects=%v retention=%s storage=%s dup=%s age=%s per-subject=%d",
			info.Created.Format(time.RFC3339Nano), c.Subjects, c.Retention, c.Storage, c.Duplicates, c.MaxAge, c.MaxMsgsPerSubject)
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestProvisionCreatesEveryResourceWithContractSettings(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	js := env.bus.JetStream()
	want := map[string]struct {
		retention  jetstream.RetentionPolicy
		maxAge     time.Duration
		perSubject int64
	}{
		bus.StreamRepo:      {jetstream.LimitsPolicy, 7 * 24 * time.Hour, -1},
		bus.StreamPlans:     {jetstream.LimitsPolicy, 30 * 24 * time.Hour, -1},
		bus.StreamOps:       {jetstream.WorkQueuePolicy, 0, -1},
		bus.StreamResults:   {jetstream.LimitsPolicy, 30 * 24 * time.Hour, -1},
		bus.StreamInventory: {jetstream.LimitsPolicy, 0, 1},
		bus.StreamGaps:      {jetstream.LimitsPolicy, 0, 1},
		bus.StreamStatus:    {jetstream.LimitsPolicy, 0, 1},
		bus.StreamDLQ:       {jetstream.LimitsPolicy, 30 * 24 * time.Hour, -1},
	}
	for name, w := range want {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		c := s.CachedInfo().Config
		if c.Retention != w.retention || c.MaxAge != w.maxAge || c.MaxMsgsPerSubject != w.perSubject ||
			c.Storage != jetstream.FileStorage || c.Duplicates < 30*time.Minute || c.Replicas != 1 {
			t.Errorf("stream %s: retention=%s age=%s per-subject=%d storage=%s dup=%s replicas=%d", name,
				c.Retention, c.MaxAge, c.MaxMsgsPerSubject, c.Storage, c.Duplicates, c.Replicas)
		}
	}
	kv, err := js.KeyValue(ctx, bus.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != bus.DefaultLeaseTTL || st.LimitMarkerTTL() <= 0 {
		t.Errorf("leases: ttl=%s limit-marker-ttl=%s", st.TTL(), st.LimitMarkerTTL())
	}
	for _, b := range []string{bus.BucketOwned, bus.BucketOps, bus.BucketStatus, bus.BucketDeliveries} {
		if _, err := js.KeyValue(ctx, b); err != nil {
			t.Errorf("bucket %s: %v", b, err)
		}
	}
	for _, o := range []string{bus.ObjectTrees, bus.ObjectBlobs} {
		if _, err := js.ObjectStore(ctx, o); err != nil {
			t.Errorf("object store %s: %v", o, err)
		}
	}
}

func TestProvisionUpdatesChangedSettingInPlace(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subj, _ := bus.StatusSubject("lab")
	if _, err := env.bus.Publish(ctx, subj, wrapperspb.String("kept")); err != nil {
		t.Fatal(err)
	}
	before := streamCreated(t, env.bus)
	res, err := env.bus.Provision(ctx, bus.ProvisionConfig{DuplicateWindow: time.Hour, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		wantAct := bus.Unchanged
		if r.Kind == "stream" || r.Name == bus.BucketLeases {
			wantAct = bus.Updated
		}
		if r.Action != wantAct {
			t.Errorf("%s %s: %s, want %s", r.Kind, r.Name, r.Action, wantAct)
		}
	}
	after := streamCreated(t, env.bus)
	if len(after) != len(before) {
		t.Fatalf("%d streams after the update, %d before", len(after), len(before))
	}
	s, err := env.bus.JetStream().Stream(ctx, bus.StreamStatus)
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.Config.Duplicates != time.Hour || info.State.Msgs != 1 {
		t.Errorf("status stream: duplicates=%s msgs=%d, want 1h and the message kept", info.Config.Duplicates, info.State.Msgs)
	}
	if !strings.HasPrefix(after[bus.StreamStatus], strings.Fields(before[bus.StreamStatus])[0]) {
		t.Errorf("status stream was recreated: %s → %s", before[bus.StreamStatus], after[bus.StreamStatus])
	}
	kv, _ := env.bus.JetStream().KeyValue(ctx, bus.BucketLeases)
	st, _ := kv.Status(ctx)
	if st.TTL() != time.Minute {
		t.Errorf("lease ttl = %s, want 1m", st.TTL())
	}
}

func TestPublishSameMsgIDIsStoredOnce(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	a1, err := env.bus.Publish(ctx, bus.SubjectRepoChanged, wrapperspb.String("c1"), bus.WithMsgID("repo@abc"))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := env.bus.Publish(ctx, bus.SubjectRepoChanged, wrapperspb.String("c1"), bus.WithMsgID("repo@abc"))
	if err != nil {
		t.Fatal(err)
	}
	if a1.Duplicate || !a2.Duplicate || a1.Sequence != a2.Sequence {
		t.Fatalf("acks %+v and %+v: want the second a duplicate of the first", a1, a2)
	}
	var n int
	err = env.bus.ReadStream(ctx, bus.StreamRepo, bus.SubjectRepoChanged, 0, func(*bus.Message) error { n++; return nil })
	if err != nil || n != 1 {
		t.Fatalf("stream holds %d messages (%v), want 1", n, err)
	}
}

// consumeInto runs Consume in the background and returns a channel of the handler's deliveries.
func consumeInto(t *testing.T, b *bus.Bus, stream, durable string, opts bus.ConsumeOptions, h bus.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Consume(ctx, stream, durable, opts, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consume: %v", err)
		}
	})
}

func opConsumer(t *testing.T, b *bus.Bus, cfg bus.ConsumerConfig) (subject, durable string) {
	t.Helper()
	subject, _ = bus.OpSubject("lab", "pve1")
	durable, _ = bus.ExecutorConsumer("lab", "pve1")
	cfg.Stream, cfg.Durable, cfg.Filter = bus.StreamOps, durable, subject
	if err := b.EnsureConsumer(testContext(t), cfg); err != nil {
		t.Fatal(err)
	}
	return subject, durable
}

func TestUnacknowledgedMessageIsRedeliveredAfterAckWait(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subject, durable := opConsumer(t, env.bus, bus.ConsumerConfig{AckWait: 300 * time.Millisecond})
	if _, err := env.bus.Publish(ctx, subject, wrapperspb.String("op-1")); err != nil {
		t.Fatal(err)
	}
	// A replica takes the message and dies without acknowledging it.
	cons, err := env.bus.JetStream().Consumer(ctx, bus.StreamOps, durable)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(drain(batch)); n != 1 {
		t.Fatalf("first fetch got %d messages, want 1", n)
	}
	got := make(chan uint64, 4)
	consumeInto(t, env.bus, bus.StreamOps, durable, bus.ConsumeOptions{MaxWait: time.Second}, func(ctx context.Context, d *bus.Delivery) error {
		var v wrapperspb.StringValue
		if err := d.Decode(ctx, &v); err != nil {
			return bus.Terminal(err)
		}
		got <- d.NumDelivered()
		return nil
	})
	select {
	case n := <-got:
		if n != 2 {
			t.Fatalf("redelivery has NumDelivered %d, want 2", n)
		}
	case <-ctx.Done():
		t.Fatal("message was not redelivered")
	}
	testkit.Eventually(t, 5*time.Second, "the work queue to be empty", func() bool { return streamMsgs(t, env.bus, bus.StreamOps) == 0 })
}

func drain(b jetstream.MessageBatch) []jetstream.Msg {
	var out []jetstream.Msg
	for m := range b.Messages() {
		out = append(out, m)
	}
	return out
}

func streamMsgs(t *testing.T, b *bus.Bus, stream string) uint64 {
	t.Helper()
	s, err := b.JetStream().Stream(testContext(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

func TestTermStopsRedelivery(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subject, durable := opConsumer(t, env.bus, bus.ConsumerConfig{AckWait: 200 * time.Millisecond})
	var calls atomic.Int32
	consumeInto(t, env.bus, bus.StreamOps, durable, bus.ConsumeOptions{MaxWait: 500 * time.Millisecond}, func(ctx context.Context, d *bus.Delivery) error {
		calls.Add(1)
		return bus.Terminal(errors.New("parameter verification failed"))
	})
	if _, err := env.bus.Publish(ctx, subject, wrapperspb.String("bad op")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the terminated message to leave the work queue", func() bool {
		return calls.Load() == 1 && streamMsgs(t, env.bus, bus.StreamOps) == 0
	})
	// Several ack waits later, still exactly one delivery.
	cons, _ := env.bus.JetStream().Consumer(ctx, bus.StreamOps, durable)
	testkit.Eventually(t, 5*time.Second, "the consumer to have nothing pending", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumRedelivered == 0 && info.NumPending == 0
	})
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times, want 1", n)
	}
}

func TestNakWithDelayRedeliversAfterTheDelay(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subject, durable := opConsumer(t, env.bus, bus.ConsumerConfig{AckWait: 10 * time.Second})
	const delay = 400 * time.Millisecond
	times := make(chan time.Time, 4)
	consumeInto(t, env.bus, bus.StreamOps, durable, bus.ConsumeOptions{MaxWait: 500 * time.Millisecond}, func(ctx context.Context, d *bus.Delivery) error {
		times <- time.Now()
		if d.NumDelivered() == 1 {
			return d.NakWithDelay(delay)
		}
		return nil
	})
	if _, err := env.bus.Publish(ctx, subject, wrapperspb.String("locked guest")); err != nil {
		t.Fatal(err)
	}
	first, second := <-times, <-times
	if gap := second.Sub(first); gap < delay {
		t.Fatalf("redelivered after %s, want at least %s", gap, delay)
	}
	testkit.Eventually(t, 5*time.Second, "the work queue to be empty", func() bool { return streamMsgs(t, env.bus, bus.StreamOps) == 0 })
}

func TestConsumeFetchesNoMoreThanItCanWorkOn(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subject, durable := opConsumer(t, env.bus, bus.ConsumerConfig{AckWait: 10 * time.Second})
	for i := range 10 {
		if _, err := env.bus.Publish(ctx, subject, wrapperspb.String(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	var running, peak atomic.Int32
	consumeInto(t, env.bus, bus.StreamOps, durable, bus.ConsumeOptions{Concurrency: 3, MaxWait: 500 * time.Millisecond}, func(ctx context.Context, d *bus.Delivery) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		return nil
	})
	cons, _ := env.bus.JetStream().Consumer(ctx, bus.StreamOps, durable)
	testkit.Eventually(t, 5*time.Second, "three handlers to run", func() bool { return running.Load() == 3 })
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 3 {
		t.Fatalf("%d messages delivered while 3 handlers work, want 3 (no prefetch)", info.NumAckPending)
	}
	close(release)
	testkit.Eventually(t, 5*time.Second, "every message to be handled", func() bool { return streamMsgs(t, env.bus, bus.StreamOps) == 0 })
	if p := peak.Load(); p != 3 {
		t.Fatalf("peak concurrency %d, want 3", p)
	}
}

func TestDeadLetterCopiesAndRemovesFromWorkQueue(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subject, durable := opConsumer(t, env.bus, bus.ConsumerConfig{AckWait: 10 * time.Second, MaxDeliver: 2})
	dlq, _ := bus.DLQSubject("lab", "pve1")
	consumeInto(t, env.bus, bus.StreamOps, durable, bus.ConsumeOptions{MaxWait: 500 * time.Millisecond}, func(ctx context.Context, d *bus.Delivery) error {
		if !d.LastDelivery() {
			return d.NakWithDelay(0)
		}
		return d.DeadLetter(ctx, dlq, "deliveries exhausted")
	})
	if _, err := env.bus.Publish(ctx, subject, wrapperspb.String("doomed"), bus.WithMsgID("run1.op1")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the message to move to the DLQ", func() bool {
		return streamMsgs(t, env.bus, bus.StreamOps) == 0 && streamMsgs(t, env.bus, bus.StreamDLQ) == 1
	})
	m, err := env.bus.LastMessage(ctx, bus.StreamDLQ, dlq)
	if err != nil {
		t.Fatal(err)
	}
	var v wrapperspb.StringValue
	if err := m.Decode(ctx, &v); err != nil || v.GetValue() != "doomed" {
		t.Fatalf("dead letter = %q, %v", v.GetValue(), err)
	}
	if r := m.Header.Get(bus.HeaderDeadLetterReason); r != "deliveries exhausted" {
		t.Fatalf("reason header = %q", r)
	}
	if r := m.Header.Get(bus.HeaderRefused); r != "" {
		t.Fatalf("a message that ran out of deliveries is marked refused (%q)", r)
	}
}

func TestLeaseCannotBeTakenTwiceAndExpires(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{LeaseTTL: time.Second})
	ctx := testContext(t)
	events, err := env.bus.WatchLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := env.bus.AcquireLease(ctx, "lab", "planner-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.bus.AcquireLease(ctx, "lab", "planner-b"); !errors.Is(err, bus.ErrLeaseHeld) || !strings.Contains(err.Error(), "planner-a") {
		t.Fatalf("second acquire: %v, want ErrLeaseHeld naming planner-a", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	// Stop renewing: the lease expires after its TTL and the watcher sees it go.
	sawHeld, sawExpiry := false, false
	for !sawExpiry {
		select {
		case ev := <-events:
			if ev.Key == "lab" && ev.Held && ev.Holder == "planner-a" {
				sawHeld = true
			}
			if ev.Key == "lab" && !ev.Held && sawHeld {
				sawExpiry = true
			}
		case <-ctx.Done():
			t.Fatal("no expiry observed")
		}
	}
	if _, held, err := env.bus.LeaseHolder(ctx, "lab"); err != nil || held {
		t.Fatalf("after expiry: held=%v err=%v", held, err)
	}
	if err := l.Renew(ctx); !errors.Is(err, bus.ErrLeaseLost) {
		t.Fatalf("renewing an expired lease: %v, want ErrLeaseLost", err)
	}
	l2, err := env.bus.AcquireLease(ctx, "lab", "planner-b")
	if err != nil {
		t.Fatalf("taking the expired lease: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := env.bus.AcquireLease(ctx, "lab", "planner-c"); err != nil {
		t.Fatalf("taking a released lease: %v", err)
	}
}

func TestKVCompareAndSet(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	key, _ := bus.OwnedKey("lab", 101)
	rev, err := env.bus.CreateProto(ctx, bus.BucketOwned, key, wrapperspb.String("uuid=a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.bus.CreateProto(ctx, bus.BucketOwned, key, wrapperspb.String("uuid=b")); !errors.Is(err, bus.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	if _, err := env.bus.UpdateProto(ctx, bus.BucketOwned, key, wrapperspb.String("uuid=c"), rev+10); !errors.Is(err, bus.ErrRevisionMismatch) {
		t.Fatalf("update at a stale revision: %v, want ErrRevisionMismatch", err)
	}
	rev2, err := env.bus.UpdateProto(ctx, bus.BucketOwned, key, wrapperspb.String("uuid=d"), rev)
	if err != nil {
		t.Fatal(err)
	}
	var v wrapperspb.StringValue
	got, err := env.bus.GetProto(ctx, bus.BucketOwned, key, &v)
	if err != nil || got != rev2 || v.GetValue() != "uuid=d" {
		t.Fatalf("get = %q rev %d (%v), want uuid=d rev %d", v.GetValue(), got, err, rev2)
	}
	if err := env.bus.DeleteKey(ctx, bus.BucketOwned, key); err != nil {
		t.Fatal(err)
	}
	if _, err := env.bus.GetProto(ctx, bus.BucketOwned, key, &v); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}
}

func TestRestartWithSameDataDirectoryKeepsMessages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := testContext(t)
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: dir, SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Provision(ctx, bus.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	subjects := map[string]string{}
	add := func(s string, err error) {
		if err != nil {
			t.Fatal(err)
		}
		subjects[s] = ""
	}
	add(bus.SubjectRepoChanged, nil)
	add(bus.PlanSubject("lab", bus.PlanPlanned))
	add(bus.OpSubject("lab", "pve1"))
	add(bus.ResultSubject("lab", "pve1"))
	add(bus.InventorySubject("lab", "pve1"))
	add(bus.GapSubject("lab"))
	add(bus.StatusSubject("lab"))
	add(bus.DLQSubject("lab", "pve1"))
	for s := range subjects {
		if _, err := b.Publish(ctx, s, wrapperspb.String("on "+s)); err != nil {
			t.Fatal(err)
		}
	}
	key, _ := bus.OwnedKey("lab", 100)
	if _, err := b.PutProto(ctx, bus.BucketOwned, key, wrapperspb.String("uuid=x")); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	srv.Shutdown()

	srv2, err := bus.StartServer(ctx, bus.ServerConfig{Dir: dir, SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Shutdown)
	b2, err := srv2.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b2.Close() })
	for _, st := range []string{bus.StreamRepo, bus.StreamPlans, bus.StreamOps, bus.StreamResults, bus.StreamInventory, bus.StreamGaps, bus.StreamStatus, bus.StreamDLQ} {
		for s := range subjects {
			m, err := b2.LastMessage(ctx, st, s)
			if errors.Is(err, bus.ErrNotFound) {
				continue // another stream's subject
			}
			if err != nil {
				t.Fatalf("read %s on %s: %v", s, st, err)
			}
			var v wrapperspb.StringValue
			if err := m.Decode(ctx, &v); err != nil {
				t.Fatal(err)
			}
			subjects[s] = v.GetValue()
		}
	}
	for s, v := range subjects {
		if v != "on "+s {
			t.Errorf("%s after restart: %q", s, v)
		}
	}
	var v wrapperspb.StringValue
	if _, err := b2.GetProto(ctx, bus.BucketOwned, key, &v); err != nil || v.GetValue() != "uuid=x" {
		t.Errorf("owned record after restart: %q, %v", v.GetValue(), err)
	}
}

func TestDecodeRefusesWrongType(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subj, _ := bus.StatusSubject("lab")
	if _, err := env.bus.Publish(ctx, subj, wrapperspb.String("a status")); err != nil {
		t.Fatal(err)
	}
	m, err := env.bus.LastMessage(ctx, bus.StreamStatus, subj)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Type(); got != "google.protobuf.StringValue" {
		t.Fatalf("Proxops-Type = %q", got)
	}
	if ct := m.Header.Get("Content-Type"); ct != "application/protobuf" {
		t.Fatalf("Content-Type = %q", ct)
	}
	var wrong wrapperspb.Int64Value
	err = m.Decode(ctx, &wrong)
	if !errors.Is(err, bus.ErrWrongType) || !strings.Contains(err.Error(), "google.protobuf.StringValue") ||
		!strings.Contains(err.Error(), "google.protobuf.Int64Value") {
		t.Fatalf("decode into the wrong type: %v", err)
	}
}

func TestExpectedLastSubjectSequenceRejectsRacingWriter(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	planned, _ := bus.PlanSubject("lab", bus.PlanPlanned)
	finished, _ := bus.PlanSubject("lab", bus.PlanFinished)
	filter, _ := bus.PlanFilter("lab")
	// Both planners read the cluster's last plan event: none yet.
	first, err := env.bus.Publish(ctx, planned, wrapperspb.String("run-a"), bus.ExpectLastSequenceOn(filter, 0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = env.bus.Publish(ctx, planned, wrapperspb.String("run-b"), bus.ExpectLastSequenceOn(filter, 0))
	if !errors.Is(err, bus.ErrWrongLastSequence) {
		t.Fatalf("racing writer: %v, want ErrWrongLastSequence", err)
	}
	// The check spans the cluster's plan subjects: a stale writer of another event is refused too.
	if _, err := env.bus.Publish(ctx, finished, wrapperspb.String("run-b"), bus.ExpectLastSequenceOn(filter, 0)); !errors.Is(err, bus.ErrWrongLastSequence) {
		t.Fatalf("stale writer on another event: %v, want ErrWrongLastSequence", err)
	}
	if _, err := env.bus.Publish(ctx, finished, wrapperspb.String("run-a"), bus.ExpectLastSequenceOn(filter, first.Sequence)); err != nil {
		t.Fatalf("the lease holder's next event: %v", err)
	}
	// The per-subject form.
	if _, err := env.bus.Publish(ctx, planned, wrapperspb.String("x"), bus.ExpectLastSubjectSequence(first.Sequence+100)); !errors.Is(err, bus.ErrWrongLastSequence) {
		t.Fatalf("per-subject check: %v", err)
	}
}

func bigValue(t testing.TB, size int) *wrapperspb.BytesValue {
	t.Helper()
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	return wrapperspb.Bytes(data)
}

func TestLargeMessageRoundTripsThroughPublishAndConsume(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subject, durable := opConsumer(t, env.bus, bus.ConsumerConfig{})
	big := bigValue(t, 3<<20)
	if _, err := env.bus.Publish(ctx, subject, big); err != nil {
		t.Fatal(err)
	}
	got := make(chan *wrapperspb.BytesValue, 1)
	consumeInto(t, env.bus, bus.StreamOps, durable, bus.ConsumeOptions{MaxWait: time.Second}, func(ctx context.Context, d *bus.Delivery) error {
		if d.Header().Get(bus.HeaderBlob) == "" {
			return bus.Terminal(errors.New("a 3 MiB message travelled inline"))
		}
		var v wrapperspb.BytesValue
		if err := d.Decode(ctx, &v); err != nil {
			return bus.Terminal(err)
		}
		got <- &v
		return nil
	})
	select {
	case v := <-got:
		if !bytes.Equal(v.GetValue(), big.GetValue()) {
			t.Fatal("large message body differs after the round trip")
		}
	case <-ctx.Done():
		t.Fatal("large message not consumed")
	}
}

func TestLargeMessageRoundTripsThroughRequestReply(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subject, _ := bus.ObserveSubject("lab", "pve1")
	big := bigValue(t, 3<<20)
	svc, err := env.bus.Serve(ctx, subject, bus.QueueExecutors, bus.ServeOptions{}, func(ctx context.Context, r *bus.Request) (proto.Message, error) {
		var req wrapperspb.BytesValue
		if err := r.Decode(ctx, &req); err != nil {
			return nil, err
		}
		// Echo the large body back, reversed, so both directions travel through blobs.
		out := bytes.Clone(req.GetValue())
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		return wrapperspb.Bytes(out), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Stop)
	var resp wrapperspb.BytesValue
	if err := env.bus.Request(ctx, subject, big, &resp); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(big.GetValue())
	for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
		want[i], want[j] = want[j], want[i]
	}
	if !bytes.Equal(resp.GetValue(), want) {
		t.Fatal("reply body differs")
	}
	// Request/reply blobs are read once and then dropped.
	obs, err := env.bus.JetStream().ObjectStore(ctx, bus.ObjectBlobs)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "request and reply blobs to be dropped", func() bool {
		list, err := obs.List(ctx)
		return errors.Is(err, jetstream.ErrNoObjectsFound) || (err == nil && len(list) == 0)
	})
}

func TestRequestSeesHandlerErrorAndMissingServer(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subject, _ := bus.ObserveSubject("lab", "pve1")
	svc, err := env.bus.Serve(ctx, subject, bus.QueueExecutors, bus.ServeOptions{}, func(ctx context.Context, r *bus.Request) (proto.Message, error) {
		var req wrapperspb.StringValue
		if err := r.Decode(ctx, &req); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("node %s unreachable", req.GetValue())
	})
	if err != nil {
		t.Fatal(err)
	}
	var resp wrapperspb.StringValue
	err = env.bus.Request(ctx, subject, wrapperspb.String("pve1"), &resp)
	var re *bus.RemoteError
	if !errors.As(err, &re) || re.Message != "node pve1 unreachable" {
		t.Fatalf("request: %v, want the handler's error", err)
	}
	err = env.bus.Request(ctx, subject, wrapperspb.Int32(1), &resp)
	if !errors.As(err, &re) || !strings.Contains(re.Message, "unexpected message type") {
		t.Fatalf("request of the wrong type: %v", err)
	}
	svc.Stop()
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := env.bus.Request(short, subject, wrapperspb.String("pve1"), &resp); err == nil {
		t.Fatal("request without a server succeeded")
	}
}

func TestReadStreamFromSequenceAndLastPerSubject(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	var seqs []uint64
	for i := range 5 {
		node := []string{"pve1", "pve2"}[i%2]
		s, _ := bus.InventorySubject("lab", node)
		ack, err := env.bus.Publish(ctx, s, wrapperspb.String(fmt.Sprintf("%s#%d", node, i)))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	last, err := env.bus.LastPerSubject(ctx, bus.StreamInventory, bus.FilterInventory)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var gotSeqs []uint64
	for _, m := range last {
		var v wrapperspb.StringValue
		if err := m.Decode(ctx, &v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v.GetValue())
		gotSeqs = append(gotSeqs, m.Sequence)
	}
	if diff := cmp.Diff([]string{"pve2#3", "pve1#4"}, got); diff != "" {
		t.Fatalf("last per subject (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(seqs[3:], gotSeqs); diff != "" {
		t.Fatalf("last per subject: stream sequences (-want +got):\n%s", diff)
	}
	// A limits stream keeps history: read plans from a sequence.
	subj, _ := bus.PlanSubject("lab", bus.PlanPlanned)
	var planSeqs []uint64
	for i := range 4 {
		ack, err := env.bus.Publish(ctx, subj, wrapperspb.String(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		planSeqs = append(planSeqs, ack.Sequence)
	}
	var read []uint64
	err = env.bus.ReadStream(ctx, bus.StreamPlans, bus.FilterPlans, planSeqs[2], func(m *bus.Message) error {
		read = append(read, m.Sequence)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(planSeqs[2:], read); diff != "" {
		t.Fatalf("read from sequence (-want +got):\n%s", diff)
	}
	// An empty selection returns at once.
	empty, err := env.bus.LastPerSubject(ctx, bus.StreamGaps, bus.FilterGaps)
	if err != nil || len(empty) != 0 {
		t.Fatalf("empty stream: %d messages, %v", len(empty), err)
	}
}

func TestObjectIsWrittenOnceByName(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	wrote, err := env.bus.PutObjectIfAbsent(ctx, bus.ObjectTrees, "tree-abc", wrapperspb.String("first"))
	if err != nil || !wrote {
		t.Fatalf("first put: wrote=%v err=%v", wrote, err)
	}
	wrote, err = env.bus.PutObjectIfAbsent(ctx, bus.ObjectTrees, "tree-abc", wrapperspb.String("second"))
	if err != nil || wrote {
		t.Fatalf("second put: wrote=%v err=%v", wrote, err)
	}
	var v wrapperspb.StringValue
	if err := env.bus.GetObject(ctx, bus.ObjectTrees, "tree-abc", &v); err != nil || v.GetValue() != "first" {
		t.Fatalf("get = %q, %v", v.GetValue(), err)
	}
	var wrong wrapperspb.BytesValue
	if err := env.bus.GetObject(ctx, bus.ObjectTrees, "tree-abc", &wrong); !errors.Is(err, bus.ErrWrongType) {
		t.Fatalf("get into the wrong type: %v", err)
	}
	if err := env.bus.GetObject(ctx, bus.ObjectTrees, "nope", &v); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("get a missing object: %v", err)
	}
}

func TestWorkQueueRefusesSecondOverlappingConsumer(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subject, _ := opConsumer(t, env.bus, bus.ConsumerConfig{})
	err := env.bus.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamOps, Durable: "audit", Filter: subject})
	if err == nil {
		t.Fatal("a second consumer on a node's work queue was accepted")
	}
	// Ensuring the node's own consumer again is a no-op.
	if _, durable := opConsumer(t, env.bus, bus.ConsumerConfig{}); durable != "exec_lab_pve1" {
		t.Fatalf("durable = %q", durable)
	}
}

func TestListenerWritesClientInfo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := startEnv(t, bus.ServerConfig{Dir: dir, Listen: true}, bus.ProvisionConfig{})
	ci, err := bus.ReadClientInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ci.URL, "nats://127.0.0.1:") || ci.Password == "" {
		t.Fatalf("client info = %+v", ci)
	}
	ctx := testContext(t)
	b, err := bus.Connect(ctx, bus.ConnectConfig{URL: ci.URL, User: ci.User, Password: ci.Password}, bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	if _, err := b.Publish(ctx, bus.SubjectRepoChanged, wrapperspb.String("over tcp")); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Connect(ctx, bus.ConnectConfig{URL: ci.URL, User: ci.User, Password: "wrong"}, bus.Options{}); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	_ = env
}

func TestConsumeStopsGracefullyAndSettlesHandlersInFlight(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subject, durable := opConsumer(t, env.bus, bus.ConsumerConfig{AckWait: 10 * time.Second})
	if _, err := env.bus.Publish(ctx, subject, wrapperspb.String("long task")); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- env.bus.Consume(cctx, bus.StreamOps, durable, bus.ConsumeOptions{MaxWait: 500 * time.Millisecond}, func(ctx context.Context, d *bus.Delivery) error {
			close(started)
			if err := d.InProgress(); err != nil {
				return err
			}
			<-release
			return nil
		})
	}()
	<-started
	stop()
	select {
	case err := <-done:
		t.Fatalf("Consume returned (%v) while a handler was still running", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, env.bus, bus.StreamOps); n != 0 {
		t.Fatalf("%d messages left: the finished handler's delivery was not acknowledged", n)
	}
}

// FuzzSubjectBuilders: whatever a builder accepts is one token per name, never a wildcard.
func FuzzSubjectBuilders(f *testing.F) {
	for _, s := range [][2]string{{"lab", "pve1"}, {"a-b", "c-d"}, {"lab.x", "n"}, {"lab", "*"}, {"lab", ">"}, {"", ""}, {"lab", "pve 1"}, {"LAB", "n"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, cluster, node string) {
		subject, err := bus.OpSubject(cluster, node)
		if err != nil {
			return
		}
		tokens := strings.Split(subject, ".")
		if len(tokens) != 5 || tokens[3] != cluster || tokens[4] != node {
			t.Fatalf("OpSubject(%q, %q) = %q", cluster, node, subject)
		}
		if strings.ContainsAny(cluster+node, "*> \t\r\n_") {
			t.Fatalf("accepted %q/%q", cluster, node)
		}
		durable, err := bus.ExecutorConsumer(cluster, node)
		if err != nil || strings.Count(durable, "_") != 2 || strings.Contains(durable, ".") {
			t.Fatalf("ExecutorConsumer(%q, %q) = %q, %v", cluster, node, durable, err)
		}
	})
}

func TestLastSequenceSpansAWildcardFilter(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	planned, _ := bus.PlanSubject("lab", bus.PlanPlanned)
	finished, _ := bus.PlanSubject("lab", bus.PlanFinished)
	other, _ := bus.PlanSubject("other", bus.PlanPlanned)
	filter, _ := bus.PlanFilter("lab")
	if seq, err := env.bus.LastSequence(ctx, bus.StreamPlans, filter); err != nil || seq != 0 {
		t.Fatalf("last sequence of an empty selection: %d, %v", seq, err)
	}
	publish := func(subject, v string) uint64 {
		t.Helper()
		ack, err := env.bus.Publish(ctx, subject, wrapperspb.String(v))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	publish(planned, "a")
	want := publish(finished, "b")
	last := publish(other, "c")
	// The other cluster's later message does not count.
	if seq, err := env.bus.LastSequence(ctx, bus.StreamPlans, filter); err != nil || seq != want {
		t.Fatalf("last sequence: %d, %v; want %d (stream's last is %d)", seq, err, want, last)
	}
}

func TestEntriesListsTheKeysOfOneClusterInOnePass(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	for _, k := range []string{"lab.102", "lab.101", "other.101", "lab.103"} {
		if _, err := env.bus.PutBytes(ctx, bus.BucketOwned, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.bus.DeleteKey(ctx, bus.BucketOwned, "lab.103"); err != nil {
		t.Fatal(err)
	}
	got, err := env.bus.Entries(ctx, bus.BucketOwned, "lab.*")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range got {
		keys = append(keys, e.Key+"="+string(e.Value))
	}
	if diff := cmp.Diff([]string{"lab.101=lab.101", "lab.102=lab.102"}, keys); diff != "" {
		t.Fatalf("entries (-want +got):\n%s", diff)
	}
	none, err := env.bus.Entries(ctx, bus.BucketOwned, "nothing.*")
	if err != nil || len(none) != 0 {
		t.Fatalf("empty selection: %v, %v", none, err)
	}
}
