// Package status is ProxOps' status service. It follows the repository, plan, result and gap streams, folds
// every event into one deterministic report per cluster (internal/report), keeps the latest in the
// proxops_status bucket, publishes every change on proxops.v1.status.<cluster>, updates the Prometheus
// collectors it can derive from events, and serves HTTP: /status, /status/<cluster>, /healthz, /readyz,
// /metrics and a page at / that a person can read at a glance.
//
// On start it loads the reports from the bucket and reads each stream from the lowest sequence any report
// has folded; every report skips what it has folded already, so a restart neither loses nor counts an event
// twice. An empty bucket rebuilds every report from the streams.
package status

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/defaults"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/httpserver"
	"github.com/proxops/proxops/internal/metrics"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/report"
	"github.com/proxops/proxops/internal/wire"
)

// Defaults.
const (
	// DefaultListen is the predecessor's address.
	DefaultListen = "127.0.0.1:9494"
	// DefaultStaleAfter is twice the default drift interval: a cluster whose planner has not answered for
	// longer is stale.
	DefaultStaleAfter = 10 * time.Minute
	// DefaultRefresh is how often the page reloads itself.
	DefaultRefresh = 10 * time.Second
)

// Config configures the status service.
type Config struct {
	// Bus is a connection to a provisioned NATS server (the caller owns it).
	Bus *bus.Bus
	// Logger receives the service's log (default: discarded).
	Logger *slog.Logger
	// Registry serves /metrics. The service registers its collectors on it unless Metrics is set.
	Registry *prometheus.Registry
	// Metrics are the status collectors, already registered (`proxops up` registers every service's
	// collectors on one registry).
	Metrics *metrics.Status
	// Listen is the HTTP address (default 127.0.0.1:9494); Listener, when set, is used instead.
	Listen   string
	Listener net.Listener
	// StaleAfter: /healthz reports stale when a cluster's planner has not answered for longer (default
	// 10 min, twice the default drift interval).
	StaleAfter time.Duration
	// Refresh is how often the page reloads itself (default 10 s).
	Refresh time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c Config) withDefaults() (Config, error) {
	if c.Bus == nil {
		return c, errors.New("status: no bus")
	}
	if c.Registry == nil {
		return c, errors.New("status: no metrics registry")
	}
	defaults.Logger(&c.Logger)
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	defaults.Positive(&c.StaleAfter, DefaultStaleAfter)
	defaults.Positive(&c.Refresh, DefaultRefresh)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// source is one stream the service follows.
type source struct {
	stream  report.Stream
	name    string
	filters []string
}

var sources = []source{
	{report.StreamRepo, bus.StreamRepo, []string{bus.SubjectRepoChanged, bus.SubjectRepoHealth}},
	{report.StreamPlans, bus.StreamPlans, []string{bus.FilterPlans, bus.FilterConfirms}},
	{report.StreamResults, bus.StreamResults, []string{bus.FilterResults}},
	{report.StreamGaps, bus.StreamGaps, []string{bus.FilterGaps}},
	{report.StreamDLQ, bus.StreamDLQ, []string{bus.FilterDLQ}},
	{report.StreamNotify, bus.StreamNotify, []string{bus.FilterNotify}},
}

// item is one stream message, decoded: an event to fold, or a repository's health (both nil for a message
// the service could not read).
type item struct {
	stream report.Stream
	seq    uint64
	event  *report.Event
	health *event.SourceHealth
}

// snapshot is what the HTTP handlers read: immutable once published.
type snapshot struct {
	ready     bool
	statuses  []report.ClusterStatus
	sources   []event.SourceHealth
	processed map[string]uint64
}

type service struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Status
	start   time.Time
	page    *template.Template
	snap    atomic.Pointer[snapshot]

	// Owned by the loop.
	fleet     *report.Fleet
	dirty     map[string]bool
	processed map[report.Stream]uint64
	target    map[report.Stream]uint64
	ready     bool
	// sources is each repository's latest SourceHealth, by repository and branch.
	sources map[[2]string]event.SourceHealth
	// parts is how many parts each cluster's stored report has (0: one value).
	parts map[string]int
}

// Run runs the status service until ctx is cancelled.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	m := cfg.Metrics
	if m == nil {
		if m, err = metrics.NewStatus(cfg.Registry); err != nil {
			return fmt.Errorf("status: %w", err)
		}
	}
	page, err := parsePage()
	if err != nil {
		return err
	}
	s := &service{cfg: cfg, log: cfg.Logger, metrics: m, start: cfg.Now(), page: page, dirty: map[string]bool{},
		processed: map[report.Stream]uint64{}, target: map[report.Stream]uint64{}, sources: map[[2]string]event.SourceHealth{},
		parts: map[string]int{}}
	s.snap.Store(&snapshot{processed: map[string]uint64{}})

	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return fmt.Errorf("status: listen: %w", err)
		}
	}
	srv := httpserver.New(s.handler(), httpserver.Limits{})
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Serve(ln) }()
	s.log.Info("status http listening", "addr", ln.Addr().String())

	runErr := s.run(ctx)

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Warn("status http shutdown", "err", err)
	}
	if err := <-httpDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
		runErr = errors.Join(runErr, fmt.Errorf("status: http: %w", err))
	}
	return runErr
}

// run loads the reports, follows the streams and folds until ctx is cancelled.
func (s *service) run(ctx context.Context) error {
	loaded, err := s.load(ctx)
	if err != nil {
		return err
	}
	s.fleet = report.NewFleet(loaded...)
	for _, src := range sources {
		last, err := s.lastSequence(ctx, src)
		if err != nil {
			return err
		}
		s.target[src.stream] = last
	}
	s.log.Info("status loaded", "clusters", len(loaded))

	fctx, stop := context.WithCancel(ctx)
	defer stop()
	items := make(chan item, 256)
	var wg sync.WaitGroup
	for _, src := range sources {
		from := s.fleet.ResumeFrom(src.stream)
		if src.stream == report.StreamRepo {
			// The whole repository stream is read: a cluster seen for the first time starts from the latest
			// event that concerns it, however old.
			from = 1
		}
		// Every report has folded what lies below from: it is read, even when nothing follows it.
		s.processed[src.stream] = max(s.processed[src.stream], from-1)
		wg.Go(func() { s.follow(fctx, src, from, items) })
	}
	defer wg.Wait()

	s.checkReady()
	s.publishSnapshot()
	retry := time.NewTicker(2 * time.Second)
	defer retry.Stop()
	// Storing a report costs in proportion to the cluster's size, so a run's results are stored at most
	// every resultFlushEvery; anything else is stored at once.
	later := time.NewTimer(time.Hour)
	later.Stop()
	defer later.Stop()
	var lastFlush time.Time
	laterSet := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case it := <-items:
			urgent := s.fold(it)
		drain:
			for range 1000 {
				select {
				case it := <-items:
					urgent = s.fold(it) || urgent
				default:
					break drain
				}
			}
			if wait := resultFlushEvery - time.Since(lastFlush); urgent || wait <= 0 || !s.ready {
				s.flush(ctx)
				lastFlush = time.Now()
			} else if !laterSet {
				later.Reset(wait)
				laterSet = true
			}
		case <-later.C:
			laterSet = false
			s.flush(ctx)
			lastFlush = time.Now()
		case <-retry.C:
			if len(s.dirty) > 0 {
				s.flush(ctx)
				lastFlush = time.Now()
			}
		}
	}
}

// resultFlushEvery is how often the reports are stored while only operation results arrive.
const resultFlushEvery = 500 * time.Millisecond

// load reads every report stored in the bucket.
func (s *service) load(ctx context.Context) ([]report.ClusterStatus, error) {
	keys, err := StoredClusters(ctx, s.cfg.Bus)
	if err != nil {
		return nil, fmt.Errorf("status: load: %w", err)
	}
	var out []report.ClusterStatus
	for _, k := range keys {
		st, parts, err := ReadStored(ctx, s.cfg.Bus, k)
		s.parts[k] = parts
		switch {
		case errors.Is(err, bus.ErrNotFound):
			continue
		case errors.Is(err, wire.ErrStatusUnreadable) || errors.Is(err, wire.ErrStatusPartsMismatch):
			// A report this version cannot read is rebuilt from the streams.
			s.log.Warn("status: stored report unreadable; rebuilding it", "cluster", k, "err", err)
			continue
		case err != nil:
			return nil, fmt.Errorf("status: load: %w", err)
		}
		out = append(out, st)
	}
	return out, nil
}

// lastSequence is the sequence of the last message on a source's subjects (0 when there is none).
func (s *service) lastSequence(ctx context.Context, src source) (uint64, error) {
	var last uint64
	for _, f := range src.filters {
		m, err := s.cfg.Bus.LastMessage(ctx, src.name, f)
		if errors.Is(err, bus.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("status: %w", err)
		}
		last = max(last, m.Sequence)
	}
	return last, nil
}

// follow feeds one stream's messages, decoded, to the loop, and starts over after an error.
func (s *service) follow(ctx context.Context, src source, from uint64, out chan<- item) {
	next := from
	backoff := 100 * time.Millisecond
	for {
		err := s.cfg.Bus.Follow(ctx, src.name, src.filters, next, func(m *bus.Message, stored time.Time) error {
			it := item{stream: src.stream, seq: m.Sequence}
			var err error
			if m.Subject == bus.SubjectRepoHealth {
				var h event.SourceHealth
				if h, err = wire.DecodeSourceHealth(ctx, m.Decode); err == nil {
					it.health = &h
				}
			} else if it.event, err = decode(ctx, src.stream, m); err == nil && it.event != nil {
				it.event.Seq, it.event.At = m.Sequence, stored
			}
			if err != nil {
				s.log.Warn("status: skipping a message it cannot read", "stream", src.name, "stream_seq", m.Sequence,
					"subject", m.Subject, "err", err)
			}
			select {
			case out <- it:
			case <-ctx.Done():
				return ctx.Err()
			}
			next = m.Sequence + 1
			backoff = 100 * time.Millisecond
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("status: following a stream failed; starting over", "stream", src.name, "from", next, "err", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// decode reads one message into an event; nil for a message that is none (a dead letter that is no refusal).
func decode(ctx context.Context, stream report.Stream, m *bus.Message) (*report.Event, error) {
	var ev report.Event
	var err error
	switch stream {
	case report.StreamRepo:
		err = decodeInto(ctx, m, wire.DecodeRepoChanged, &ev.Repo)
	case report.StreamResults:
		err = decodeInto(ctx, m, wire.DecodeResult, &ev.Result)
	case report.StreamGaps:
		err = decodeInto(ctx, m, wire.DecodeGapReport, &ev.Gaps)
	case report.StreamPlans:
		err = decodePlanEvent(ctx, m, &ev)
	case report.StreamDLQ:
		return decodeRefused(ctx, m)
	case report.StreamNotify:
		err = decodeInto(ctx, m, wire.DecodeNotificationHealth, &ev.Notify)
		if err == nil && (ev.Notify.Cluster == "" || ev.Notify.Cluster != lastToken(m.Subject)) {
			// Only the subject says which cluster the notifier may speak of.
			err = fmt.Errorf("notification health of cluster %q on %s", ev.Notify.Cluster, m.Subject)
		}
	}
	if err != nil {
		return nil, err
	}
	return &ev, nil
}

// decodeInto decodes m with decode and points *dst at the value.
func decodeInto[T any](ctx context.Context, m *bus.Message, decode func(context.Context, wire.DecodeFunc) (T, error), dst **T) error {
	v, err := decode(ctx, m.Decode)
	*dst = &v
	return err
}

// decodePlanEvent reads a plan event into ev, by the event its subject names.
func decodePlanEvent(ctx context.Context, m *bus.Message, ev *report.Event) error {
	switch bus.PlanEvent(lastToken(m.Subject)) {
	case bus.PlanPlanned:
		return decodeInto(ctx, m, wire.DecodePlanned, &ev.Planned)
	case bus.PlanRejected:
		return decodeInto(ctx, m, wire.DecodeRejected, &ev.Rejected)
	case bus.PlanHeld:
		return decodeInto(ctx, m, wire.DecodeHeld, &ev.Held)
	case bus.PlanFinished:
		return decodeInto(ctx, m, wire.DecodeFinished, &ev.Finished)
	default:
		return decodeInto(ctx, m, wire.DecodeConfirmation, &ev.Confirmed)
	}
}

// decodeRefused reads a dead letter into a refused operation: the cluster and node are those of the
// subject (each executor may publish on its own node's only), the rest is what the operation claimed. A dead
// letter that is not a refusal (an operation that ran out of deliveries shows as failed in its run) is no
// event.
func decodeRefused(ctx context.Context, m *bus.Message) (*report.Event, error) {
	code := m.Header.Get(bus.HeaderRefused)
	if code == "" {
		return nil, nil
	}
	cluster, node, err := bus.ParseDLQSubject(m.Subject)
	if err != nil {
		return nil, err
	}
	r := report.RefusedOperation{Cluster: cluster, Node: node, Reason: code, Message: m.Header.Get(bus.HeaderDeadLetterReason)}
	// An operation too mangled to decode is still a refusal: it shows with what the headers say.
	if op, err := wire.DecodeOperation(ctx, m.Decode); err == nil {
		r.RunID, r.OpID, r.Action, r.Ref, r.VMID = op.RunID, op.ID, op.Action, op.Ref, op.VMID
	}
	return &report.Event{Refused: &r}, nil
}

func lastToken(subject string) string {
	for i := len(subject) - 1; i >= 0; i-- {
		if subject[i] == '.' {
			return subject[i+1:]
		}
	}
	return subject
}

// fold applies one message. It reports whether the message is more than an operation result: what it
// changed is stored at once.
func (s *service) fold(it item) bool {
	s.processed[it.stream] = max(s.processed[it.stream], it.seq)
	defer s.checkReady()
	if h := it.health; h != nil {
		key := [2]string{h.Repo, h.Branch}
		if before, ok := s.sources[key]; !ok || before.Stale != h.Stale {
			s.log.Info("repository health changed", "repo", h.Repo, "branch", h.Branch, "stale", h.Stale,
				"commit", h.Commit, "err", h.LastError)
		}
		s.sources[key] = *h
		return true
	}
	if it.event == nil {
		return false
	}
	if c := it.event.Cluster(); c != "" {
		if err := bus.ValidateCluster(c); err != nil {
			s.log.Warn("status: skipping an event for an invalid cluster", "stream_seq", it.seq, "err", err)
			return false
		}
	}
	urgent := it.stream != report.StreamResults
	for _, ch := range s.fleet.Apply(*it.event) {
		s.observe(ch, *it.event)
		if ch.Changed() || it.stream != report.StreamResults {
			s.dirty[ch.Cluster] = true
		}
		if ch.Before.Phase != ch.After.Phase {
			urgent = true
			s.log.Info("cluster phase changed", "cluster", ch.Cluster, "from", string(ch.Before.Phase),
				"to", string(ch.After.Phase), "reason", ch.After.Reason, "commit", ch.After.LastCommitSeen)
		}
	}
	return urgent
}

func (s *service) checkReady() {
	if s.ready {
		return
	}
	for _, src := range sources {
		if s.processed[src.stream] < s.target[src.stream] {
			return
		}
	}
	s.ready = true
	s.log.Info("status ready", "clusters", len(s.fleet.Statuses()))
}

// flush stores and publishes the reports that changed, and updates the gauges and the HTTP snapshot.
func (s *service) flush(ctx context.Context) {
	names := make([]string, 0, len(s.dirty))
	for c := range s.dirty {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		st, ok := s.fleet.Status(c)
		if !ok {
			delete(s.dirty, c)
			continue
		}
		if err := s.store(ctx, st); err != nil {
			s.log.Warn("status: store report; will retry", "cluster", c, "err", err)
			continue
		}
		delete(s.dirty, c)
	}
	s.updateGauges()
	s.publishSnapshot()
}

func (s *service) store(ctx context.Context, st report.ClusterStatus) error {
	m, parts, err := storeReport(ctx, s.cfg.Bus, st, s.parts[st.Cluster])
	s.parts[st.Cluster] = parts
	if err != nil {
		return err
	}
	subject, err := bus.StatusSubject(st.Cluster)
	if err != nil {
		return err
	}
	if _, err := s.cfg.Bus.Publish(ctx, subject, m); err != nil {
		return err
	}
	return nil
}

func (s *service) publishSnapshot() {
	processed := map[string]uint64{}
	for _, src := range sources {
		processed[src.name] = s.processed[src.stream]
	}
	s.snap.Store(&snapshot{ready: s.ready, statuses: s.fleet.Statuses(), sources: sortSources(s.sources), processed: processed})
}

// observe counts what an event completed.
func (s *service) observe(ch report.Change, e report.Event) {
	m := s.metrics
	if e.Planned != nil && !e.Preview() && ch.After.Counters.Plans > ch.Before.Counters.Plans {
		for _, f := range e.Planned.Plan.Findings {
			kind, _ := report.SplitRef(f.Ref)
			switch f.Kind {
			case plan.FindingDeferredPrune:
				m.PruneDeferred.WithLabelValues(kind).Inc()
			case plan.FindingAnomaly, plan.FindingMisplaced:
				m.Anomalies.WithLabelValues(string(f.Kind)).Inc()
			case plan.FindingSkipped, plan.FindingPending, plan.FindingWarning, plan.FindingSuspended:
				// No metric of their own.
			}
		}
	}
	c := ch.Completed
	if c == nil {
		return
	}
	result := cycleResult(c.Result)
	m.Cycles.WithLabelValues(result).Inc()
	m.Reconciles.WithLabelValues(ch.Cluster, result).Inc()
	if start := ch.After.Timing.LastTriggerAt; !start.IsZero() && !e.At.IsZero() && !e.At.Before(start) {
		m.ReconcileDuration.WithLabelValues(ch.Cluster, result).Observe(e.At.Sub(start).Seconds())
	}
	for _, o := range c.Operations {
		m.Operations.WithLabelValues(ch.Cluster, string(o.Action), string(o.State)).Inc()
		kind, _ := report.SplitRef(o.Ref)
		switch o.State {
		case plan.OpSucceeded:
			m.Actions.WithLabelValues(kind, string(o.Action), "ok").Inc()
		case plan.OpFailed:
			m.Actions.WithLabelValues(kind, string(o.Action), "error").Inc()
		case plan.OpWaiting, plan.OpDispatched, plan.OpSkipped, plan.OpSuperseded:
			// Not an action taken on PVE.
		}
	}
}

// cycleResult maps a completion onto the predecessor's cycle result codes where one exists.
func cycleResult(r string) string {
	if r == plan.RejectObserve {
		return "pve_read_error"
	}
	return r
}

func (s *service) updateGauges() {
	m := s.metrics
	m.Resources.Reset()
	m.Objects.Reset()
	m.Findings.Reset()
	objects := map[[2]string]int{}
	for _, st := range s.fleet.Statuses() {
		c := st.Cluster
		perKind := map[[2]string]int{}
		for _, r := range st.Resources {
			perKind[[2]string{r.Kind, string(r.State)}]++
			objects[[2]string{r.Kind, string(r.State)}]++
		}
		for k, n := range perKind {
			m.Resources.WithLabelValues(c, k[0], k[1]).Set(float64(n))
		}
		m.Drifted.WithLabelValues(c).Set(float64(st.Counters.Drifted))
		m.Gaps.WithLabelValues(c).Set(float64(st.Counters.Gaps))
		m.SecurityWarnings.WithLabelValues(c).Set(float64(st.Counters.SecurityWarnings))
		for _, p := range report.Phases {
			v := 0.0
			if p == st.Phase {
				v = 1
			}
			m.Phase.WithLabelValues(c, string(p)).Set(v)
		}
		findings := map[string]int{}
		for _, f := range st.Findings {
			findings[string(f.Kind)]++
		}
		for k, n := range findings {
			m.Findings.WithLabelValues(c, k).Set(float64(n))
		}
		if t := st.Timing.LastSuccessAt; !t.IsZero() {
			m.LastSuccess.WithLabelValues(c).Set(float64(t.UnixNano()) / 1e9)
		}
	}
	for k, n := range objects {
		m.Objects.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
}
