package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/treestore"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/planner"
	"github.com/proxops/proxops/services/watcher"
)

func init() {
	register(newDiffCommand)
	register(newApplyCommand)
}

// reconcileOptions are the flags of diff and apply.
type reconcileOptions struct {
	nats     natsOptions
	repo     string
	clusters []string
	worktree bool
	output   string
	timeout  time.Duration
	pve      pveFlags
	logLevel string
	global   globalOptions
	cmd      *cobra.Command

	// diff
	exitCode bool
	// apply
	showDiff bool
	yes      bool
	dryRun   bool
	// diff and apply
	moveMisplaced bool
	// rollback: the guest to roll back, and how to confirm it (nil: confirmed by --yes)
	rollback *event.Rollback
	confirm  func(what string) bool
}

func (o *reconcileOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", "", "repository root (default: the repository containing the current directory)")
	f.StringArrayVar(&o.clusters, "cluster", nil, "only this cluster (repeatable)")
	f.BoolVar(&o.worktree, "worktree", false, "plan the files of the work tree as they are, committed or not (default: the committed HEAD)")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	o.nats.flags(f)
	f.BoolVar(&o.moveMisplaced, "move-misplaced", false, "move guests found on another node than their manifest's back to it (the migration policy and latch apply)")
	f.StringVar(&o.pve.tokenID, "pve-token-id", "", "PVE API token name (its secret from PROXOPS_PVE_TOKEN)")
}

// useGlobals takes the global flags of the command being run.
func (o *reconcileOptions) useGlobals(cmd *cobra.Command) {
	o.cmd, o.global = cmd, globalsOf(cmd)
	o.pve.user, o.logLevel = o.global.pveUser, o.global.logLevel
}

func newDiffCommand() *cobra.Command {
	var opts reconcileOptions
	cmd := &cobra.Command{
		Use:   "diff",
		Short: "Show what apply would change, per cluster, without changing anything",
		Long: `diff plans every cluster of the repository (or --cluster) against a fresh observe of PVE through the
real pipeline (watcher, planner, executors) and prints the plans; nothing is written to PVE. It plans the
committed HEAD, or the work tree with --worktree. Without --nats it runs the pipeline in this process on
the data directory shared with proxops up (or talks to the proxops up running there); with --nats it
previews the local tree with a deployed system's planner and executors.

Exit status: 0 when it could plan (with --exit-code: 0 nothing to do, 2 changes); 1 when a cluster was
rejected or the command failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.useGlobals(cmd)
			return runReconcile(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts, false)
		},
	}
	opts.flags(cmd)
	cmd.Flags().BoolVar(&opts.exitCode, "exit-code", false, "exit 2 when there are changes, 0 when there are none")
	cmd.Flags().DurationVar(&opts.timeout, "timeout", 10*time.Minute, "how long to wait for the plans")
	return cmd
}

func newApplyCommand() *cobra.Command {
	var opts reconcileOptions
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Make PVE equal to the repository",
		Long: `apply plans every cluster of the repository (or --cluster) and runs the plans through the real pipeline:
operations go to an executor per node in dependency order, and progress is printed as they start and
finish. It applies the committed HEAD, or the work tree with --worktree. A plan held by the mass-prune
latch waits for confirmation: --yes confirms it. With --nats it asks a deployed system to reconcile its
own repository now and follows that; with --nats and --worktree it applies the local work tree there,
which only an operator user may (--nats-user operator: the deployed system records that user and the
tree's hash).

Exit status: 0 when every plan ran and succeeded; 1 when an operation failed, a cluster was rejected, a
held plan was not confirmed, or the command failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.useGlobals(cmd)
			return runReconcile(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts, !opts.dryRun)
		},
	}
	opts.flags(cmd)
	cmd.Flags().BoolVar(&opts.showDiff, "diff", false, "print each plan before applying it")
	cmd.Flags().BoolVar(&opts.yes, "yes", false, "confirm a plan held by the mass-prune latch")
	cmd.Flags().BoolVarP(&opts.dryRun, "dry-run", "n", false, "plan only, as diff does")
	cmd.Flags().DurationVar(&opts.timeout, "timeout", 2*time.Hour, "how long to wait for the plans to finish")
	return cmd
}

// runReconcile is diff (apply false) and apply.
func runReconcile(ctx context.Context, out, errOut io.Writer, opts reconcileOptions, apply bool) error {
	if opts.output != "text" && opts.output != "json" {
		return fmt.Errorf("--output %q: want text or json", opts.output)
	}
	// apply --nats asks a deployed system to apply its own repository; apply --nats --worktree is an
	// operator's work-tree apply there.
	remoteApply := apply && opts.nats.url != "" && !opts.worktree
	operator := ""
	switch {
	case opts.rollback != nil && opts.nats.url != "":
		if opts.nats.user == "" {
			return errors.New("rollback --nats needs --nats-user: a rollback is asked on the operator user's own subject, and the deployed system records that user")
		}
		operator = opts.nats.user
	case apply && opts.nats.url != "" && opts.worktree:
		if opts.nats.user == "" {
			return errors.New("apply --nats --worktree needs --nats-user: a work tree is applied on the operator user's own subject, and the deployed system records that user")
		}
		operator = opts.nats.user
	case apply && opts.nats.url == "":
		// On one host, whoever holds the data directory is the operator.
		operator = localOperator
	}
	src, err := resolveSource(opts.global, opts.repo, os.LookupEnv)
	if err != nil {
		return err
	}
	if src.URL != "" {
		return reconcileURLMode(ctx, out, errOut, opts, src, apply)
	}
	root := src.Root
	// Reading and parsing the snapshot allocates as much as the system's run does: the collector's target
	// is relaxed for both.
	defer relaxCollector()()
	var snap event.TreeSnapshot
	if opts.worktree {
		snap, err = watcher.SnapshotWorktree(ctx, root)
	} else {
		snap, err = watcher.SnapshotBranch(ctx, root, src.Branch)
		if err != nil {
			err = fmt.Errorf("%w (commit the manifests, or plan the work tree with --worktree)", err)
		}
	}
	if err != nil {
		return err
	}
	files := snap.FS() // one index of the snapshot's files, for the loads and the executors
	// The configuration names the clusters and the data directory. The manifests are parsed here only when
	// this process runs the planner; a running proxops up or a deployed system parses the tree it is sent.
	r := repo.LoadWith(files, repo.LoadOptions{Process: src.Process, ConfigOnly: true})
	selected, err := selectClusters(r, opts.clusters)
	if err != nil {
		return err
	}
	if opts.cmd != nil {
		if opts.nats.dataDir, err = dataDir(opts.cmd.Flags(), opts.nats.dataDir, r.Config, os.LookupEnv); err != nil {
			return err
		}
	}

	var sys *system
	b, dir, release, err := attachBus(ctx, opts.nats)
	if err != nil {
		return err
	}
	defer release()
	if b == nil {
		r = repo.LoadWith(files, repo.LoadOptions{Process: src.Process})
		cfg := systemConfig{DataDir: dir, Repo: root, RequestsOnly: true, ObserveOnly: !apply, Warnings: errOut, Logger: cliLogger(errOut, opts.logLevel),
			Executors: localExecutors(ctx, errOut, r, files, root, selected, opts.pve),
			// A diff never carries on an apply an earlier command left open on the data directory.
			Planner: planner.Config{LocalSecrets: true, PlanOnly: !apply, Process: src.Process,
				// The snapshot is parsed once: the planner plans the tree this command loaded.
				Loaded: map[string]*repo.Repository{snap.Tree: r}}}
		if sys, err = startSystem(ctx, cfg); err != nil {
			return err
		}
		defer func() {
			if err := sys.stop(); err != nil {
				fmt.Fprintf(errOut, "warning: %v\n", err)
			}
		}()
		b = sys.bus
	}
	req := reconcileRequest{bus: b, sys: sys, apply: apply, yes: opts.yes, moveMisplaced: opts.moveMisplaced, clusters: opts.clusters, timeout: opts.timeout,
		process: src.Process, operator: operator, rollback: opts.rollback}
	if !remoteApply {
		req.tree, req.loaded = snap.Tree, r
		if _, err := treestore.PutPreview(ctx, b, snap); err != nil {
			return fmt.Errorf("store the repository snapshot: %w", err)
		}
	}
	if opts.rollback != nil {
		return runRollback(ctx, out, errOut, opts, req)
	}
	res, err := req.run(ctx, newReporter(out, errOut, opts, apply))
	if err != nil {
		return err
	}
	return res.exit(out, opts, apply)
}

// commandGCPercent is the collector's target while diff or apply reads and parses a repository and runs the
// whole system for one reconcile: the heap may grow to three times what is live rather than twice. Parsing
// the repository and decoding every guest's config allocate about 100 KB per guest, and with the default
// target collecting took a fifth of a converged diff of 10,000 guests (and a fifth of parsing 10,000
// guests' manifests); the peak it costs is measured (BenchmarkScale, MB-diff-peak).
const commandGCPercent = 200

// relaxCollector sets commandGCPercent, unless GOGC is set, and returns what puts the previous target back.
func relaxCollector() (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	previous := debug.SetGCPercent(commandGCPercent)
	return func() { debug.SetGCPercent(previous) }
}

// cliLogger logs the in-process services to stderr when --log-level is given, else nothing.
func cliLogger(w io.Writer, level string) *slog.Logger {
	if level == "" {
		return slog.New(slog.DiscardHandler)
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// reconcileURLMode is diff and apply for a remote repository (--git-url, git.url): the proxops up that
// follows it (on the data directory, or --nats) is asked to plan, or apply, the commit it has.
func reconcileURLMode(ctx context.Context, out, errOut io.Writer, opts reconcileOptions, src source, apply bool) error {
	if opts.worktree {
		return errors.New("--worktree plans a local work tree; a remote repository (--git-url, git.url) has none")
	}
	var b *bus.Bus
	var err error
	if opts.nats.url != "" {
		b, err = opts.nats.connectRemote(ctx)
	} else {
		var dir string
		if dir, err = dataDir(opts.cmd.Flags(), opts.nats.dataDir, src.effectiveConfig(nil), os.LookupEnv); err != nil {
			return err
		}
		lock, lerr := lockDataDir(dir)
		switch {
		case lerr == nil:
			lock.release()
			return fmt.Errorf("a remote repository is planned by the proxops up that follows it, and none runs on %s: start proxops up --git-url %s there, or give its --data-dir or --nats", dir, src.URL)
		case !errors.Is(lerr, errDataDirBusy):
			return lerr
		}
		b, err = connectUp(ctx, dir)
	}
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	req := reconcileRequest{bus: b, apply: apply, yes: opts.yes, moveMisplaced: opts.moveMisplaced, clusters: opts.clusters, timeout: opts.timeout, process: src.Process}
	if opts.rollback != nil {
		req.rollback, req.operator = opts.rollback, cmp.Or(opts.nats.user, localOperator)
		return runRollback(ctx, out, errOut, opts, req)
	}
	res, err := req.run(ctx, newReporter(out, errOut, opts, apply))
	if err != nil {
		return err
	}
	return res.exit(out, opts, apply)
}

// selectClusters returns the clusters to reconcile: --cluster (each must exist), or every cluster.
func selectClusters(r *repo.Repository, wanted []string) ([]string, error) {
	known := r.ClusterNames()
	if len(wanted) == 0 {
		return known, nil
	}
	var out []string
	for _, c := range wanted {
		if !slices.Contains(known, c) {
			return nil, fmt.Errorf("--cluster %q is not in the repository (known: [%s])", c, strings.Join(known, " "))
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// reconcileRequest asks the watcher for one reconcile and follows its plans to their end.
type reconcileRequest struct {
	bus      *bus.Bus
	sys      *system
	apply    bool
	yes      bool
	clusters []string
	// tree is the stored snapshot to reconcile; empty asks for the deployed watcher's current commit.
	tree string
	// operator, for an apply of tree, is the user whose work-tree apply subject the request goes to;
	// empty sends an ordinary request (a tree is then only ever planned as a dry run).
	operator string
	// moveMisplaced asks the plans to move misplaced guests back to their manifest's node.
	moveMisplaced bool
	// rollback asks for an operator's rollback of one guest instead of a reconcile.
	rollback *event.Rollback
	timeout  time.Duration
	// process is laid over the announced tree's proxops.yaml to find its clusters (--config, flags).
	process *repo.Config
	// loaded is tree as this command loaded it with process (its configuration at least), when it did: its
	// clusters are not read again.
	loaded *repo.Repository
}

// clusterRun is what came back for one cluster.
type clusterRun struct {
	planned   *plan.Planned
	rejected  *plan.Rejected
	held      *plan.Held
	finished  *plan.FinishedRun
	confirmed bool
}

// done says nothing more is to come for the cluster: rejected, finished, or held by the latch for an apply
// that does not confirm it.
func (q reconcileRequest) done(c *clusterRun) bool {
	return c.rejected != nil || c.finished != nil || (q.apply && c.held != nil && !q.yes)
}

// reconcileResult is every cluster's outcome.
type reconcileResult struct {
	clusters map[string]*clusterRun
	names    []string
}

// item is one message the request follows.
type item struct {
	repoChanged *event.RepoChanged
	planned     *plan.Planned
	rejected    *plan.Rejected
	held        *plan.Held
	finished    *plan.FinishedRun
	result      *plan.Result
	// seq is the stream sequence of a result.
	seq uint64
	err error
}

// reconcileFollow is one reconcile request in flight: what the steps of run read and extend.
type reconcileFollow struct {
	q         reconcileRequest
	rep       *reporter
	requestID string
	items     chan item
	res       *reconcileResult
	runs      map[string]string        // run id → cluster
	early     map[string][]plan.Result // results of runs not seen planned yet
	// The stream positions the request follows from.
	repoFrom, plansFrom, resultsFrom uint64
	// Results and plan events come on two streams: a run's end can be read before its last results. Once
	// every cluster is done, the results published by then are read too, so every operation's end is shown.
	resultsSeen, drainTo uint64
	drainUntil           time.Time
	// Who answers the request, checked once the watcher announced it (see checkOwners).
	eventID    string
	eventSeq   uint64
	answeredAt time.Time
	lastCheck  time.Time
	// suspect holds the clusters an owner check found unanswered once (a second finding is the error);
	// freeSince when each open cluster's lease was first seen free.
	suspect   map[string]bool
	freeSince map[string]time.Time
}

// ownerGrace is how long an unanswered cluster may go without an owner (a planner that took the event, a
// planner holding the cluster's lease) before the request is given up with what it waited for.
const ownerGrace = time.Minute

// run asks for the reconcile and follows it: mark the streams' ends, follow them, ask, wait for every cluster.
func (q reconcileRequest) run(ctx context.Context, rep *reporter) (*reconcileResult, error) {
	ctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	f := &reconcileFollow{q: q, rep: rep, requestID: newRequestID(), items: make(chan item, 256),
		res: &reconcileResult{clusters: map[string]*clusterRun{}}, runs: map[string]string{}, early: map[string][]plan.Result{},
		suspect: map[string]bool{}, freeSince: map[string]time.Time{}}
	if err := f.markPositions(ctx); err != nil {
		return nil, err
	}
	fctx, stopFollow := context.WithCancel(ctx)
	defer stopFollow()
	f.followStreams(fctx)
	if err := f.ask(ctx); err != nil {
		return nil, err
	}
	return f.wait(ctx)
}

// markPositions notes where the streams end before the request, so only its answers are read.
func (f *reconcileFollow) markPositions(ctx context.Context) error {
	var err error
	if f.repoFrom, err = f.q.bus.LastSequence(ctx, bus.StreamRepo, bus.SubjectRepoChanged); err != nil {
		return err
	}
	if f.plansFrom, err = f.q.bus.LastSequence(ctx, bus.StreamPlans, bus.FilterPlans); err != nil {
		return err
	}
	if f.resultsFrom, err = f.q.bus.LastSequence(ctx, bus.StreamResults, bus.FilterResults); err != nil {
		return err
	}
	f.resultsSeen = f.resultsFrom
	return nil
}

// followStreams follows the repository events, the plan events and, for an apply, the results into items.
func (f *reconcileFollow) followStreams(ctx context.Context) {
	f.follow(ctx, bus.StreamRepo, bus.SubjectRepoChanged, f.repoFrom, func(m *bus.Message) (item, bool) {
		ev, err := wire.DecodeRepoChanged(ctx, m.Decode)
		if err != nil || ev.RequestID != f.requestID {
			return item{}, false
		}
		return item{repoChanged: &ev, seq: m.Sequence}, true
	})
	f.follow(ctx, bus.StreamPlans, bus.FilterPlans, f.plansFrom, func(m *bus.Message) (item, bool) { return decodePlanEvent(ctx, m) })
	if f.q.apply {
		f.follow(ctx, bus.StreamResults, bus.FilterResults, f.resultsFrom, func(m *bus.Message) (item, bool) {
			r, err := wire.DecodeResult(ctx, m.Decode)
			if err != nil {
				return item{}, false
			}
			return item{result: &r, seq: m.Sequence}, true
		})
	}
}

// follow reads one stream after from in the background, decoding the messages it wants into items.
func (f *reconcileFollow) follow(ctx context.Context, stream, filter string, from uint64, decode func(*bus.Message) (item, bool)) {
	go func() {
		err := f.q.bus.Follow(ctx, stream, []string{filter}, from+1, func(m *bus.Message, _ time.Time) error {
			it, ok := decode(m)
			if !ok {
				return nil
			}
			select {
			case f.items <- it:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if err != nil && ctx.Err() == nil {
			select {
			case f.items <- item{err: err}:
			case <-ctx.Done():
			}
		}
	}()
}

// localOperator is the user a work-tree apply on one host is recorded as: whoever holds the data directory.
const localOperator = "local"

// ask publishes the reconcile request: on the operator's work-tree apply subject for an apply of a tree,
// else on the reconcile subject.
func (f *reconcileFollow) ask(ctx context.Context) error {
	msg := wire.ReconcileRequestToProto(event.ReconcileRequest{RequestID: f.requestID, Clusters: f.q.clusters, DryRun: !f.q.apply,
		Tree: f.q.tree, RequestedBy: requestedBy(), MoveMisplaced: f.q.moveMisplaced, Rollback: f.q.rollback})
	subject := bus.SubjectReconcileRequest
	if f.q.apply && f.q.operator != "" && (f.q.tree != "" || f.q.rollback != nil) {
		var err error
		if subject, err = bus.WorktreeApplySubject(f.q.operator); err != nil {
			return fmt.Errorf("ask for a work-tree apply: %w", err)
		}
	}
	if _, err := f.q.bus.Publish(ctx, subject, msg, bus.WithMsgID(f.requestID)); err != nil {
		return fmt.Errorf("ask for a reconcile: %w", err)
	}
	return nil
}

// wait handles what comes back until every cluster is settled, the context ends or the watcher stays silent.
func (f *reconcileFollow) wait(ctx context.Context) (*reconcileResult, error) {
	// A deployed watcher busy with a long fetch answers late; an in-process one at once.
	answered := time.NewTimer(time.Minute)
	defer answered.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if f.settled(ctx) {
			return f.res, nil
		}
		select {
		case <-ctx.Done():
			if f.res.names == nil {
				return nil, fmt.Errorf("no answer to reconcile request %s: %w", f.requestID, ctx.Err())
			}
			var open []string
			for _, n := range f.q.open(f.res) {
				open = append(open, n+" ("+f.waitingFor(n)+")")
			}
			return nil, fmt.Errorf("waiting for the plans of request %s: %w (clusters still open: %s)", f.requestID, ctx.Err(),
				strings.Join(open, ", "))
		case <-answered.C:
			if f.res.names == nil {
				return nil, fmt.Errorf("the watcher did not answer reconcile request %s within a minute (is a watcher running?)", f.requestID)
			}
		case <-tick.C:
			if f.q.sys != nil {
				if err := f.q.sys.failed(); err != nil {
					return nil, err
				}
			}
			f.rep.tick()
			if err := f.checkOwners(ctx); err != nil {
				return nil, err
			}
		case it := <-f.items:
			if err := f.handle(ctx, it); err != nil {
				return nil, err
			}
		}
	}
}

// settled says every cluster is done and, for an apply, the results published by then are read (or five
// seconds have passed reading them).
func (f *reconcileFollow) settled(ctx context.Context) bool {
	if f.res.names == nil || len(f.q.open(f.res)) > 0 {
		return false
	}
	if !f.q.apply {
		return true
	}
	if f.drainTo == 0 {
		last, err := f.q.bus.LastSequence(ctx, bus.StreamResults, bus.FilterResults)
		if err != nil {
			return true
		}
		f.drainTo, f.drainUntil = max(last, 1), time.Now().Add(5*time.Second)
	}
	return f.resultsSeen >= f.drainTo || time.Now().After(f.drainUntil)
}

// handle passes one item to the step for its kind.
func (f *reconcileFollow) handle(ctx context.Context, it item) error {
	switch {
	case it.err != nil:
		return it.err
	case it.repoChanged != nil:
		f.eventID, f.eventSeq, f.answeredAt = it.repoChanged.EventID, it.seq, time.Now()
		return f.onRepoChanged(ctx, *it.repoChanged)
	case it.planned != nil:
		f.onPlanned(it.planned)
	case it.rejected != nil:
		f.onRejected(it.rejected)
	case it.held != nil:
		return f.onHeld(ctx, it.held)
	case it.finished != nil:
		f.onFinished(it.finished)
	case it.result != nil:
		f.onResult(*it.result, it.seq)
	}
	return nil
}

// onRepoChanged learns the clusters the request covers from the watcher's answer.
func (f *reconcileFollow) onRepoChanged(ctx context.Context, ev event.RepoChanged) error {
	names, err := f.q.clusterNames(ctx, ev)
	if err != nil {
		return err
	}
	f.res.names = names
	for _, n := range names {
		f.res.clusters[n] = &clusterRun{}
	}
	return nil
}

// onPlanned notes a plan of the request and shows the results that overtook it.
func (f *reconcileFollow) onPlanned(p *plan.Planned) {
	if !p.Answers(f.requestID) {
		return
	}
	f.res.cluster(p.Cluster).planned = p
	f.runs[p.RunID] = p.Cluster
	f.rep.planned(*p)
	for _, r := range f.early[p.RunID] {
		f.rep.result(r)
	}
	delete(f.early, p.RunID)
}

func (f *reconcileFollow) onRejected(rj *plan.Rejected) {
	if !rj.Answers(f.requestID) {
		return
	}
	f.res.cluster(rj.Cluster).rejected = rj
	f.rep.rejected(*rj)
}

// onHeld notes a plan held by the mass-prune latch and confirms it when the apply was given --yes.
func (f *reconcileFollow) onHeld(ctx context.Context, h *plan.Held) error {
	cl, ok := f.runs[h.RunID]
	if !ok {
		return nil
	}
	c := f.res.cluster(cl)
	c.held = h
	if f.q.apply && f.q.yes && !c.confirmed {
		if err := planner.Confirm(ctx, f.q.bus, cl, h.PlanID, requestedBy()); err != nil {
			return fmt.Errorf("confirm the held plan of %s: %w", cl, err)
		}
		c.confirmed = true
	}
	f.rep.held(*h, c.confirmed)
	return nil
}

func (f *reconcileFollow) onFinished(fr *plan.FinishedRun) {
	if !fr.Answers(f.requestID) {
		return
	}
	f.res.cluster(fr.Cluster).finished = fr
	f.rep.finished(*fr)
}

// onResult shows an operation's result, or keeps it until its run's plan is seen.
func (f *reconcileFollow) onResult(r plan.Result, seq uint64) {
	f.resultsSeen = max(f.resultsSeen, seq)
	if _, ok := f.runs[r.RunID]; ok {
		f.rep.result(r)
	} else if len(f.early) < 1024 {
		// A result can overtake its run's plan event: keep it until the plan is seen.
		f.early[r.RunID] = append(f.early[r.RunID], r)
	}
}

// waitingFor says what an open cluster waits for.
func (f *reconcileFollow) waitingFor(cluster string) string {
	c := f.res.clusters[cluster]
	switch {
	case c == nil || c.planned == nil:
		return "no plan yet for event " + f.eventID
	case c.held != nil:
		return "run " + c.planned.RunID + " is held until confirmed"
	default:
		return "run " + c.planned.RunID + " has not finished"
	}
}

// checkOwners makes sure every open cluster has someone who will answer, every 5 s once the watcher
// announced the request's event and ownerGrace has passed: a planner took the event (and, for an apply,
// recorded the request in the cluster's control state), and a planner drives each cluster an apply waits
// on. A cluster without one, found twice in a row, ends the request with what it waited for.
func (f *reconcileFollow) checkOwners(ctx context.Context) error {
	if f.res.names == nil || time.Since(f.answeredAt) < ownerGrace || time.Since(f.lastCheck) < 5*time.Second {
		return nil
	}
	f.lastCheck = time.Now()
	for _, n := range f.q.open(f.res) {
		why := f.unowned(ctx, n)
		if why == "" {
			delete(f.suspect, n)
			continue
		}
		if f.suspect[n] {
			return fmt.Errorf("request %s, cluster %s: %s", f.requestID, n, why)
		}
		f.suspect[n] = true
	}
	return nil
}

// unowned says why nobody will answer an open cluster, or "" when someone will (or it cannot be told).
func (f *reconcileFollow) unowned(ctx context.Context, cluster string) string {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := f.res.clusters[cluster]
	if c == nil || c.planned == nil {
		taken, handled, err := f.eventTaken(cctx)
		switch {
		case err != nil:
			return ""
		case !taken:
			return fmt.Sprintf("no planner took event %s within %s of the watcher's announcement (is a planner running?)",
				f.eventID, time.Since(f.answeredAt).Round(time.Second))
		case !f.q.apply && handled:
			return fmt.Sprintf("the planner handled event %s without a plan or a rejection for this cluster (see the planner's log)", f.eventID)
		}
		if f.q.apply && handled {
			ctl, err := planner.Control(cctx, f.q.bus, cluster)
			if err == nil && !ctl.Answers(f.requestID) {
				return fmt.Sprintf("the planner handled event %s but did not record the request for this cluster (see the planner's log)", f.eventID)
			}
		}
	}
	if !f.q.apply {
		return ""
	}
	key, err := bus.LeaseKey(cluster)
	if err != nil {
		return ""
	}
	if _, held, err := f.q.bus.LeaseHolder(cctx, key); err != nil || held {
		delete(f.freeSince, cluster)
		return ""
	}
	since, ok := f.freeSince[cluster]
	if !ok {
		f.freeSince[cluster] = time.Now()
		return ""
	}
	if free := time.Since(since); free >= ownerGrace {
		return fmt.Sprintf("%s, and no planner drives the cluster (its lease has been free for %s; is a planner running?)",
			f.waitingFor(cluster), free.Round(time.Second))
	}
	return ""
}

// eventTaken reports whether the planners' consumer was handed the request's event, and whether it is
// handled (acknowledged).
func (f *reconcileFollow) eventTaken(ctx context.Context) (taken, handled bool, err error) {
	c, err := f.q.bus.JetStream().Consumer(ctx, bus.StreamRepo, bus.ConsumerPlannerRepo)
	if err != nil {
		return false, false, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false, false, err
	}
	return info.Delivered.Stream >= f.eventSeq, info.AckFloor.Stream >= f.eventSeq, nil
}

// clusterNames are the clusters a repository event covers.
func (q reconcileRequest) clusterNames(ctx context.Context, ev event.RepoChanged) ([]string, error) {
	names := ev.Clusters
	switch {
	case len(names) == 0 && q.loaded != nil && ev.Tree == q.tree:
		names = q.loaded.ClusterNames()
	case len(names) == 0:
		snap, err := treestore.Get(ctx, q.bus, ev.Tree)
		if err != nil {
			return nil, fmt.Errorf("read the announced tree %s: %w", ev.Tree, err)
		}
		names = repo.LoadWith(snap.FS(), repo.LoadOptions{Process: q.process, ConfigOnly: true}).ClusterNames()
	}
	var out []string
	for _, n := range names {
		if bus.ValidateCluster(n) == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func decodePlanEvent(ctx context.Context, m *bus.Message) (item, bool) {
	switch {
	case strings.HasSuffix(m.Subject, "."+string(bus.PlanPlanned)):
		v, err := wire.DecodePlanned(ctx, m.Decode)
		return item{planned: &v}, err == nil
	case strings.HasSuffix(m.Subject, "."+string(bus.PlanRejected)):
		v, err := wire.DecodeRejected(ctx, m.Decode)
		return item{rejected: &v}, err == nil
	case strings.HasSuffix(m.Subject, "."+string(bus.PlanHeld)):
		v, err := wire.DecodeHeld(ctx, m.Decode)
		return item{held: &v}, err == nil
	case strings.HasSuffix(m.Subject, "."+string(bus.PlanFinished)):
		v, err := wire.DecodeFinished(ctx, m.Decode)
		return item{finished: &v}, err == nil
	}
	return item{}, false
}

func (r *reconcileResult) cluster(name string) *clusterRun {
	c, ok := r.clusters[name]
	if !ok {
		c = &clusterRun{}
		r.clusters[name] = c
	}
	return c
}

// open lists the clusters still waited for.
func (q reconcileRequest) open(r *reconcileResult) []string {
	var out []string
	for _, n := range r.names {
		if !q.done(r.clusters[n]) {
			out = append(out, n)
		}
	}
	return out
}

// newRequestID is a unique request id.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("cli-%x-%s", time.Now().UTC().Unix(), hex.EncodeToString(b[:]))
}

// requestedBy says who asked, for logs and status: cli:<user>@<host>.
func requestedBy() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return "cli:" + name + "@" + host
}
