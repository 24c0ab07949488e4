package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/executor"
	"github.com/proxops/proxops/services/watcher"
)

// prepareTimeout bounds the work done for one tree before its event is published (decrypting, listing a
// cluster's nodes, starting executors).
const prepareTimeout = 2 * time.Minute

// executorSet keeps proxops up's executors in step with the repository. Before the watcher publishes an
// event, the set reads the event's tree and makes sure every node of every cluster has a serving executor
// with the tree's endpoint, and that each cluster's credentials (from its secrets file, the environment,
// proxops.yaml) are the ones the tree gives: a token rotated in a committed secrets file is used by the plan
// of that very commit, without a restart. The planner only sees the event once it is published, so the
// executors are ready for it.
type executorSet struct {
	sys       *system
	root      string
	process   *repo.Config
	flags     pveFlags
	decryptor *secrets.Decryptor
	env       func() map[string]string
	log       *slog.Logger

	mu      sync.Mutex
	running map[string]*runningExecutor
	creds   map[string]*credentialHolder
	// prepared is the last tree prepared for an applied event (a preview never changes credentials), last
	// its snapshot.
	prepared string
	last     *event.TreeSnapshot
	// hostFiles are, per cluster, the files of this host its setup read (CA file, host secrets file).
	hostFiles map[string][]string
}

// currentProcess is the process configuration laid over every tree now.
func (s *executorSet) currentProcess() *repo.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.process
}

// setProcess replaces the process configuration (a reloaded --config file); the next prepare uses it.
func (s *executorSet) setProcess(p *repo.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.process = p
}

// files returns, per cluster, the files of this host the last setups read.
func (s *executorSet) files() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]string, len(s.hostFiles))
	for c, fs := range s.hostFiles {
		out[c] = slices.Clone(fs)
	}
	return out
}

// refresh prepares the last applied tree again, whether or not it changed: the configuration, a secrets
// file or a CA file on this host did. Credentials are read again and executors whose settings changed are
// restarted.
func (s *executorSet) refresh(ctx context.Context) {
	s.mu.Lock()
	snap := s.last
	s.prepared = ""
	s.mu.Unlock()
	if snap != nil {
		s.prepare(ctx, *snap, nil, true)
	}
}

func newExecutorSet(sys *system, root string, process *repo.Config, flags pveFlags, log *slog.Logger) *executorSet {
	return &executorSet{sys: sys, root: root, process: process, flags: flags, log: log,
		decryptor: secrets.NewDecryptor(secretsKeys()),
		env:       func() map[string]string { return secrets.PVEEnvironment(os.LookupEnv) },
		running:   map[string]*runningExecutor{}, creds: map[string]*credentialHolder{}, hostFiles: map[string][]string{}}
}

// credentialHolder is one cluster's current credentials: what its executors are given before each observe
// and operation.
type credentialHolder struct {
	mu    sync.Mutex
	creds executor.Credentials
	err   error
}

var _ executor.CredentialSource = (*credentialHolder)(nil)

func (h *credentialHolder) Current(context.Context) (executor.Credentials, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.creds, h.err
}

func (h *credentialHolder) set(c executor.Credentials, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.creds, h.err = c, err
}

// prepare makes the executors ready for a tree: applied says the event will be applied (its credentials
// become the cluster's); a preview only adds the executors it needs, with its own tree's credentials for a
// cluster that had none.
func (s *executorSet) prepare(ctx context.Context, snap event.TreeSnapshot, clusters []string, applied bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if applied && snap.Tree == s.prepared {
		return
	}
	if applied {
		s.last = &snap
	}
	r := repo.LoadWith(snap.FS(), repo.LoadOptions{Process: s.process})
	names := clusters
	if len(names) == 0 {
		names = r.ClusterNames()
	}
	env := s.env()
	complete := true
	for _, name := range names {
		if bus.ValidateCluster(name) != nil {
			continue
		}
		cs, ok := setupCluster(ctx, r, snap.FS(), s.root, name, s.flags, s.decryptor, env)
		if !ok {
			continue
		}
		if applied || s.hostFiles[name] == nil {
			s.hostFiles[name] = append([]string{}, cs.hostFiles...)
		}
		holder, known := s.creds[name]
		if !known {
			holder = &credentialHolder{}
			s.creds[name] = holder
		}
		if applied || !known {
			switch {
			case cs.secretsBroken:
				holder.set(executor.Credentials{}, fmt.Errorf("the secrets file cannot be read: %w", cs.problem))
			case cs.problem != nil && cs.creds.TokenID == "" && cs.creds.User == "":
				holder.set(executor.Credentials{}, cs.problem)
			default:
				holder.set(cs.creds, nil)
			}
		}
		if cs.problem != nil {
			// Tried again with the next event of this tree (a drift tick, a request).
			complete = false
			s.log.Warn("a cluster's executors cannot be set up", "cluster", name, "err", cs.problem)
		}
		for _, spec := range cs.specs(holder) {
			s.ensure(ctx, spec)
		}
	}
	if applied && complete {
		s.prepared = snap.Tree
	}
}

// ensure starts an executor for a node that has none, and restarts one whose endpoint or settings changed.
func (s *executorSet) ensure(ctx context.Context, spec executorSpec) {
	key := spec.Cluster + "/" + spec.Node
	if r, ok := s.running[key]; ok {
		if sameExecutor(r.spec, spec) {
			return
		}
		s.log.Info("executor settings changed; restarting it", "cluster", spec.Cluster, "node", spec.Node)
		r.stop()
		delete(s.running, key)
	}
	r, err := s.sys.startExecutor(ctx, spec)
	if err != nil {
		s.log.Error("cannot start executor", "cluster", spec.Cluster, "node", spec.Node, "err", err)
		return
	}
	if r != nil {
		s.running[key] = r
	}
}

// sameExecutor reports whether two specs run the same executor (credentials aside: they are refreshed in
// place).
func sameExecutor(a, b executorSpec) bool {
	ea, eb := a.PVE, b.PVE
	return ea.BaseURL == eb.BaseURL && ea.CAFile == eb.CAFile && a.CASum == b.CASum && ea.Insecure == eb.Insecure && ea.TaskTimeout == eb.TaskTimeout &&
		a.RepoBaseURL == b.RepoBaseURL && slices.Equal(a.AllowedNodes, b.AllowedNodes) && a.Concurrency == b.Concurrency &&
		a.StorageConcurrency == b.StorageConcurrency && a.LockWait == b.LockWait
}

// startupReport is what became of the watcher's first announcement.
type startupReport struct {
	event     event.RepoChanged
	seq       uint64
	duplicate bool
}

// upPublisher is the watcher's publisher in proxops up: it prepares the executors for an event's tree, then
// publishes the event, and reports the first startup announcement.
type upPublisher struct {
	bus     *bus.Bus
	set     *executorSet
	inputs  *upInputs
	startup chan startupReport
	once    sync.Once
	log     *slog.Logger
}

var _ watcher.Publisher = (*upPublisher)(nil)

func (p *upPublisher) PublishRepoChanged(ctx context.Context, ev event.RepoChanged) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), prepareTimeout)
	snap, err := watcher.GetTree(pctx, p.bus, ev.Tree)
	if err != nil {
		p.log.Warn("cannot read the announced tree to prepare the executors", "tree", ev.Tree, "err", err)
	} else {
		p.set.prepare(pctx, snap, ev.Clusters, !ev.DryRun && ev.Commit != "")
		if p.inputs != nil {
			p.inputs.learn()
		}
	}
	cancel()
	if ctx.Err() != nil {
		// Preparing took the publisher's time: publish within a fresh bound.
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer c2()
	}
	m, err := wire.RepoChangedToProto(ev)
	if err != nil {
		return err
	}
	ack, err := p.bus.Publish(ctx, bus.SubjectRepoChanged, m, bus.WithMsgID(ev.EventID))
	if err != nil {
		return err
	}
	if ev.Trigger == event.TriggerStartup {
		p.once.Do(func() { p.startup <- startupReport{event: ev, seq: ack.Sequence, duplicate: ack.Duplicate} })
	}
	return nil
}
