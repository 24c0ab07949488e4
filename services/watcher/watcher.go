package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/httpserver"
	"github.com/proxops/proxops/internal/repofs"
)

// busTimeout bounds one call to the tree store, the publisher or the KV.
const busTimeout = 10 * time.Second

// Status is the watcher's view of its repository, for health checks and status pages.
type Status struct {
	Repo   string
	Branch string
	// Commit, Tree and Subject are the last announced commit: the last good tree.
	Commit  string
	Tree    string
	Subject string
	// LastSuccess is when the repository was last read successfully.
	LastSuccess time.Time
	// LastError is the last failure (credentials removed); empty after a success.
	LastError string
	// ConsecutiveFailures counts failed attempts since the last success.
	ConsecutiveFailures int
	// Stale is true while the last attempt failed and the last good tree is kept.
	Stale bool
}

// Watcher follows one branch of one repository. Create it with New and start it with Run.
type Watcher struct {
	cfg       Config
	repo      string
	branchRef plumbing.ReferenceName
	deps      Deps
	log       *slog.Logger
	m         *metrics
	reg       *prometheus.Registry
	src       source
	red       redactor
	keyPrefix string

	kick        chan struct{}
	manual      chan manualRequest
	running     atomic.Bool
	addr        atomic.Pointer[string]
	metricsAddr atomic.Pointer[string]

	mu     sync.Mutex
	status Status

	// Owned by the goroutine running loop.
	current        announcement
	startupPending bool
	failures       int
	lastAnnounce   time.Time
	rejected       rejectedCommit
	// gitStale and gitError: the last look at the repository failed (a bus failure does not count).
	gitStale   bool
	gitError   string
	healthSent *SourceHealth
}

// healthRepeat is how often a stale SourceHealth is published again while the repository stays unreadable,
// so it outlives the repository stream's retention.
const healthRepeat = time.Hour

// announcement is the last commit announced, kept in the KV across restarts.
type announcement struct {
	Commit  string `json:"commit"`
	Tree    string `json:"tree"`
	Subject string `json:"subject"`
}

// rejectedCommit remembers a commit whose tree cannot be snapshotted (too large, or a symbolic link that
// leaves the repository), so it is not read again until the branch moves.
type rejectedCommit struct {
	commit plumbing.Hash
	err    error
}

type manualRequest struct {
	req   ReconcileRequest
	reply chan error
}

// New checks cfg and deps and prepares a watcher; it reads the CA, ssh key and known_hosts files it is given
// but touches no repository and no network.
func New(cfg Config, deps Deps) (*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("watcher config: %w", err)
	}
	cfg = cfg.withDefaults()
	if deps.Trees == nil || deps.Publisher == nil || deps.KV == nil {
		return nil, errors.New("watcher: a tree store, a publisher and a KV are required")
	}
	repo, err := cfg.Repo()
	if err != nil {
		return nil, fmt.Errorf("watcher config: %w", err)
	}
	red := newRedactor(cfg)
	branchRef := plumbing.NewBranchReferenceName(cfg.Branch)
	var src source
	if cfg.Path != "" {
		src = &localSource{path: repo, branch: branchRef}
	} else {
		loc, err := parseLocation(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("watcher config: %w", err)
		}
		access, err := buildAccess(cfg, loc)
		if err != nil {
			return nil, fmt.Errorf("watcher config: %w", red.error(err))
		}
		src = &remoteSource{url: loc.fetchURL, branch: branchRef, dir: mirrorDir(cfg.DataDir, repo), access: access}
	}
	reg := deps.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("watcher metrics: %w", err)
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sum := sha256.Sum256([]byte(repo + "\x00" + cfg.Branch))
	return &Watcher{
		cfg:       cfg,
		repo:      repo,
		branchRef: branchRef,
		deps:      deps,
		log:       log.With("repo", repo, "branch", cfg.Branch),
		m:         m,
		reg:       reg,
		src:       src,
		red:       red,
		keyPrefix: "watcher." + hex.EncodeToString(sum[:16]),
		kick:      make(chan struct{}, 1),
		manual:    make(chan manualRequest),
		status:    Status{Repo: repo, Branch: cfg.Branch},
	}, nil
}

// Run creates a watcher and runs it until ctx ends.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	w, err := New(cfg, deps)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// Repo is the repository identity used in events.
func (w *Watcher) Repo() string { return w.repo }

// Status returns a copy of the watcher's current status.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

// ListenAddr is the address the HTTP server listens on while Run serves it, else "".
func (w *Watcher) ListenAddr() string {
	if a := w.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// MetricsAddr is the address the /metrics and /healthz server (Config.MetricsListen) listens on while Run
// serves it, else "".
func (w *Watcher) MetricsAddr() string {
	if a := w.metricsAddr.Load(); a != nil {
		return *a
	}
	return ""
}

// MetricsHandler serves /metrics and /healthz only.
func (w *Watcher) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(w.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", w.serveHealth)
	return mux
}

// Handler serves /metrics, /healthz and, when a webhook secret is set, the webhook endpoints
// /webhook/github, /webhook/gitea (also /webhook/forgejo) and /webhook/gitlab.
func (w *Watcher) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(w.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", w.serveHealth)
	if w.cfg.WebhookSecret != "" {
		for _, name := range []string{ProviderGitHub, ProviderGitea, ProviderGitLab} {
			mux.Handle(WebhookPath(name), w.webhookHandler(providers[name]))
		}
		mux.Handle(WebhookPath("forgejo"), w.webhookHandler(providers[ProviderGitea]))
	}
	return mux
}

func (w *Watcher) serveHealth(rw http.ResponseWriter, _ *http.Request) {
	st := w.Status()
	ok := st.Commit != "" && !st.Stale
	body, _ := json.Marshal(struct {
		OK          bool   `json:"ok"`
		Repo        string `json:"repo"`
		Branch      string `json:"branch"`
		Commit      string `json:"commit,omitempty"`
		Tree        string `json:"tree,omitempty"`
		Stale       bool   `json:"stale"`
		LastError   string `json:"last_error,omitempty"`
		LastSuccess string `json:"last_success,omitempty"`
	}{ok, st.Repo, st.Branch, st.Commit, st.Tree, st.Stale, st.LastError, formatTime(st.LastSuccess)})
	rw.Header().Set("Content-Type", "application/json")
	if !ok {
		rw.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = rw.Write(append(body, '\n'))
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// Run announces the current commit at once, then follows the branch until ctx ends: polling, webhooks (when
// Config.Listen and a webhook secret are set), ReconcileRequests (when Deps.Requests is set) and the drift
// schedule. It returns nil when ctx ends, or the error that stopped it.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("watcher: already running")
	}
	defer w.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	errc := make(chan error, 3)
	var servers []*http.Server
	serve := func(addr string, h http.Handler, what string) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("watcher: listen on %s: %w", addr, err)
		}
		srv := httpserver.New(h, httpserver.Limits{})
		servers = append(servers, srv)
		wg.Go(func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("watcher: %s server: %w", what, err)
				cancel()
			}
		})
		bound := ln.Addr().String()
		if what == "http" {
			w.addr.Store(&bound)
		} else {
			w.metricsAddr.Store(&bound)
		}
		w.log.Info(what+" server listening", "addr", bound, "webhooks", what == "http" && w.cfg.WebhookSecret != "")
		return nil
	}
	shutdown := func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		for _, srv := range servers {
			_ = srv.Shutdown(sctx)
		}
	}
	defer w.addr.Store(nil)
	defer w.metricsAddr.Store(nil)
	if w.cfg.Listen != "" {
		if err := serve(w.cfg.Listen, w.Handler(), "http"); err != nil {
			return err
		}
	}
	if w.cfg.MetricsListen != "" && w.cfg.MetricsListen != w.cfg.Listen {
		if err := serve(w.cfg.MetricsListen, w.MetricsHandler(), "metrics"); err != nil {
			cancel()
			shutdown()
			wg.Wait()
			return err
		}
	}
	if w.deps.Requests != nil {
		wg.Go(func() {
			if err := w.deps.Requests.ConsumeRequests(ctx, w.HandleRequest); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("watcher: reconcile requests: %w", err)
				cancel()
			}
		})
	}
	w.loop(ctx)
	cancel()
	shutdown()
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// HandleRequest handles one ReconcileRequest through the running watcher; it is the handler a RequestSource
// calls. It returns once the answering RepoChanged is published, with an error wrapping ErrInvalidRequest
// for a request that can never succeed.
func (w *Watcher) HandleRequest(ctx context.Context, req ReconcileRequest) error {
	if err := validateRequest(req); err != nil {
		return err
	}
	reply := make(chan error, 1)
	select {
	case w.manual <- manualRequest{req: req, reply: reply}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop is the only goroutine that touches git and the announcement state.
func (w *Watcher) loop(ctx context.Context) {
	if w.cfg.RequestsOnly {
		for {
			select {
			case <-ctx.Done():
				return
			case mr := <-w.manual:
				mr.reply <- w.manualEvent(ctx, mr.req)
			}
		}
	}
	w.loadState(ctx)
	w.startupPending = true
	next := w.attempt(ctx, TriggerStartup)
	if w.startupPending {
		w.startupFallback(ctx)
	}
	poll := time.NewTimer(next)
	defer poll.Stop()
	var driftC <-chan time.Time
	var driftAt time.Time
	var drift *time.Timer
	if w.cfg.DriftInterval > 0 {
		driftAt = nextSlot(time.Now(), w.cfg.DriftInterval)
		drift = time.NewTimer(time.Until(driftAt))
		defer drift.Stop()
		driftC = drift.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
			poll.Reset(w.attempt(ctx, TriggerPoll))
		case <-w.kick:
			poll.Reset(w.attempt(ctx, TriggerWebhook))
		case <-driftC:
			w.drift(ctx, driftAt)
			driftAt = nextSlot(time.Now(), w.cfg.DriftInterval)
			drift.Reset(time.Until(driftAt))
		case mr := <-w.manual:
			if mr.req.Tree == "" {
				poll.Reset(w.attempt(ctx, TriggerManual))
			}
			mr.reply <- w.manualEvent(ctx, mr.req)
		}
	}
}

// wake asks the loop for an immediate look at the repository; wakes coalesce.
func (w *Watcher) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// nextSlot is the start of the drift slot after t.
func nextSlot(t time.Time, interval time.Duration) time.Time {
	n := t.UnixNano()
	return time.Unix(0, (n/int64(interval)+1)*int64(interval))
}

// attempt looks at the repository and announces a new commit; the first announcement after start is a
// forced startup one. It returns how long to wait before the next poll: the poll interval, or the backoff
// after a failure.
func (w *Watcher) attempt(ctx context.Context, trigger Trigger) time.Duration {
	force := false
	if w.startupPending {
		trigger, force = TriggerStartup, true
	}
	err := w.sync(ctx, trigger, force)
	if ctx.Err() != nil {
		return w.cfg.PollInterval
	}
	var gerr *gitError
	switch {
	case err == nil:
		w.gitStale, w.gitError = false, ""
	case errors.As(err, &gerr):
		w.gitStale, w.gitError = true, err.Error()
	}
	defer w.reportHealth(ctx)
	if err != nil {
		return w.failed(err)
	}
	w.failures = 0
	if trigger == TriggerStartup {
		w.startupPending = false
	}
	return w.cfg.PollInterval
}

// gitError marks a failure to reach or read the repository, as opposed to one of the bus.
type gitError struct{ err error }

func (e *gitError) Error() string { return e.err.Error() }
func (e *gitError) Unwrap() error { return e.err }

// sync lists the branch at the source, fetches it when it moved, and announces a commit other than the last
// announced one (or any commit when forced).
func (w *Watcher) sync(ctx context.Context, trigger Trigger, force bool) error {
	gctx, cancel := context.WithTimeout(ctx, w.cfg.GitTimeout)
	defer cancel()
	start := time.Now()
	head, err := w.src.head(gctx)
	w.m.gitOp("list", time.Since(start), err)
	if err != nil {
		return &gitError{w.red.error(err)}
	}
	if !force && head.String() == w.current.Commit {
		w.succeeded(head)
		return nil
	}
	if head == w.rejected.commit {
		return &gitError{w.rejected.err}
	}
	have, err := w.src.have()
	if err != nil {
		return &gitError{w.red.error(err)}
	}
	if have != head {
		start = time.Now()
		have, err = w.src.fetch(gctx)
		w.m.gitOp("fetch", time.Since(start), err)
		if err != nil {
			return &gitError{w.red.error(err)}
		}
		w.log.Debug("fetched", "commit", have.String(), "duration", time.Since(start))
		if m, ok := w.src.(interface{ maintain() error }); ok {
			if err := m.maintain(); err != nil {
				w.log.Warn("mirror maintenance failed", "err", w.red.error(err))
			}
		}
	}
	if !force && have.String() == w.current.Commit {
		w.succeeded(have)
		return nil
	}
	snap, subject, err := w.src.snapshot(gctx, have)
	if err != nil {
		err = w.red.error(err)
		if errors.Is(err, ErrSnapshotTooLarge) || errors.Is(err, repofs.ErrLinkRefused) {
			w.rejected = rejectedCommit{commit: have, err: err}
		}
		return &gitError{err}
	}
	w.succeeded(have)
	if err := w.storeTree(ctx, snap); err != nil {
		return err
	}
	a := announcement{Commit: snap.Commit, Tree: snap.Tree, Subject: subject}
	ev := w.event(a, trigger, CommitEventID(w.repo, a.Commit))
	if err := w.publish(ctx, ev); err != nil {
		return err
	}
	w.setCurrent(ctx, a)
	return nil
}

// event builds a RepoChanged for an announcement.
func (w *Watcher) event(a announcement, trigger Trigger, id string) RepoChanged {
	return RepoChanged{
		Repo: w.repo, Branch: w.cfg.Branch, Commit: a.Commit, Tree: a.Tree, Trigger: trigger,
		EventID: id, Subject: a.Subject,
	}
}

// storeTree writes a snapshot to the tree store unless it is there.
func (w *Watcher) storeTree(ctx context.Context, snap TreeSnapshot) error {
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	written, err := w.deps.Trees.PutTree(ctx, snap)
	if err != nil {
		w.m.publishFailures.Inc()
		return fmt.Errorf("store tree %s: %w", snap.Tree, err)
	}
	if written {
		w.m.treesStored.Inc()
		w.log.Info("tree stored", "tree", snap.Tree, "commit", snap.Commit, "files", len(snap.Files))
	}
	return nil
}

// ensureTree makes sure the current announcement's tree is in the store, reading it again from git if the
// store lost it or the announcement names it the way an older version did (git's tree hash): the
// announcement then takes the snapshot's content name.
func (w *Watcher) ensureTree(ctx context.Context) error {
	if event.ValidTreeName(w.current.Tree) {
		hctx, cancel := context.WithTimeout(ctx, busTimeout)
		has, err := w.deps.Trees.HasTree(hctx, w.current.Tree)
		cancel()
		if err != nil {
			return fmt.Errorf("look up tree %s: %w", w.current.Tree, err)
		}
		if has {
			return nil
		}
	}
	gctx, gcancel := context.WithTimeout(ctx, w.cfg.GitTimeout)
	defer gcancel()
	snap, _, err := w.src.snapshot(gctx, plumbing.NewHash(w.current.Commit))
	if err != nil {
		return &gitError{w.red.error(err)}
	}
	if err := w.storeTree(ctx, snap); err != nil {
		return err
	}
	w.current.Tree = snap.Tree
	return nil
}

// publish publishes one RepoChanged.
func (w *Watcher) publish(ctx context.Context, ev RepoChanged) error {
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	if err := w.deps.Publisher.PublishRepoChanged(ctx, ev); err != nil {
		w.m.publishFailures.Inc()
		return fmt.Errorf("publish %s: %w", ev.EventID, err)
	}
	w.m.published.WithLabelValues(string(ev.Trigger)).Inc()
	w.log.Info("repo changed", "commit", ev.Commit, "tree", ev.Tree, "trigger", string(ev.Trigger),
		"event_id", ev.EventID, "request_id", ev.RequestID, "dry_run", ev.DryRun, "requested_by", ev.RequestedBy)
	return nil
}

// setCurrent records the announced commit, in memory and in the KV.
func (w *Watcher) setCurrent(ctx context.Context, a announcement) {
	w.current = a
	w.lastAnnounce = time.Now()
	w.rejected = rejectedCommit{}
	w.mu.Lock()
	w.status.Commit, w.status.Tree, w.status.Subject = a.Commit, a.Tree, a.Subject
	w.mu.Unlock()
	data, _ := json.Marshal(a)
	kctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	if err := w.deps.KV.Put(kctx, w.stateKey(), data); err != nil {
		w.log.Warn("cannot record the announced commit", "commit", a.Commit, "err", w.red.error(err))
	}
}

// loadState reads the last announced commit from the KV.
func (w *Watcher) loadState(ctx context.Context) {
	kctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	data, found, err := w.deps.KV.Get(kctx, w.stateKey())
	if err != nil {
		w.log.Warn("cannot read the last announced commit", "err", w.red.error(err))
		return
	}
	if !found {
		return
	}
	var a announcement
	if err := json.Unmarshal(data, &a); err != nil || !isObjectID(a.Commit) || a.Tree == "" {
		w.log.Warn("ignoring an unreadable last announced commit")
		return
	}
	w.current = a
	w.mu.Lock()
	w.status.Commit, w.status.Tree, w.status.Subject = a.Commit, a.Tree, a.Subject
	w.mu.Unlock()
}

func (w *Watcher) stateKey() string { return w.keyPrefix + ".state" }

func (w *Watcher) pushKey(commit string) string { return w.keyPrefix + ".push." + commit }

// succeeded records a successful look at the repository.
func (w *Watcher) succeeded(commit plumbing.Hash) {
	now := time.Now()
	w.m.lastSuccess.Set(float64(now.Unix()))
	w.m.consecutiveFailures.Set(0)
	w.m.stale.Set(0)
	w.m.std.DesiredStale.Set(0)
	w.m.std.GitFetched(now)
	// The revision last: a scrape that sees the new commit sees the rest of the success too.
	w.m.revision.Reset()
	w.m.revision.WithLabelValues(w.repo, w.cfg.Branch, commit.String()).Set(1)
	w.mu.Lock()
	w.status.LastSuccess = now
	w.status.LastError = ""
	w.status.ConsecutiveFailures = 0
	w.status.Stale = false
	w.mu.Unlock()
}

// failed records a failed attempt and returns the backoff before the next one.
func (w *Watcher) failed(err error) time.Duration {
	w.failures++
	var gerr *gitError
	if errors.As(err, &gerr) {
		w.m.fetchFailures.Inc()
		w.m.std.DesiredStale.Set(1)
	}
	w.m.consecutiveFailures.Set(float64(w.failures))
	w.m.stale.Set(1)
	w.mu.Lock()
	w.status.LastError = err.Error()
	w.status.ConsecutiveFailures = w.failures
	w.status.Stale = true
	w.mu.Unlock()
	wait := backoff(w.failures, w.cfg.RetryMin, w.cfg.RetryMax)
	w.log.Warn("repository update failed; keeping the last good tree", "err", err,
		"failures", w.failures, "retry_in", wait, "commit", w.current.Commit)
	return wait
}

// reportHealth publishes the repository's health when it changed since the last publication (stale or not,
// or the last good commit while stale), and again every healthRepeat while it stays stale.
func (w *Watcher) reportHealth(ctx context.Context) {
	if w.deps.Health == nil {
		return
	}
	now := time.Now()
	st := w.Status()
	h := SourceHealth{Repo: w.repo, Branch: w.cfg.Branch, Stale: w.gitStale, LastError: w.gitError,
		Commit: w.current.Commit, LastSuccess: st.LastSuccess, Failures: w.failures, At: now.UTC()}
	if !h.Stale {
		h.Failures = 0
	}
	if sent := w.healthSent; sent != nil && sent.Stale == h.Stale &&
		(!h.Stale || (sent.Commit == h.Commit && now.Sub(sent.At) < healthRepeat)) {
		return
	}
	hctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	if err := w.deps.Health.PublishSourceHealth(hctx, h); err != nil {
		w.log.Warn("cannot publish the repository's health; trying again after the next look", "stale", h.Stale,
			"err", w.red.error(err))
		return
	}
	w.healthSent = &h
	w.log.Info("repository health published", "stale", h.Stale, "commit", h.Commit)
}

// backoff doubles from lo for each consecutive failure, up to hi.
func backoff(failures int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < failures && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// startupFallback announces the last good tree at start when the repository cannot be read: the commit
// remembered in the KV, else the one in the mirror.
func (w *Watcher) startupFallback(ctx context.Context) {
	if w.current.Commit == "" {
		have, err := w.src.have()
		if err != nil || have.IsZero() {
			w.log.Error("git sync failed and no previous good tree available")
			return
		}
		gctx, cancel := context.WithTimeout(ctx, w.cfg.GitTimeout)
		snap, subject, err := w.src.snapshot(gctx, have)
		cancel()
		if err != nil {
			w.log.Error("git sync failed and no previous good tree available", "err", w.red.error(err))
			return
		}
		if err := w.storeTree(ctx, snap); err != nil {
			w.log.Error("cannot store the last good tree", "err", err)
			return
		}
		w.current = announcement{Commit: snap.Commit, Tree: snap.Tree, Subject: subject}
	} else if err := w.ensureTree(ctx); err != nil {
		w.log.Error("cannot announce the last good tree at start", "commit", w.current.Commit, "err", err)
		return
	}
	if err := w.publish(ctx, w.event(w.current, TriggerStartup, CommitEventID(w.repo, w.current.Commit))); err != nil {
		w.log.Error("cannot announce the last good tree at start", "err", err)
		return
	}
	w.setCurrent(ctx, w.current)
	w.startupPending = false
	w.log.Warn("announced the last good tree: the repository could not be read", "commit", w.current.Commit)
	w.reportHealth(ctx)
}

// drift re-announces the current commit for the drift slot starting at slotStart, unless the commit was
// announced for every cluster less than half an interval ago (a plan is then fresh anyway). Answers to
// requests do not count: they may be dry runs or cover some clusters only.
func (w *Watcher) drift(ctx context.Context, slotStart time.Time) {
	if w.current.Commit == "" {
		w.log.Debug("drift tick skipped: no commit announced yet")
		return
	}
	if !w.lastAnnounce.IsZero() && slotStart.Sub(w.lastAnnounce) < w.cfg.DriftInterval/2 {
		w.log.Debug("drift tick skipped: announced recently")
		return
	}
	if err := w.ensureTree(ctx); err != nil {
		w.log.Warn("drift tick failed", "err", err)
		return
	}
	slot := DriftSlot(slotStart, w.cfg.DriftInterval)
	if err := w.publish(ctx, w.event(w.current, TriggerDrift, DriftEventID(w.repo, w.current.Commit, slot))); err != nil {
		w.log.Warn("drift tick failed", "err", err)
		return
	}
	w.lastAnnounce = time.Now()
}

var (
	requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:/+=-]{1,128}$`)
	clusterPattern   = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$`)
)

func validateRequest(req ReconcileRequest) error {
	if !requestIDPattern.MatchString(req.RequestID) {
		return fmt.Errorf("%w: request id %q: 1 to 128 of [A-Za-z0-9._:/+=-]", ErrInvalidRequest, truncate(req.RequestID, 140))
	}
	if req.Tree != "" && !event.ValidTreeName(req.Tree) {
		return fmt.Errorf("%w: request %s: tree %q: not a tree name (%s and 64 hex digits)", ErrInvalidRequest, req.RequestID,
			truncate(req.Tree, 140), event.TreePrefix)
	}
	if req.Operator != "" && req.Tree == "" && req.Rollback == nil {
		return fmt.Errorf("%w: request %s: a work-tree apply by %s names no tree", ErrInvalidRequest, req.RequestID, req.Operator)
	}
	if req.Rollback != nil {
		switch {
		case req.Operator == "" && !req.DryRun:
			return fmt.Errorf("%w: request %s: a rollback is an operator's request, on the operator's own subject (proxops.v1.apply.worktree.<user>)",
				ErrInvalidRequest, req.RequestID)
		case len(req.Clusters) != 1:
			return fmt.Errorf("%w: request %s: a rollback names exactly one cluster", ErrInvalidRequest, req.RequestID)
		case req.Rollback.Guest == "" || len(req.Rollback.Guest) > 200 || len(req.Rollback.Snapshot) > 200:
			return fmt.Errorf("%w: request %s: a rollback names a guest (and at most a snapshot)", ErrInvalidRequest, req.RequestID)
		}
	}
	for _, c := range req.Clusters {
		if !clusterPattern.MatchString(c) {
			return fmt.Errorf("%w: request %s: cluster %q: not a cluster name", ErrInvalidRequest, req.RequestID, truncate(c, 80))
		}
	}
	return nil
}

// manualEvent answers a ReconcileRequest: the requester's own tree, or the current commit. Only the commits
// the watcher fetched itself and the work trees an operator asked for on the operator's own subject
// (req.Operator) are ever announced to be applied: a tree named by an ordinary request is a dry run, whatever
// the request says.
func (w *Watcher) manualEvent(ctx context.Context, req ReconcileRequest) error {
	if err := validateRequest(req); err != nil {
		return err
	}
	var ev RepoChanged
	if req.Tree != "" {
		hctx, cancel := context.WithTimeout(ctx, busTimeout)
		snap, err := w.deps.Trees.GetTree(hctx, req.Tree)
		cancel()
		if errors.Is(err, ErrTreeNotFound) {
			return fmt.Errorf("%w: request %s: tree %s is not in the tree store", ErrInvalidRequest, req.RequestID, req.Tree)
		}
		if errors.Is(err, event.ErrTreeMismatch) {
			return fmt.Errorf("%w: request %s: %w", ErrInvalidRequest, req.RequestID, err)
		}
		if err != nil {
			return fmt.Errorf("request %s: look up tree %s: %w", req.RequestID, req.Tree, err)
		}
		// A snapshot of a commit carries it (as the client stored it: shown, not trusted); one of a work
		// tree has none.
		ev = RepoChanged{Repo: w.repo, Branch: w.cfg.Branch, Commit: snap.Commit, Tree: req.Tree, Trigger: TriggerManual,
			EventID: ManualEventID(w.repo, req.Tree, req.RequestID), DryRun: true}
		if req.Operator != "" {
			ev.DryRun, ev.RequestedBy = req.DryRun, req.Operator
		} else if !req.DryRun {
			w.log.Warn("a request on the reconcile subject names a tree: planned as a dry run (a work-tree apply is an operator's, on its own subject)",
				"request_id", req.RequestID, "tree", req.Tree)
		}
	} else if w.cfg.RequestsOnly {
		return fmt.Errorf("%w: request %s: this watcher announces only requests that name a stored tree", ErrInvalidRequest, req.RequestID)
	} else {
		if w.current.Commit == "" {
			return fmt.Errorf("request %s: no commit announced yet: the repository could not be read", req.RequestID)
		}
		if err := w.ensureTree(ctx); err != nil {
			return fmt.Errorf("request %s: %w", req.RequestID, err)
		}
		ev = w.event(w.current, TriggerManual, ManualEventID(w.repo, w.current.Commit, req.RequestID))
		ev.DryRun = req.DryRun
	}
	ev.RequestID = req.RequestID
	ev.Clusters = append([]string(nil), req.Clusters...)
	ev.MoveMisplaced = req.MoveMisplaced
	if req.Rollback != nil {
		rb := *req.Rollback
		ev.Rollback = &rb
		if !ev.DryRun {
			ev.RequestedBy = req.Operator
		}
	}
	w.log.Info("reconcile requested", "request_id", req.RequestID, "requested_by", req.RequestedBy, "operator", req.Operator,
		"tree", req.Tree, "dry_run", ev.DryRun, "move_misplaced", ev.MoveMisplaced)
	return w.publish(ctx, ev)
}

// CommitEventID is the dedup id of a commit noticed by push, poll or at start: <repo>@<commit>.
func CommitEventID(repo, commit string) string { return event.CommitEventID(repo, commit) }

// DriftEventID is the dedup id of a drift tick: <repo>@<commit>#drift-<slot>.
func DriftEventID(repo, commit string, slot int64) string {
	return event.DriftEventID(repo, commit, slot)
}

// ManualEventID is the dedup id of an answer to a ReconcileRequest: <repo>@<commit or tree>#manual-<id>.
func ManualEventID(repo, commitOrTree, requestID string) string {
	return event.ManualEventID(repo, commitOrTree, requestID)
}

// DriftSlot numbers the drift slot holding t: unix time divided by the interval, so every watcher of a
// repository ticks in the same slots and their ticks share one id.
func DriftSlot(t time.Time, interval time.Duration) int64 { return t.UnixNano() / int64(interval) }
