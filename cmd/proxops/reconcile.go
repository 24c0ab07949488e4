package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/repo"
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
}

func (o *reconcileOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", "", "repository root (default: the repository containing the current directory)")
	f.StringArrayVar(&o.clusters, "cluster", nil, "only this cluster (repeatable)")
	f.BoolVar(&o.worktree, "worktree", false, "plan the files of the work tree as they are, committed or not (default: the committed HEAD)")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	o.nats.flags(f)
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
own repository now and follows that (a local tree is never applied remotely).

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
	remoteApply := apply && opts.nats.url != ""
	if remoteApply && opts.worktree {
		return errors.New("apply --nats applies the deployed system's own repository; a local work tree can only be previewed (diff --nats --worktree)")
	}
	src, err := resolveSource(opts.global, opts.repo, os.LookupEnv)
	if err != nil {
		return err
	}
	if src.URL != "" {
		return reconcileURLMode(ctx, out, errOut, opts, src, apply)
	}
	root := src.Root
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
	r := repo.LoadWith(snap.FS(), repo.LoadOptions{Process: src.Process})
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
		cfg := systemConfig{DataDir: dir, Repo: root, RequestsOnly: true, ObserveOnly: !apply, Warnings: errOut, Logger: cliLogger(errOut, opts.logLevel),
			Executors: localExecutors(ctx, errOut, r, snap.FS(), root, selected, opts.pve),
			// A diff never carries on an apply an earlier command left open on the data directory.
			Planner: planner.Config{LocalSecrets: true, PlanOnly: !apply, Process: src.Process}}
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
	req := reconcileRequest{bus: b, sys: sys, apply: apply, yes: opts.yes, clusters: opts.clusters, timeout: opts.timeout,
		process: src.Process}
	if !remoteApply {
		req.tree = snap.Tree
		if _, err := b.PutObjectIfAbsent(ctx, bus.ObjectTrees, snap.Tree, wire.TreeSnapshotToProto(snap)); err != nil {
			return fmt.Errorf("store the repository snapshot: %w", err)
		}
	}
	res, err := req.run(ctx, newReporter(out, errOut, opts, apply))
	if err != nil {
		return err
	}
	return res.exit(out, opts, apply)
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
	req := reconcileRequest{bus: b, apply: apply, yes: opts.yes, clusters: opts.clusters, timeout: opts.timeout, process: src.Process}
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
	tree    string
	timeout time.Duration
	// process is laid over the announced tree's proxops.yaml to find its clusters (--config, flags).
	process *repo.Config
}

// clusterRun is what came back for one cluster.
type clusterRun struct {
	planned   *plan.Planned
	rejected  *plan.Rejected
	held      *plan.Held
	finished  *plan.FinishedRun
	confirmed bool
}

func (c *clusterRun) done(apply, yes bool) bool {
	return c.rejected != nil || c.finished != nil || (apply && c.held != nil && !yes)
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

func (q reconcileRequest) run(ctx context.Context, rep *reporter) (*reconcileResult, error) {
	ctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	repoFrom, err := q.bus.LastSequence(ctx, bus.StreamRepo, bus.SubjectRepoChanged)
	if err != nil {
		return nil, err
	}
	plansFrom, err := q.bus.LastSequence(ctx, bus.StreamPlans, bus.FilterPlans)
	if err != nil {
		return nil, err
	}
	resultsFrom, err := q.bus.LastSequence(ctx, bus.StreamResults, bus.FilterResults)
	if err != nil {
		return nil, err
	}
	items := make(chan item, 256)
	fctx, stopFollow := context.WithCancel(ctx)
	defer stopFollow()
	follow := func(stream, filter string, from uint64, decode func(*bus.Message) (item, bool)) {
		go func() {
			err := q.bus.Follow(fctx, stream, []string{filter}, from+1, func(m *bus.Message, _ time.Time) error {
				it, ok := decode(m)
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
	}
	requestID := newRequestID()
	follow(bus.StreamRepo, bus.SubjectRepoChanged, repoFrom, func(m *bus.Message) (item, bool) {
		ev, err := wire.DecodeRepoChanged(ctx, m.Decode)
		if err != nil || ev.RequestID != requestID {
			return item{}, false
		}
		return item{repoChanged: &ev}, true
	})
	follow(bus.StreamPlans, bus.FilterPlans, plansFrom, func(m *bus.Message) (item, bool) { return decodePlanEvent(ctx, m) })
	if q.apply {
		follow(bus.StreamResults, bus.FilterResults, resultsFrom, func(m *bus.Message) (item, bool) {
			r, err := wire.DecodeResult(ctx, m.Decode)
			if err != nil {
				return item{}, false
			}
			return item{result: &r, seq: m.Sequence}, true
		})
	}

	msg := wire.ReconcileRequestToProto(event.ReconcileRequest{RequestID: requestID, Clusters: q.clusters, DryRun: !q.apply,
		Tree: q.tree, RequestedBy: requestedBy()})
	if _, err := q.bus.Publish(ctx, bus.SubjectReconcileRequest, msg, bus.WithMsgID(requestID)); err != nil {
		return nil, fmt.Errorf("ask for a reconcile: %w", err)
	}

	res := &reconcileResult{clusters: map[string]*clusterRun{}}
	runs := map[string]string{}         // run id → cluster
	early := map[string][]plan.Result{} // results of runs not seen planned yet
	// A deployed watcher busy with a long fetch answers late; an in-process one at once.
	answered := time.NewTimer(time.Minute)
	defer answered.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// Results and plan events come on two streams: a run's end can be read before its last results. Once
	// every cluster is done, the results published by then are read too, so every operation's end is shown.
	resultsSeen, drainTo, drainUntil := resultsFrom, uint64(0), time.Time{}
	for {
		if res.names != nil && res.complete(q.apply, q.yes) {
			if !q.apply {
				return res, nil
			}
			if drainTo == 0 {
				last, err := q.bus.LastSequence(ctx, bus.StreamResults, bus.FilterResults)
				if err != nil {
					return res, nil
				}
				drainTo, drainUntil = max(last, 1), time.Now().Add(5*time.Second)
			}
			if resultsSeen >= drainTo || time.Now().After(drainUntil) {
				return res, nil
			}
		}
		select {
		case <-ctx.Done():
			if res.names == nil {
				return nil, fmt.Errorf("no answer to reconcile request %s: %w", requestID, ctx.Err())
			}
			return nil, fmt.Errorf("waiting for the plans of request %s: %w (clusters still open: %s)", requestID, ctx.Err(),
				strings.Join(res.open(q.apply, q.yes), ", "))
		case <-answered.C:
			if res.names == nil {
				return nil, fmt.Errorf("the watcher did not answer reconcile request %s within a minute (is a watcher running?)", requestID)
			}
		case <-tick.C:
			if q.sys != nil {
				if err := q.sys.failed(); err != nil {
					return nil, err
				}
			}
			rep.tick()
		case it := <-items:
			if it.err != nil {
				return nil, it.err
			}
			switch {
			case it.repoChanged != nil:
				names, err := q.clusterNames(ctx, *it.repoChanged)
				if err != nil {
					return nil, err
				}
				res.names = names
				for _, n := range names {
					res.clusters[n] = &clusterRun{}
				}
			case it.planned != nil:
				p := it.planned
				if p.RequestID != requestID {
					continue
				}
				c := res.cluster(p.Cluster)
				c.planned = p
				runs[p.RunID] = p.Cluster
				rep.planned(*p)
				for _, r := range early[p.RunID] {
					rep.result(r)
				}
				delete(early, p.RunID)
			case it.rejected != nil:
				if it.rejected.RequestID != requestID {
					continue
				}
				res.cluster(it.rejected.Cluster).rejected = it.rejected
				rep.rejected(*it.rejected)
			case it.held != nil:
				cl, ok := runs[it.held.RunID]
				if !ok {
					continue
				}
				c := res.cluster(cl)
				c.held = it.held
				if q.apply && q.yes && !c.confirmed {
					if err := planner.Confirm(ctx, q.bus, cl, it.held.PlanID, requestedBy()); err != nil {
						return nil, fmt.Errorf("confirm the held plan of %s: %w", cl, err)
					}
					c.confirmed = true
				}
				rep.held(*it.held, c.confirmed)
			case it.finished != nil:
				if it.finished.RequestID != requestID {
					continue
				}
				res.cluster(it.finished.Cluster).finished = it.finished
				rep.finished(*it.finished)
			case it.result != nil:
				resultsSeen = max(resultsSeen, it.seq)
				r := *it.result
				if _, ok := runs[r.RunID]; ok {
					rep.result(r)
				} else if len(early) < 1024 {
					// A result can overtake its run's plan event: keep it until the plan is seen.
					early[r.RunID] = append(early[r.RunID], r)
				}
			}
		}
	}
}

// clusterNames are the clusters a repository event covers.
func (q reconcileRequest) clusterNames(ctx context.Context, ev event.RepoChanged) ([]string, error) {
	names := ev.Clusters
	if len(names) == 0 {
		snap, err := wire.DecodeTreeSnapshot(ctx, func(ctx context.Context, into proto.Message) error {
			return q.bus.GetObject(ctx, bus.ObjectTrees, ev.Tree, into)
		})
		if err != nil {
			return nil, fmt.Errorf("read the announced tree %s: %w", ev.Tree, err)
		}
		names = repo.LoadWith(snap.FS(), repo.LoadOptions{Process: q.process}).ClusterNames()
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

func (r *reconcileResult) complete(apply, yes bool) bool { return len(r.open(apply, yes)) == 0 }

func (r *reconcileResult) open(apply, yes bool) []string {
	var out []string
	for _, n := range r.names {
		if !r.clusters[n].done(apply, yes) {
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
