package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/metrics"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/adopter"
	"github.com/proxops/proxops/services/notifier"
	"github.com/proxops/proxops/services/planner"
	"github.com/proxops/proxops/services/status"
	"github.com/proxops/proxops/services/watcher"
)

func init() { register(newUpCommand) }

// upOptions are the flags of proxops up (and run).
type upOptions struct {
	global globalOptions
	repo   string
	nats   natsOptions
	once   bool
	// cmd is the command, to tell flags given explicitly from defaults.
	cmd *cobra.Command
}

func newUpCommand() *cobra.Command {
	var opts upOptions
	cmd := &cobra.Command{
		Use:     "up",
		Aliases: []string{"run"},
		Short:   "Run ProxOps on this host: every service and an embedded NATS server, until stopped",
		Long: `up runs ProxOps on one host: an embedded NATS server with JetStream in the data directory (listening
on 127.0.0.1 only, its generated credentials in <data-dir>/nats.json, mode 0600, so proxops status, diff and
apply on the same data directory talk to it), the watcher, the planner, one executor per allowed node of
every cluster, the adopter and the status service with its HTTP server (/status, /status/<cluster>,
/healthz, /readyz, /metrics and a page at /). It reconciles at once, then on every trigger: a new commit
(polled, or pushed by a webhook when webhook.listen and webhook.secret-env are set), the drift schedule
(reconcile.drift-interval) and reconcile requests. SIGINT or SIGTERM stops it cleanly: work in flight is
drained, the server is shut down last.

The repository is the local one containing the current directory (or --repo/--git-path), read from its
committed branch only, never touching the work tree; or a remote one (--git-url, or git.url in --config).
run is the predecessor's name for up.

With --once it exits after the first reconcile of every cluster: 0 when every cluster converged (applied
with no failure and nothing left to do), 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.cmd, opts.global = cmd, globalsOf(cmd)
			return runUp(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.repo, "repo", "", "local repository (default: the repository containing the current directory); same as --git-path")
	f.StringVar(&opts.nats.dataDir, "data-dir", "", "data directory: the JetStream store, the ownership inventory, the git mirror (env "+envDataDir+"; default: data-dir, ~/.local/share/proxops)")
	f.StringVar(&opts.nats.url, "nats", "", "NATS URL of a deployed system: run the services as its clients instead of starting a server")
	f.StringVar(&opts.nats.creds, "nats-creds", "", "NATS credentials file (with --nats)")
	f.StringVar(&opts.nats.user, "nats-user", "", "NATS user (with --nats); the password is read from PROXOPS_NATS_PASSWORD")
	f.StringVar(&opts.nats.ca, "nats-ca", "", "CA file that verifies the NATS server (with --nats)")
	f.StringVar(&opts.nats.cert, "nats-cert", "", "client certificate file (with --nats)")
	f.StringVar(&opts.nats.key, "nats-key", "", "client key file (with --nats)")
	f.BoolVar(&opts.once, "once", false, "exit after the first reconcile of every cluster: 0 when all converged, 1 otherwise")
	return cmd
}

// upConfig is everything up runs with, resolved from flags, the environment and the configuration.
type upConfig struct {
	src      source
	cfg      *repo.Config
	branch   string
	head     *event.TreeSnapshot
	dataDir  string
	logLevel slog.Level
	webhook  string
	gitToken string
	remote   *bus.ConnectConfig
}

func resolveUp(ctx context.Context, opts upOptions) (upConfig, error) {
	var uc upConfig
	src, err := resolveSource(opts.global, opts.repo, os.LookupEnv)
	if err != nil {
		return uc, err
	}
	uc.src, uc.branch = src, src.Branch
	var tree *repo.Config
	if src.Root != "" {
		if uc.branch == "" {
			if uc.branch, err = watcher.CurrentBranch(src.Root); err != nil {
				return uc, fmt.Errorf("%w: give the branch to follow with --git-branch", err)
			}
		}
		snap, err := watcher.SnapshotBranch(ctx, src.Root, uc.branch)
		if err != nil {
			return uc, fmt.Errorf("%w (proxops up follows the committed branch: commit the manifests)", err)
		}
		uc.head = &snap
		r := repo.LoadWith(snap.FS(), repo.LoadOptions{ConfigOnly: true})
		if !slices.ContainsFunc(r.Diagnostics, func(d diag.Diagnostic) bool { return d.File == repo.ProcessConfigFile && d.Severity == diag.Error }) {
			tree = r.Config
		}
	}
	uc.cfg = src.effectiveConfig(tree)
	if uc.logLevel, err = parseLevel(uc.cfg.Log.Level); err != nil {
		return uc, fmt.Errorf("log.level: %w", err)
	}
	flags := opts.cmd.Flags()
	if uc.dataDir, err = dataDir(flags, opts.nats.dataDir, uc.cfg, os.LookupEnv); err != nil {
		return uc, err
	}
	if env := uc.cfg.Webhook.SecretEnv; uc.cfg.Webhook.Listen != "" {
		if uc.webhook = os.Getenv(env); uc.webhook == "" {
			return uc, fmt.Errorf("webhook.listen is set but %s, which webhook.secret-env names, is empty: unsigned webhooks are refused", env)
		}
	}
	if src.URL != "" {
		if uc.gitToken, err = gitToken(ctx, uc.cfg, os.LookupEnv); err != nil {
			return uc, err
		}
	}
	natsURL := opts.nats.url
	if natsURL == "" && !flags.Changed("nats") {
		natsURL = uc.cfg.NATS.URL
	}
	if natsURL != "" {
		creds := opts.nats.creds
		if creds == "" {
			creds = uc.cfg.NATS.Creds
		}
		uc.remote = &bus.ConnectConfig{URL: natsURL, Name: "proxops-up", CredsFile: creds, User: opts.nats.user,
			Password: os.Getenv("PROXOPS_NATS_PASSWORD"), TLSCA: opts.nats.ca, TLSCert: opts.nats.cert, TLSKey: opts.nats.key}
	}
	return uc, nil
}

// gitToken is the token of a remote repository, with the predecessor's precedence: a cluster's secrets
// file (secrets.git.token; the file must be on this host, since the repository is not fetched yet) over
// PROXOPS_GIT_TOKEN over git.token. Clusters whose files hold different tokens are an error: there is one
// repository.
func gitToken(ctx context.Context, cfg *repo.Config, lookup func(string) (string, bool)) (string, error) {
	token := cfg.Git.Token
	if v, ok := lookup(envGitToken); ok && v != "" {
		token = v
	}
	decryptor := secrets.NewDecryptor(secretsKeys())
	from := ""
	for _, name := range cfg.ClusterNames() {
		cc := cfg.PVE.Clusters[name]
		if cc.Secrets == nil || cc.Secrets.Git.Token == "" {
			continue
		}
		file := cc.SecretsPath()
		if !secrets.IsHostPath(file) {
			return "", fmt.Errorf("pve.clusters.%s.secrets.git.token: the secrets file %s is in the repository, which cannot be fetched before the token is known; keep it next to the configuration file", name, file)
		}
		store, err := decryptor.ReadClusterFile(ctx, nil, file, secrets.HostDisk)
		if err != nil {
			return "", fmt.Errorf("pve.clusters.%s.secrets.git.token: %w", name, err)
		}
		v, err := store.Secret(cc.Secrets.Git.Token)
		if err != nil {
			return "", fmt.Errorf("pve.clusters.%s.secrets.git.token: %w", name, err)
		}
		if from != "" && v.Reveal() != token {
			return "", fmt.Errorf("git token conflict: clusters %s and %s take different git tokens from their secrets files, and there is one repository", from, name)
		}
		token, from = v.Reveal(), name
	}
	return token, nil
}

// watcherConfig is the watcher's configuration for up.
func (uc upConfig) watcherConfig() watcher.Config {
	w := watcher.Config{Branch: uc.branch, PollInterval: uc.cfg.Reconcile.PollInterval,
		DriftInterval: uc.cfg.Reconcile.DriftInterval, Listen: uc.cfg.Webhook.Listen, WebhookSecret: uc.webhook}
	if uc.src.URL != "" {
		w.URL, w.DataDir, w.Token = uc.src.URL, uc.dataDir, uc.gitToken
	} else {
		w.Path = uc.src.Root
	}
	return w
}

// upRegistryObserver, when set (by tests), is handed the registry proxops up serves on /metrics once every
// collector that does not wait for a service is on it.
var upRegistryObserver func(*prometheus.Registry)

func runUp(ctx context.Context, out, errOut io.Writer, opts upOptions) error {
	uc, err := resolveUp(ctx, opts)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(errOut, &slog.HandlerOptions{Level: uc.logLevel}))
	release, err := uc.lockDataDir()
	if err != nil {
		return err
	}
	defer release()
	reg, err := upRegistry()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", uc.cfg.Listen)
	if err != nil {
		return fmt.Errorf("status http server: %w", err)
	}
	u, err := startUp(ctx, opts, uc, reg, ln, log)
	if err != nil {
		return err
	}
	defer func() { _ = u.stop() }()
	where := "data directory " + uc.dataDir
	if uc.remote != nil {
		where = "NATS " + uc.remote.URL
	}
	fmt.Fprintf(out, "proxops up: status page at http://%s/ (%s)\n", ln.Addr(), where)
	log.Info("proxops up running", "status_addr", ln.Addr().String(), "data_dir", uc.dataDir, "repo", u.sys.watcher.Repo(),
		"branch", uc.branch, "version", buildInfo().Version)
	first, done, err := u.awaitFirstReconcile(ctx, opts.once)
	if done || err != nil {
		return err
	}
	return u.finishOnce(ctx, out, first, "http://"+ln.Addr().String()+"/status")
}

// lockDataDir takes the data directory for this process (nothing to take when up joins a remote NATS) and
// returns what releases it.
func (uc upConfig) lockDataDir() (release func(), err error) {
	if uc.remote != nil {
		return func() {}, nil
	}
	lock, err := lockDataDir(uc.dataDir)
	if errors.Is(err, errDataDirBusy) {
		return nil, fmt.Errorf("data directory %s is in use by another proxops process (a proxops up, or a diff or apply in progress): stop it, or give this one another --data-dir", uc.dataDir)
	}
	if err != nil {
		return nil, err
	}
	return lock.release, nil
}

// upRegistry is the registry up serves on /metrics, with the process and build collectors on it.
func upRegistry() (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	bi := buildInfo()
	if err := metrics.RegisterProcess(reg, metrics.BuildInfo{Version: bi.Version, Commit: bi.Commit}); err != nil {
		return nil, err
	}
	return reg, nil
}

// upServices is one running proxops up: its services, and what the first reconcile needs of them.
type upServices struct {
	sys       *system
	pub       *upPublisher
	log       *slog.Logger
	plansFrom uint64
	notifying bool
	stopped   bool
}

// stop drains the work in flight and stops every service, once.
func (u *upServices) stop() error {
	if u.stopped {
		return nil
	}
	u.stopped = true
	u.log.Info("stopping: draining the work in flight")
	err := u.sys.stop()
	u.log.Info("stopped")
	return err
}

// startUp starts every service of up in order: the bus (embedded or remote), the metrics that read it, the
// executors of the committed head, the inputs from outside the repository, then the adopter, planner,
// status service (which takes over ln), notifier and watcher. ln is closed when startUp fails before the
// status service has it; the services started so far are stopped on any failure.
func startUp(ctx context.Context, opts upOptions, uc upConfig, reg *prometheus.Registry, ln net.Listener, log *slog.Logger) (*upServices, error) {
	sys, err := newSystem(ctx, systemConfig{DataDir: uc.dataDir, Listen: uc.remote == nil, NATS: uc.remote, Logger: log,
		Registry: reg, Planner: planner.Config{Process: uc.src.Process, LocalSecrets: true}})
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	u := &upServices{sys: sys, log: log}
	fail := func(err error, lnFree bool) (*upServices, error) {
		if lnFree {
			_ = ln.Close()
		}
		_ = u.stop()
		return nil, err
	}
	if err := u.prepare(ctx, opts, uc, reg); err != nil {
		return fail(err, true)
	}
	if err := sys.startStatus(ln); err != nil {
		return fail(err, false)
	}
	if u.notifying = len(uc.cfg.Notifications.Providers) > 0; u.notifying {
		store, err := notificationSecrets(ctx, uc)
		if err != nil {
			return fail(err, false)
		}
		if err := sys.startNotifier(notifier.Config{Notifications: uc.cfg.Notifications, Secrets: store}); err != nil {
			return fail(err, false)
		}
	}
	if err := sys.startWatcher(uc.watcherConfig(), func(watcher.Publisher) watcher.Publisher { return u.pub }); err != nil {
		return fail(err, false)
	}
	return u, nil
}

// prepare registers the bus's metrics, notes where the plans stream stands, and starts what comes before the
// status service: the executors of the committed head, the inputs, the adopter and the planner.
func (u *upServices) prepare(ctx context.Context, opts upOptions, uc upConfig, reg *prometheus.Registry) error {
	sys, log := u.sys, u.log
	if err := metrics.RegisterQueues(reg, metrics.BusQueues(sys.bus), log.With("component", "metrics")); err != nil {
		return err
	}
	if err := notifier.RegisterMetrics(reg); err != nil {
		return err
	}
	if upRegistryObserver != nil {
		upRegistryObserver(reg)
	}
	if uc.remote == nil {
		releaseStaleLeases(ctx, sys.bus, log)
	}
	// What the streams hold before anything runs: a run that ends after this is one of this start's.
	var err error
	if u.plansFrom, err = sys.bus.LastSequence(ctx, bus.StreamPlans, bus.FilterPlans); err != nil {
		return err
	}
	set := newExecutorSet(sys, uc.src.Root, uc.src.Process, pveFlags{}, log.With("component", "executors"))
	if uc.head != nil {
		// The executors of the committed head, before the planner carries on a run an earlier up left open.
		set.prepare(ctx, *uc.head, nil, true)
	}
	// The inputs from outside the repository: a change plans again the clusters rejected for a cause that
	// stays, once it is in effect.
	inputs := newUpInputs(opts, uc.src, set, log.With("component", "inputs"))
	inputs.learn()
	sys.cfg.Planner.CurrentProcess, sys.cfg.Planner.Inputs = inputs.currentProcess, inputs.digest
	sys.wg.Go(func() { inputs.run(sys.rctx, inputsCheckInterval) })
	u.pub = &upPublisher{bus: sys.bus, set: set, inputs: inputs, startup: make(chan startupReport, 1), log: log}
	if err := sys.startAdopter(adopter.Config{Keys: secretsKeys(), LocalSecrets: true, Process: uc.src.Process}); err != nil {
		return err
	}
	return sys.startPlanner()
}

// awaitFirstReconcile waits for the reconcile of the start to be planned, watching that no service stops on
// its own meanwhile (a service that does stops up: the unit's restart brings it back whole). With once it
// returns the first reconcile; without, it keeps serving until ctx ends, and done reports that up is over.
func (u *upServices) awaitFirstReconcile(ctx context.Context, once bool) (first firstReconcile, done bool, err error) {
	type started struct {
		first firstReconcile
		err   error
	}
	begun := make(chan started, 1)
	go func() {
		first, err := startupReconcile(ctx, u.sys, u.pub, u.log)
		begun <- started{first, err}
	}()
	failed := time.NewTicker(time.Second)
	defer failed.Stop()
	for {
		select {
		case <-ctx.Done():
			return first, true, u.stop()
		case <-failed.C:
			if err := u.sys.failed(); err != nil {
				_ = u.stop()
				return first, true, err
			}
		case st := <-begun:
			if st.err != nil {
				if ctx.Err() != nil {
					return first, true, u.stop()
				}
				_ = u.stop()
				return first, true, st.err
			}
			if once {
				return st.first, false, nil
			}
			begun = nil
		}
	}
}

// finishOnce is the end of up --once: it follows the first reconcile to its end, waits until the planners,
// the status service (statusURL) and the notifier have caught up, stops, prints the outcome, and exits 1
// when the cluster did not converge.
func (u *upServices) finishOnce(ctx context.Context, out io.Writer, first firstReconcile, statusURL string) error {
	res, err := followFirstReconcile(ctx, u.sys, first, u.plansFrom)
	if err == nil {
		// A trigger that arrived while the first reconcile ran (a drift tick, a poll) is planned too before
		// the reports are read: they then describe a cluster nobody is about to change.
		waitPlannersIdle(ctx, u.sys.bus, first.clusters, u.log)
		// The reports on disk tell the same story (proxops status after up --once).
		waitStatusCaughtUp(ctx, u.sys.bus, statusURL, u.log)
		if u.notifying {
			waitNotifierCaughtUp(ctx, u.sys.bus, u.log)
		}
	}
	serr := u.stop()
	if err != nil {
		return err
	}
	res.print(out)
	if serr != nil {
		return serr
	}
	if !res.converged() {
		return &exitError{code: 1}
	}
	return nil
}

// waitStatusCaughtUp waits (at most 15 s) until the status service has folded every plan event and result
// published so far.
func waitStatusCaughtUp(ctx context.Context, b *bus.Bus, url string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	want := map[string]uint64{}
	for stream, filter := range map[string]string{bus.StreamPlans: bus.FilterPlans, bus.StreamResults: bus.FilterResults} {
		seq, err := b.LastSequence(ctx, stream, filter)
		if err != nil {
			return
		}
		want[stream] = seq
	}
	for {
		var doc struct {
			Sequences map[string]uint64 `json:"sequences"`
		}
		if err := getJSON(ctx, url, &doc); err == nil {
			caught := true
			for stream, seq := range want {
				caught = caught && doc.Sequences[stream] >= seq
			}
			if caught {
				return
			}
		}
		select {
		case <-ctx.Done():
			log.Warn("the status service has not folded every event yet; stopping anyway")
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitPlannersIdle waits (at most 15 s) until no event waits to be planned and no run is open for the clusters.
func waitPlannersIdle(ctx context.Context, b *bus.Bus, clusters []string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	idle := func() (bool, error) {
		for _, c := range clusters {
			ctl, err := planner.Control(ctx, b, c)
			if err != nil {
				return false, err
			}
			if ctl.Pending() {
				return false, nil
			}
			if ctl.RunID != "" {
				if open, err := runOpen(ctx, b, ctl); err != nil || open {
					return false, err
				}
			}
		}
		return true, nil
	}
	for {
		ok, err := idle()
		if err != nil {
			log.Warn("could not read the planners' state; stopping without waiting for them", "err", err)
			return
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			log.Warn("a plan is still awaited; stopping anyway")
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// getJSON reads a JSON document over HTTP.
func getJSON(ctx context.Context, url string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, res.Status)
	}
	return json.NewDecoder(res.Body).Decode(into)
}

// releaseStaleLeases drops the plan leases a stopped process left in the data directory: it holds the data
// directory's lock, so no other planner drives these clusters, and an open run is carried on at once
// instead of after the lease's TTL.
func releaseStaleLeases(ctx context.Context, b *bus.Bus, log *slog.Logger) {
	keys, err := b.Keys(ctx, bus.BucketLeases)
	if err != nil {
		log.Warn("cannot list the plan leases", "err", err)
		return
	}
	for _, k := range keys {
		if err := b.DeleteKey(ctx, bus.BucketLeases, k); err != nil {
			log.Warn("cannot release a stale plan lease", "lease", k, "err", err)
			continue
		}
		log.Info("released a plan lease left by a stopped process", "lease", k)
	}
}

// startStatus runs the status service with its HTTP server on ln.
func (s *system) startStatus(ln net.Listener) error {
	sb, err := s.connect(s.rctx, "status")
	if err != nil {
		_ = ln.Close()
		return err
	}
	cfg := status.Config{Bus: sb, Logger: s.log.With("service", "status"), Registry: s.cfg.Registry, Listener: ln}
	s.goRun("status", sb, func() error { return status.Run(s.rctx, cfg) })
	return nil
}

// firstReconcile is the reconcile this start of up began (or found open), per cluster.
type firstReconcile struct {
	clusters []string
}

// startupReconcile makes sure every cluster is reconciled now: the watcher's startup announcement does it,
// unless it announced a commit already announced (a restart): then a reconcile is requested for every
// cluster that has no run open (an open run is carried on by the planner, and is this start's reconcile).
func startupReconcile(ctx context.Context, sys *system, pub *upPublisher, log *slog.Logger) (firstReconcile, error) {
	var rep startupReport
	select {
	case rep = <-pub.startup:
	case <-ctx.Done():
		return firstReconcile{}, ctx.Err()
	case <-sys.rctx.Done():
		return firstReconcile{}, sys.failed()
	}
	snap, err := watcher.GetTree(ctx, sys.bus, rep.event.Tree)
	if err != nil {
		return firstReconcile{}, fmt.Errorf("read the announced tree: %w", err)
	}
	var names []string
	for _, n := range repo.LoadWith(snap.FS(), repo.LoadOptions{Process: pub.set.currentProcess(), ConfigOnly: true}).ClusterNames() {
		if bus.ValidateCluster(n) == nil {
			names = append(names, n)
		}
	}
	first := firstReconcile{clusters: names}
	if !rep.duplicate {
		return first, nil
	}
	var idle []string
	for _, n := range names {
		ctl, err := planner.Control(ctx, sys.bus, n)
		if err != nil {
			return first, err
		}
		open := ctl.RunID != ""
		// The event a run served is handled once the run's end is published, even when the command that
		// ran it stopped before the planner recorded that: nothing else waits then.
		served := open && ctl.WantSeq == ctl.RunWantSeq
		if open {
			// A run whose end was published just before the last stop is closed, not open.
			if open, err = runOpen(ctx, sys.bus, ctl); err != nil {
				return first, err
			}
		}
		if !open && (!ctl.Pending() || served) {
			idle = append(idle, n)
		}
	}
	if len(idle) == 0 {
		return first, nil
	}
	id := newRequestID()
	log.Info("commit already announced before this start; requesting a reconcile", "commit", rep.event.Commit,
		"clusters", strings.Join(idle, ","), "request_id", id)
	msg := wire.ReconcileRequestToProto(event.ReconcileRequest{RequestID: id, Clusters: idle, RequestedBy: "proxops up: start"})
	if _, err := sys.bus.Publish(ctx, bus.SubjectReconcileRequest, msg, bus.WithMsgID(id)); err != nil {
		return first, fmt.Errorf("request the first reconcile: %w", err)
	}
	return first, nil
}

// runOpen reports whether the run a cluster's control state names has not published its end.
func runOpen(ctx context.Context, b *bus.Bus, ctl wire.ClusterControl) (bool, error) {
	filter, err := bus.PlanFilter(ctl.Cluster)
	if err != nil {
		return false, err
	}
	closed := false
	err = b.ReadStream(ctx, bus.StreamPlans, filter, ctl.RunPlansSeq+1, func(m *bus.Message) error {
		it, ok := decodePlanEvent(ctx, m)
		switch {
		case !ok:
		case it.finished != nil:
			closed = closed || it.finished.RunID == ctl.RunID
		case it.rejected != nil:
			closed = closed || it.rejected.RunID == ctl.RunID
		}
		return nil
	})
	return !closed, err
}

// onceResult is the outcome of every cluster's first reconcile.
type onceResult struct {
	clusters []string
	outcome  map[string]string
	ok       map[string]bool
}

func (r onceResult) converged() bool {
	for _, c := range r.clusters {
		if !r.ok[c] {
			return false
		}
	}
	return true
}

func (r onceResult) print(w io.Writer) {
	for _, c := range r.clusters {
		fmt.Fprintf(w, "%s: %s\n", c, r.outcome[c])
	}
	if r.converged() {
		fmt.Fprintln(w, "proxops up --once: every cluster converged")
	} else {
		fmt.Fprintln(w, "proxops up --once: not every cluster converged")
	}
}

// followFirstReconcile waits for the first reconcile of every cluster after plansFrom: a rejection, a held
// plan, or a finished run that was not superseded (a superseded run is followed by the plan of the newer
// event). Dry runs (a diff of the running system) are not reconciles.
func followFirstReconcile(ctx context.Context, sys *system, first firstReconcile, plansFrom uint64) (onceResult, error) {
	res := onceResult{clusters: first.clusters, outcome: map[string]string{}, ok: map[string]bool{}}
	pending := map[string]bool{}
	for _, c := range first.clusters {
		pending[c] = true
	}
	if len(pending) == 0 {
		return res, nil
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan item, 64)
	go func() {
		err := sys.bus.Follow(fctx, bus.StreamPlans, []string{bus.FilterPlans}, plansFrom+1, func(m *bus.Message, _ time.Time) error {
			it, ok := decodePlanEvent(fctx, m)
			if !ok {
				return nil
			}
			select {
			case items <- it:
				return nil
			case <-fctx.Done():
				return fctx.Err()
			}
		})
		if err != nil && fctx.Err() == nil {
			select {
			case items <- item{err: err}:
			case <-fctx.Done():
			}
		}
	}()
	// suspended are, per cluster, the guests its plan left alone after an operator's rollback: the cluster
	// does not match git, whatever its run did.
	suspended := map[string][]string{}
	settle := func(cluster, outcome string, ok bool) {
		if !pending[cluster] {
			return
		}
		delete(pending, cluster)
		if refs := suspended[cluster]; ok && len(refs) > 0 {
			outcome = fmt.Sprintf("%s; rolled back by an operator and suspended from correction: %s (drift from git reported, not corrected)",
				outcome, strings.Join(refs, ", "))
			ok = false
		}
		res.outcome[cluster], res.ok[cluster] = outcome, ok
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for len(pending) > 0 {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
			if err := sys.failed(); err != nil {
				return res, err
			}
		case it := <-items:
			switch {
			case it.err != nil:
				return res, it.err
			case it.planned != nil && !it.planned.DryRun:
				suspended[it.planned.Cluster] = nil
				for _, f := range it.planned.Plan.Findings {
					if f.Kind == plan.FindingSuspended {
						suspended[it.planned.Cluster] = append(suspended[it.planned.Cluster], f.Ref)
					}
				}
			case it.rejected != nil && !it.rejected.DryRun:
				settle(it.rejected.Cluster, "rejected ("+it.rejected.Rejection.Reason+"): nothing applied", false)
			case it.held != nil && !it.held.DryRun:
				settle(it.held.Cluster, "plan held: "+it.held.Reason+" (confirm with proxops apply --yes)", false)
			case it.finished != nil && !it.finished.DryRun:
				f := it.finished
				switch {
				case f.Outcome == plan.OutcomeSuperseded:
				case f.Outcome == plan.OutcomeSucceeded && f.Succeeded == 0:
					settle(f.Cluster, "converged (nothing to do)", true)
				case f.Outcome == plan.OutcomeSucceeded:
					settle(f.Cluster, fmt.Sprintf("converged (%d operation%s applied)", f.Succeeded, pluralS(f.Succeeded)), true)
				case f.Outcome == plan.OutcomeNotApplied && len(f.Operations) == 0:
					settle(f.Cluster, "converged (nothing to do)", true)
				case f.Outcome == plan.OutcomeNotApplied:
					settle(f.Cluster, fmt.Sprintf("suspended: %d operation%s not applied", len(f.Operations), pluralS(len(f.Operations))), false)
				default:
					settle(f.Cluster, fmt.Sprintf("%s: %d succeeded, %d failed, %d skipped", f.Outcome, f.Succeeded, f.Failed, f.Skipped), false)
				}
			}
		}
	}
	return res, nil
}
