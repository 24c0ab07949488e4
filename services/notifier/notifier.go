// Package notifier tells people what ProxOps did: it follows the plan events and the adopter's gap reports
// through durable consumers and sends a notification for a failed run, a rejected plan (with its
// diagnostics), a plan held for confirmation, drift found and corrected, a new security warning (a live
// setting that weakens a guest's isolation) and a cluster that recovered, to the
// providers of the notifications section of proxops.yaml (a signed generic webhook, Slack, Mattermost,
// Matrix, ntfy, Gotify, Discord, Microsoft Teams workflows, e-mail over SMTP, Alertmanager).
//
// Delivery is at least once: a plan event is acknowledged only once every provider it concerns took it
// (or refused it for good, or ran out of attempts), so a notifier that stops in the middle of a delivery
// sends it again when it starts, with the same delivery id for receivers to drop duplicates. Failed sends
// are retried with a growing delay. The notifier's own memory (whether a cluster's last run failed, the
// warnings already told) lives in the KV bucket proxops_notify.
package notifier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/defaults"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
)

// Defaults.
const (
	DefaultAttempts   = 8
	DefaultBackoff    = 5 * time.Second
	DefaultMaxBackoff = 10 * time.Minute
	DefaultTimeout    = 15 * time.Second
)

// Config is what the notifier runs with.
type Config struct {
	Bus *bus.Bus
	// Notifications is the notifications section of proxops.yaml (checked already).
	Notifications repo.NotificationsConfig
	// Secrets is the decrypted notifications.secrets-file (nil when no provider names a secret).
	Secrets *secrets.Store
	// Attempts bounds the deliveries of one plan event while a provider keeps failing (default 8); Backoff
	// is the delay before the first redelivery, doubled each time up to MaxBackoff.
	Attempts   int
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Timeout bounds one send (default 15 s).
	Timeout time.Duration
	// HTTPClient sends the HTTP notifications (default: a client without proxy from the environment).
	HTTPClient *http.Client
	Registry   prometheus.Registerer
	Logger     *slog.Logger
	// Now is the clock of the rate limits (default time.Now).
	Now func() time.Time
}

// providers resolves the configured providers' secrets (names of the secrets file's secrets: block): an error names the provider and the secret.
func providers(cfg repo.NotificationsConfig, store *secrets.Store) ([]*provider, error) {
	var out []*provider
	var errs []error
	for _, pc := range cfg.Providers {
		p := &provider{cfg: pc, url: pc.URL}
		if pc.URLRef != "" {
			v, err := store.Secret(pc.URLRef)
			if err != nil {
				errs = append(errs, fmt.Errorf("provider %s: url-ref: %w", pc.Name, err))
				continue
			}
			p.url = v.Reveal()
		}
		if pc.TokenRef != "" {
			v, err := store.Secret(pc.TokenRef)
			if err != nil {
				errs = append(errs, fmt.Errorf("provider %s: token-ref: %w", pc.Name, err))
				continue
			}
			p.token = v
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// notifier is a running notifier.
type notifier struct {
	cfg       Config
	providers []*provider
	log       *slog.Logger
	client    *http.Client
	metrics   *metrics

	mu   sync.Mutex
	sent map[string]bool        // delivery id + provider already taken, in this process
	rate map[string][]time.Time // per provider, the sends of the last minute

	// healthMu orders the read, change and publication of a cluster's delivery health between the two
	// consumers.
	healthMu sync.Mutex
}

// Run follows the plan events until ctx is cancelled.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Bus == nil {
		return errors.New("notifier: no bus")
	}
	defaults.Logger(&cfg.Logger)
	defaults.Positive(&cfg.Attempts, DefaultAttempts)
	defaults.Positive(&cfg.Backoff, DefaultBackoff)
	defaults.Positive(&cfg.MaxBackoff, DefaultMaxBackoff)
	defaults.Positive(&cfg.Timeout, DefaultTimeout)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	ps, err := providers(cfg.Notifications, cfg.Secrets)
	if err != nil {
		return fmt.Errorf("notifier: %w", err)
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return fmt.Errorf("notifier: %w", err)
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Transport: &http.Transport{Proxy: nil, ResponseHeaderTimeout: cfg.Timeout}}
	}
	n := &notifier{cfg: cfg, providers: ps, log: cfg.Logger, client: client, metrics: m, sent: map[string]bool{},
		rate: map[string][]time.Time{}}
	if err := cfg.Bus.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamPlans, Durable: bus.ConsumerNotifierPlans,
		Filter: bus.FilterPlans, AckWait: 2*cfg.Timeout + 30*time.Second,
		// One event at a time, in order: a recovery is told after the failure it ends.
		MaxAckPending: 1, Description: "the notifier: plan events to notify"}); err != nil {
		return fmt.Errorf("notifier: %w", err)
	}
	if err := cfg.Bus.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamGaps, Durable: bus.ConsumerNotifierGaps,
		Filter: bus.FilterGaps, AckWait: 2*cfg.Timeout + 30*time.Second,
		MaxAckPending: 1, Description: "the notifier: security warnings of the gap reports"}); err != nil {
		return fmt.Errorf("notifier: %w", err)
	}
	names := make([]string, 0, len(ps))
	for _, p := range ps {
		names = append(names, p.cfg.Name+"("+p.cfg.Type+")")
	}
	n.log.Info("notifier following plan events and gap reports", "providers", strings.Join(names, ", "))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gaps := make(chan error, 1)
	go func() {
		err := cfg.Bus.Consume(ctx, bus.StreamGaps, bus.ConsumerNotifierGaps, bus.ConsumeOptions{RetryDelay: cfg.Backoff}, n.handleGaps)
		cancel()
		gaps <- err
	}()
	err = cfg.Bus.Consume(ctx, bus.StreamPlans, bus.ConsumerNotifierPlans, bus.ConsumeOptions{RetryDelay: cfg.Backoff}, n.handle)
	cancel()
	return errors.Join(err, <-gaps)
}

// handle notifies one plan event.
func (n *notifier) handle(ctx context.Context, d *bus.Delivery) error {
	e, err := decodePlanEvent(ctx, d)
	if err != nil {
		n.log.Error("plan event cannot be decoded; not notified", "subject", d.Subject(), "stream_seq", d.StreamSequence(), "err", err)
		return bus.Terminal(err)
	}
	cluster := clusterOf(e)
	if cluster == "" {
		return nil
	}
	before, err := n.loadState(ctx, cluster, d.StreamSequence())
	if err != nil {
		return err
	}
	id := d.Header().Get("Nats-Msg-Id")
	if id == "" {
		id = fmt.Sprintf("%s-%d", bus.StreamPlans, d.StreamSequence())
	}
	notes, after := fold(before, e, id, d.Timestamp(), n.statusURL)
	if before.Seq < d.StreamSequence() || before.Seq == 0 {
		if err := n.storeState(ctx, cluster, d.StreamSequence(), before, after); err != nil {
			return err
		}
	}
	return n.tell(ctx, d, cluster, notes)
}

// tell delivers the notifications of one message to every provider that wants them. When a provider
// failed, the message is asked for again after a growing delay (the providers that took it are not sent
// it again), until the attempts run out.
func (n *notifier) tell(ctx context.Context, d *bus.Delivery, cluster string, notes []Notification) error {
	failed := false
	for _, note := range notes {
		for _, p := range n.providers {
			if !n.wants(p, note) {
				continue
			}
			if err := n.deliver(ctx, d, p, note); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				failed = true
			}
		}
	}
	if !failed {
		return nil
	}
	if int(d.NumDelivered()) >= n.cfg.Attempts {
		n.log.Error("notification given up after every attempt", "cluster", cluster, "subject", d.Subject(), "stream_seq", d.StreamSequence(), "attempts", d.NumDelivered())
		return nil
	}
	delay := n.cfg.Backoff << min(d.NumDelivered()-1, 20)
	delay = min(delay, n.cfg.MaxBackoff)
	if err := d.NakWithDelay(delay); err != nil {
		n.log.Warn("ask for redelivery", "err", err)
	}
	return nil
}

// deliver sends one notification to one provider, once per process for a delivery id.
func (n *notifier) deliver(ctx context.Context, d *bus.Delivery, p *provider, note Notification) error {
	key := note.ID + "\x00" + p.cfg.Name
	n.mu.Lock()
	done := n.sent[key]
	n.mu.Unlock()
	if done {
		return nil
	}
	if !n.allow(p) {
		n.metrics.result(p, note.Event, "rate_limited")
		n.log.Warn("notification dropped: rate limit reached", "provider", p.cfg.Name, "event", note.Event, "cluster", note.Cluster,
			"delivery_id", note.ID)
		n.markSent(key)
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	start := time.Now()
	_ = d.InProgress()
	err := p.send(sctx, n.client, note)
	n.metrics.duration.WithLabelValues(p.cfg.Name, p.cfg.Type).Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		n.metrics.result(p, note.Event, "sent")
		n.metrics.failing.WithLabelValues(p.cfg.Name).Set(0)
		n.log.Info("notification sent", "provider", p.cfg.Name, "event", note.Event, "cluster", note.Cluster, "delivery_id", note.ID)
		n.markSent(key)
		n.recordDelivery(ctx, p, note, nil)
		return nil
	case ctx.Err() != nil:
		return err
	case isPermanent(err):
		n.metrics.result(p, note.Event, "refused")
		n.metrics.failing.WithLabelValues(p.cfg.Name).Set(1)
		n.log.Error("notification refused; not retried", "provider", p.cfg.Name, "event", note.Event, "cluster", note.Cluster,
			"delivery_id", note.ID, "err", err)
		n.markSent(key)
		n.recordDelivery(ctx, p, note, fmt.Errorf("refused, not retried: %w", err))
		return nil
	default:
		n.metrics.result(p, note.Event, "failed")
		n.metrics.failing.WithLabelValues(p.cfg.Name).Set(1)
		n.log.Warn("notification failed; will retry", "provider", p.cfg.Name, "event", note.Event, "cluster", note.Cluster,
			"delivery_id", note.ID, "attempt", d.NumDelivered(), "err", err)
		n.recordDelivery(ctx, p, note, fmt.Errorf("attempt %d failed: %w", d.NumDelivered(), err))
		return err
	}
}

func (n *notifier) markSent(key string) {
	n.mu.Lock()
	n.sent[key] = true
	n.mu.Unlock()
}

// allow applies the provider's rate limit (messages per minute).
func (n *notifier) allow(p *provider) bool {
	if p.cfg.RateLimit <= 0 {
		return true
	}
	now := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	recent := slices.DeleteFunc(n.rate[p.cfg.Name], func(t time.Time) bool { return now.Sub(t) >= time.Minute })
	if len(recent) >= p.cfg.RateLimit {
		n.rate[p.cfg.Name] = recent
		return false
	}
	n.rate[p.cfg.Name] = append(recent, now)
	return true
}

// wants applies the provider's filters and the cluster's override.
func (n *notifier) wants(p *provider, note Notification) bool {
	if len(p.cfg.Clusters) > 0 && !slices.Contains(p.cfg.Clusters, note.Cluster) {
		return false
	}
	if len(p.cfg.Events) > 0 && !slices.Contains(p.cfg.Events, note.Event) {
		return false
	}
	if o := n.cfg.Notifications.Overrides[note.Cluster]; o != nil {
		if o.Mute {
			return false
		}
		if len(o.Providers) > 0 && !slices.Contains(o.Providers, p.cfg.Name) {
			return false
		}
		if len(o.Events) > 0 && !slices.Contains(o.Events, note.Event) {
			return false
		}
	}
	return true
}

func (n *notifier) statusURL(cluster string) string {
	base := n.cfg.Notifications.ExternalURL
	if base == "" {
		return ""
	}
	return strings.TrimSuffix(base, "/") + "/status/" + cluster
}

func clusterOf(e planEvent) string {
	switch {
	case e.rejected != nil:
		return e.rejected.Cluster
	case e.held != nil:
		return e.held.Cluster
	case e.finished != nil:
		return e.finished.Cluster
	}
	return ""
}

// loadState returns the cluster's state before the event at seq: the stored state, or, when the event was
// folded already (a redelivery), the state it was folded into.
func (n *notifier) loadState(ctx context.Context, cluster string, seq uint64) (clusterState, error) {
	var st clusterState
	if err := n.recall(ctx, cluster, &st); err != nil {
		return clusterState{}, fmt.Errorf("notifier state of %s: %w", cluster, err)
	}
	if st.Seq == seq && st.Prev != nil {
		prev := *st.Prev
		prev.Seq = seq - 1
		return prev, nil
	}
	return st, nil
}

func (n *notifier) storeState(ctx context.Context, cluster string, seq uint64, before, after clusterState) error {
	before.Prev = nil
	after.Seq, after.Prev = seq, &before
	if err := n.remember(ctx, cluster, after); err != nil {
		return fmt.Errorf("notifier state of %s: %w", cluster, err)
	}
	return nil
}

// recall reads the notifier's memory under key in proxops_notify into v, JSON; an absent key leaves v as it
// is.
func (n *notifier) recall(ctx context.Context, key string, v any) error {
	data, _, err := n.cfg.Bus.GetBytes(ctx, bus.BucketNotify, key)
	switch {
	case errors.Is(err, bus.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	return json.Unmarshal(data, v)
}

// remember stores v under key in proxops_notify, as JSON.
func (n *notifier) remember(ctx context.Context, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = n.cfg.Bus.PutBytes(ctx, bus.BucketNotify, key, data)
	return err
}
