package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
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

// expandHome expands a leading ~ to the user's home directory.
func expandHome(p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expand %s: %w", p, err)
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~")), nil
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
	// Planner tunes the planner (Bus, Logger and Registry are filled in).
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
}

// system is ProxOps running in this process.
type system struct {
	server  *bus.Server
	bus     *bus.Bus
	watcher *watcher.Watcher
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	log     *slog.Logger

	mu   sync.Mutex
	errs []error
}

// startSystem starts the embedded server on the data directory, provisions it, and runs the planner, the
// watcher and the executors until stop. The server fsyncs every write (SyncAlways): a single host has no
// replicas to fall back on.
func startSystem(ctx context.Context, cfg systemConfig) (*system, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
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
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &system{server: srv, bus: b, cancel: stop, log: log}
	connect := func(name string) (*bus.Bus, error) {
		c, err := srv.Connect(bus.Options{Logger: log.With("connection", name)})
		if err != nil {
			return nil, fmt.Errorf("connect %s: %w", name, err)
		}
		return c, nil
	}
	fail := func(err error) (*system, error) {
		s.stop()
		return nil, err
	}
	// Executors first: the planner's first observe finds them serving.
	for _, e := range cfg.Executors {
		eb, err := connect("executor-" + e.Cluster + "-" + e.Node)
		if err != nil {
			return fail(err)
		}
		ecfg := executor.Config{Cluster: e.Cluster, Node: e.Node, Replica: "local-" + e.Node, AllowedNodes: e.AllowedNodes,
			Bus: eb, PVE: e.PVE, RepoBaseURL: e.RepoBaseURL, Secrets: e.Secrets, Concurrency: e.Concurrency,
			StorageConcurrency: e.StorageConcurrency, LockWait: e.LockWait,
			// Each executor's series carry its cluster and node, so they share one registry.
			Registry: prometheus.WrapRegistererWith(prometheus.Labels{"cluster": e.Cluster, "node": e.Node}, cfg.Registry),
			Logger:   log.With("service", "executor")}
		ecfg.ObserveOnly = cfg.ObserveOnly
		ready := make(chan struct{})
		ecfg.OnReady = func() { close(ready) }
		// An executor that cannot serve (PVE unreachable, refused credentials) stops only its cluster: the
		// planner rejects that cluster's plan for want of an answer, the other clusters go on.
		exited := make(chan error, 1)
		name := e.Cluster + "/" + e.Node
		s.wg.Go(func() {
			defer func() { _ = eb.Close() }()
			err := executor.Run(rctx, ecfg)
			if err != nil {
				s.log.Error("executor stopped", "executor", name, "err", err)
			}
			exited <- err
		})
		select {
		case <-ready:
		case err := <-exited:
			if cfg.Warnings != nil {
				fmt.Fprintf(cfg.Warnings, "warning: executor %s: %v\n", name, err)
			}
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(time.Minute):
			return fail(fmt.Errorf("executor %s: not serving after a minute", name))
		}
	}
	if cfg.Adopter != nil {
		ab, err := connect("adopter")
		if err != nil {
			return fail(err)
		}
		acfg := *cfg.Adopter
		acfg.Bus, acfg.Logger = ab, log.With("service", "adopter")
		s.goRun("adopter", ab, func() error { return adopter.Run(rctx, acfg) })
	}
	pb, err := connect("planner")
	if err != nil {
		return fail(err)
	}
	pcfg := cfg.Planner
	pcfg.Bus, pcfg.Registry, pcfg.Logger = pb, cfg.Registry, log.With("service", "planner")
	if pcfg.LeaseTTL == 0 {
		pcfg.LeaseTTL = cfg.LeaseTTL
	}
	s.goRun("planner", pb, func() error { return planner.Run(rctx, pcfg) })
	wb, err := connect("watcher")
	if err != nil {
		return fail(err)
	}
	wcfg := watcher.Config{Path: cfg.Repo, Branch: cfg.Branch, RequestsOnly: cfg.RequestsOnly, DriftInterval: -1}
	if cfg.WatcherConfig != nil {
		wcfg = *cfg.WatcherConfig
	}
	w, err := watcher.New(wcfg, watcher.BusDeps(wb, cfg.Registry, log.With("service", "watcher")))
	if err != nil {
		_ = wb.Close()
		return fail(err)
	}
	s.watcher = w
	s.goRun("watcher", wb, func() error { return w.Run(rctx) })
	return s, nil
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
	s.server.Shutdown()
	return s.failed()
}

// secretsKeys is the age key source of this process (the environment, as sops reads it).
func secretsKeys() secrets.KeySource { return secrets.FromEnvironment(os.LookupEnv) }
