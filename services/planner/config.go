package planner

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/defaults"
	"github.com/proxops/proxops/internal/opsign"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
)

// Defaults of Config.
const (
	DefaultObserveTimeout = time.Minute
	DefaultLeaseTTL       = bus.DefaultLeaseTTL
	DefaultSweepInterval  = 5 * time.Second
	DefaultTick           = time.Second
	DefaultStaleResult    = 20 * time.Second
	DefaultConcurrency    = 4
)

// Config is one planner replica's configuration.
type Config struct {
	// Name identifies this replica as a lease holder and in logs (default <hostname>-<pid>).
	Name string

	// Bus is an established connection (an in-process caller such as proxops up). Without it Run connects
	// with NATS.
	Bus  *bus.Bus
	NATS bus.ConnectConfig

	// Signer signs every operation the planner dispatches; executors refuse operations not signed by a
	// planner key they trust. Required unless PlanOnly.
	Signer *opsign.Signer

	// Keys are the age identities that decrypt the clusters' secrets files (default: the environment, as
	// sops reads it: SOPS_AGE_KEY, SOPS_AGE_KEY_FILE, the sops default key file).
	Keys secrets.KeySource
	// PlanOnly makes a planner that plans dry runs and records apply requests, and never takes a lease nor
	// drives a cluster: what proxops diff runs in its own process, so a diff never carries on an apply an
	// earlier command left open.
	PlanOnly bool
	// Process is the process configuration of the command that runs this planner (proxops up --config,
	// command-line flags), laid over every tree's proxops.yaml; its inline clusters replace the trees'
	// cluster files (repo.LoadOptions). Nil for a planner that reads its trees only.
	Process *repo.Config
	// CurrentProcess, when set, is read at each plan instead of Process: a process that reloads its
	// configuration (proxops up when its --config file changes) hands the new one over this way.
	CurrentProcess func() *repo.Config
	// Loaded are trees the caller has already loaded with Process, by tree (proxops diff and apply load the
	// snapshot they send): the planner plans them as they are rather than reading and parsing them again.
	// They are read, never changed.
	Loaded map[string]*repo.Repository
	// LocalSecrets lets a secrets-file outside the repository (an absolute or ~ path) be read from this
	// host's disk. A deployed planner leaves it off: its secrets come from the tree only.
	LocalSecrets bool
	// Inputs, when set, is the digest of a cluster's inputs from outside the repository, kept by the process
	// that embeds the planner (proxops up digests its --config file, the host secrets files, CA files and age
	// key file, and changes the digest once a change is in effect). Without it the planner digests what it
	// reads itself: its age keys and, with LocalSecrets, a host secrets file. A plan rejected for a permanent
	// cause is planned again when the digest changes.
	Inputs func(cluster string) string

	// ObserveTimeout bounds one node's observe (default 1 min); a node that does not answer in time
	// rejects its cluster's plan.
	ObserveTimeout time.Duration
	// LeaseTTL is the proxops_leases bucket's TTL (default 30 s); the lease is renewed every third of it.
	LeaseTTL time.Duration
	// SweepInterval is how often every cluster's state is looked at besides the change notifications
	// (default 5 s).
	SweepInterval time.Duration
	// Tick is how often a running plan re-checks its cluster's state and its confirmations (default 1 s).
	Tick time.Duration
	// StaleResult is how long an operation may be in flight before its outcome is also looked up in
	// proxops_ops, in case its result message was lost (default 20 s).
	StaleResult time.Duration
	// Concurrency bounds the repository events handled at once (default 4); clusters of one event are
	// planned in parallel.
	Concurrency int

	// Registry receives the planner's Prometheus metrics (optional).
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		host, _ := os.Hostname()
		c.Name = host + "-" + strconv.Itoa(os.Getpid())
	}
	if c.Keys == nil {
		c.Keys = secrets.FromEnvironment(os.LookupEnv)
	}
	defaults.Positive(&c.ObserveTimeout, DefaultObserveTimeout)
	defaults.Positive(&c.LeaseTTL, DefaultLeaseTTL)
	defaults.Positive(&c.SweepInterval, DefaultSweepInterval)
	defaults.Positive(&c.Tick, DefaultTick)
	defaults.Positive(&c.StaleResult, DefaultStaleResult)
	defaults.Positive(&c.Concurrency, DefaultConcurrency)
	defaults.Logger(&c.Logger)
	return c
}

// Validate checks the configuration once, before anything connects.
func (c Config) Validate() error {
	var errs []error
	if c.Bus == nil && c.NATS.URL == "" {
		errs = append(errs, errors.New("no NATS server: give --nats-url"))
	}
	if c.Signer == nil && !c.PlanOnly {
		errs = append(errs, errors.New("no signing key: give --signing-key-file (executors refuse unsigned operations)"))
	}
	if c.LeaseTTL < 0 || (c.LeaseTTL > 0 && c.LeaseTTL < time.Second) {
		errs = append(errs, fmt.Errorf("lease ttl %s: want at least 1s", c.LeaseTTL))
	}
	if c.ObserveTimeout < 0 {
		errs = append(errs, fmt.Errorf("observe timeout %s: must be positive", c.ObserveTimeout))
	}
	return errors.Join(errs...)
}
