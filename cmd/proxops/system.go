package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/opsign"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/services/adopter"
	"github.com/proxops/proxops/services/executor"
	"github.com/proxops/proxops/services/planner"
	"github.com/proxops/proxops/services/watcher"
)

// The single-host system: an embedded NATS server on a data directory, and the services in this process.
// proxops diff and apply run it for one reconcile; proxops up runs it until stopped.

// lockFile is the file, in the data directory, that one process at a time holds a lock on.
const lockFile = "proxops.lock"

// errDataDirBusy: another process holds the data directory's lock.
var errDataDirBusy = errors.New("data directory in use by another proxops process")

// dataDirLock is an exclusive lock on a data directory, held until released or the process ends.
type dataDirLock struct{ f *os.File }

// lockDataDir takes the data directory's lock without waiting: errDataDirBusy when another process has it.
func lockDataDir(dir string) (*dataDirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, errDataDirBusy)
		}
		return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
	}
	return &dataDirLock{f: f}, nil
}

func (l *dataDirLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}

// systemConfig is what one process runs.
type systemConfig struct {
	// DataDir holds the JetStream store (and, with Listen, nats.json). It must be locked by the caller.
	DataDir string
	// Listen opens a client listener on 127.0.0.1 with generated credentials (proxops up), so other proxops
	// commands and the nats CLI can join.
	Listen bool
	// Memory keeps the store in memory (tests of the assembly only).
	Memory bool
	// NATS, when set, is a deployed system to join as a client instead of starting a server (proxops up
	// --nats); it must be provisioned already.
	NATS *bus.ConnectConfig
	// Repo is the local repository the watcher follows; Branch its branch ("" for the default).
	Repo   string
	Branch string
	// RequestsOnly runs the watcher for requests that name their own tree only (diff, apply).
	RequestsOnly bool
	// WatcherConfig, when set, replaces the watcher's configuration derived from Repo (proxops up).
	WatcherConfig *watcher.Config
	// Executors are the executors to run, one per cluster and node.
	Executors []executorSpec
	// ObserveOnly runs the executors for observes only: nothing is applied, not even an operation an
	// interrupted apply left queued (diff).
	ObserveOnly bool
	// Signer signs the operations this process's planner dispatches, and its executors trust its key. Nil:
	// the data directory's key pair (opsign.KeyFile), generated on first use.
	Signer *opsign.Signer
	// Planner tunes the planner (Bus, Logger, Registry and Signer are filled in).
	Planner planner.Config
	// Adopter, when set, runs the adopter too (Bus and Logger are filled in): gap reports, and the adoption
	// requests of proxops adopt.
	Adopter *adopter.Config
	// LeaseTTL is the plan lease TTL the buckets are provisioned with (default bus.DefaultLeaseTTL).
	LeaseTTL time.Duration
	// Warnings receives the problems a person should see (an executor that cannot serve); nil for none.
	Warnings io.Writer
	Logger   *slog.Logger
	Registry *prometheus.Registry
}

// executorSpec is one executor: a node of a cluster, its PVE endpoint and credentials.
type executorSpec struct {
	Cluster            string
	Node               string
	AllowedNodes       []string
	PVE                pve.Config
	RepoBaseURL        string
	Secrets            pve.SecretResolver
	Concurrency        int
	StorageConcurrency int
	LockWait           time.Duration
	// Credentials, when set, gives the executor its credentials and secret resolver afresh (proxops up).
	Credentials executor.CredentialSource
	// CASum is the digest of the CA file's content: proxops up restarts an executor whose CA file changed.
	CASum string
}

// system is ProxOps running in this process.
type system struct {
	cfg     systemConfig
	server  *bus.Server
	bus     *bus.Bus
	signer  *opsign.Signer
	watcher *watcher.Watcher
	// rctx is the services' context: cancelled by stop.
	rctx   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	log    *slog.Logger

	mu   sync.Mutex
	errs []error
}

// startSystem starts the embedded server on the data directory, provisions it, and runs the executors, the
// planner and the watcher until stop. The server fsyncs every write (SyncAlways): a single host has no
// replicas to fall back on.
func startSystem(ctx context.Context, cfg systemConfig) (*system, error) {
	s, err := newSystem(ctx, cfg)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*system, error) {
		_ = s.stop()
		return nil, err
	}
	// Executors first: the planner's first observe finds them serving.
	for _, e := range cfg.Executors {
		if _, err := s.startExecutor(ctx, e); err != nil {
			return fail(err)
		}
	}
	if cfg.Adopter != nil {
		if err := s.startAdopter(*cfg.Adopter); err != nil {
			return fail(err)
		}
	}
	if err := s.startPlanner(); err != nil {
		return fail(err)
	}
	wcfg := watcher.Config{Path: cfg.Repo, Branch: cfg.Branch, RequestsOnly: cfg.RequestsOnly, DriftInterval: -1}
	if cfg.WatcherConfig != nil {
		wcfg = *cfg.WatcherConfig
	}
	if err := s.startWatcher(wcfg, nil); err != nil {
		return fail(err)
	}
	return s, nil
}

// newSystem starts the embedded server (or joins cfg.NATS) and provisions it; no service runs yet.
func newSystem(ctx context.Context, cfg systemConfig) (*system, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = log
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &system{cfg: cfg, log: log, signer: cfg.Signer}
	if s.signer == nil {
		signer, err := opsign.EnsureSigner(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		s.signer = signer
	}
	if cfg.NATS != nil {
		b, err := bus.Connect(ctx, *cfg.NATS, bus.Options{Logger: log})
		if err != nil {
			return nil, err
		}
		if err := b.CheckProvisioned(ctx); err != nil {
			_ = b.Close()
			return nil, err
		}
		s.bus = b
	} else {
		dir := cfg.DataDir
		if !cfg.Listen {
			// A client info file left by a proxops up that is gone would point other commands at nothing.
			_ = os.Remove(filepath.Join(dir, bus.ClientInfoFile))
		}
		srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: dir, SyncAlways: !cfg.Memory, Listen: cfg.Listen,
			Logger: log.With("component", "nats")})
		if err != nil {
			return nil, err
		}
		b, err := srv.Connect(bus.Options{Logger: log})
		if err != nil {
			srv.Shutdown()
			return nil, err
		}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err = b.Provision(pctx, bus.ProvisionConfig{Memory: cfg.Memory, LeaseTTL: cfg.LeaseTTL})
		cancel()
		if err != nil {
			_ = b.Close()
			srv.Shutdown()
			return nil, err
		}
		s.server, s.bus = srv, b
	}
	s.rctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return s, nil
}

// connect opens a connection of its own for one service.
func (s *system) connect(ctx context.Context, name string) (*bus.Bus, error) {
	var c *bus.Bus
	var err error
	if s.server != nil {
		c, err = s.server.Connect(bus.Options{Logger: s.log.With("connection", name)})
	} else {
		nc := *s.cfg.NATS
		nc.Name = "proxops-up-" + name
		c, err = bus.Connect(ctx, nc, bus.Options{Logger: s.log.With("connection", name)})
	}
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	return c, nil
}

// runningExecutor is an executor started by startExecutor.
type runningExecutor struct {
	spec   executorSpec
	cancel context.CancelFunc
	done   chan struct{}
}

// stop stops the executor (its operations in flight get their grace period) and waits for it.
func (r *runningExecutor) stop() {
	r.cancel()
	<-r.done
}

// startExecutor runs one executor and waits until it serves. An executor that cannot serve (PVE
// unreachable, refused credentials) stops only its cluster: the planner rejects that cluster's plan for want
// of an answer, the other clusters go on; it is reported on cfg.Warnings and nil is returned.
func (s *system) startExecutor(ctx context.Context, e executorSpec) (*runningExecutor, error) {
	cfg := s.cfg
	name := e.Cluster + "/" + e.Node
	eb, err := s.connect(ctx, "executor-"+e.Cluster+"-"+e.Node)
	if err != nil {
		return nil, err
	}
	ecfg := executor.Config{Cluster: e.Cluster, Node: e.Node, Replica: "local-" + e.Node, AllowedNodes: e.AllowedNodes,
		Bus: eb, PVE: e.PVE, RepoBaseURL: e.RepoBaseURL, Secrets: e.Secrets, Credentials: e.Credentials,
		Concurrency: e.Concurrency, StorageConcurrency: e.StorageConcurrency, LockWait: e.LockWait,
		TrustedPlannerKeys: []string{s.signer.PublicKey()},
		// Each executor's series carry its cluster and node, so they share one registry.
		Registry: prometheus.WrapRegistererWith(prometheus.Labels{"cluster": e.Cluster, "node": e.Node}, cfg.Registry),
		Logger:   s.log.With("service", "executor")}
	ecfg.ObserveOnly = cfg.ObserveOnly
	ready := make(chan struct{})
	ecfg.OnReady = func() { close(ready) }
	exited := make(chan error, 1)
	ectx, cancel := context.WithCancel(s.rctx)
	r := &runningExecutor{spec: e, cancel: cancel, done: make(chan struct{})}
	s.wg.Go(func() {
		defer close(r.done)
		defer func() { _ = eb.Close() }()
		err := executor.Run(ectx, ecfg)
		if err != nil {
			s.log.Error("executor stopped", "executor", name, "err", err)
		}
		exited <- err
	})
	select {
	case <-ready:
		return r, nil
	case err := <-exited:
		cancel()
		if cfg.Warnings != nil {
			fmt.Fprintf(cfg.Warnings, "warning: executor %s: %v\n", name, err)
		}
		return nil, nil
	case <-ctx.Done():
		r.stop()
		return nil, ctx.Err()
	case <-time.After(time.Minute):
		r.stop()
		return nil, fmt.Errorf("executor %s: not serving after a minute", name)
	}
}

// startAdopter runs the adopter: gap reports from the executors' inventories, and adoption requests.
func (s *system) startAdopter(acfg adopter.Config) error {
	ab, err := s.connect(s.rctx, "adopter")
	if err != nil {
		return err
	}
	acfg.Bus, acfg.Logger = ab, s.log.With("service", "adopter")
	s.goRun("adopter", ab, func() error { return adopter.Run(s.rctx, acfg) })
	return nil
}

// startPlanner runs the planner.
func (s *system) startPlanner() error {
	pb, err := s.connect(s.rctx, "planner")
	if err != nil {
		return err
	}
	pcfg := s.cfg.Planner
	pcfg.Bus, pcfg.Registry, pcfg.Logger, pcfg.Signer = pb, s.cfg.Registry, s.log.With("service", "planner"), s.signer
	if pcfg.LeaseTTL == 0 {
		pcfg.LeaseTTL = s.cfg.LeaseTTL
	}
	s.goRun("planner", pb, func() error { return planner.Run(s.rctx, pcfg) })
	return nil
}

// startWatcher runs the watcher; wrap, when set, wraps its publisher (proxops up prepares the executors
// of a tree before its event is published).
func (s *system) startWatcher(wcfg watcher.Config, wrap func(watcher.Publisher) watcher.Publisher) error {
	wb, err := s.connect(s.rctx, "watcher")
	if err != nil {
		return err
	}
	deps := watcher.BusDeps(wb, s.cfg.Registry, s.log.With("service", "watcher"))
	if wrap != nil {
		deps.Publisher = wrap(deps.Publisher)
	}
	w, err := watcher.New(wcfg, deps)
	if err != nil {
		_ = wb.Close()
		return err
	}
	s.watcher = w
	s.goRun("watcher", wb, func() error { return w.Run(s.rctx) })
	return nil
}

// goRun runs one service until the system stops; its error is kept for stop.
func (s *system) goRun(name string, b *bus.Bus, run func() error) {
	s.wg.Go(func() {
		defer func() { _ = b.Close() }()
		if err := run(); err != nil {
			s.log.Error("service stopped", "service", name, "err", err)
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Errorf("%s: %w", name, err))
			s.mu.Unlock()
		}
	})
}

// failed returns the errors of services that stopped on their own.
func (s *system) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// stop stops the services (operations in flight get their grace period, leases are released) and then the
// server, which flushes its store.
func (s *system) stop() error {
	s.cancel()
	s.wg.Wait()
	_ = s.bus.Close()
	if s.server != nil {
		s.server.Shutdown()
	}
	return s.failed()
}

// secretsKeys is the age key source of this process (the environment, as sops reads it).
func secretsKeys() secrets.KeySource { return secrets.FromEnvironment(os.LookupEnv) }
