// Package adopter is ProxOps' adopter service. It consumes every node inventory the executors publish and
// reports, per cluster, every live setting the manifest model does not cover (a GapReport on
// proxops.v1.gap.<cluster>, published whenever the set of gaps changes); and it serves adoption requests on
// proxops.v1.adopt.<cluster>: it observes the cluster's nodes through their executors and answers with the
// manifests internal/adopt makes for the repository snapshot the request names.
//
// A guest counts as managed when the ownership inventory (proxops_owned) records it: ProxOps created it, or
// claimed it because git declares it. The report names a managed guest by the Kind/name it was recorded
// under, any other guest by the name adoption would give it.
package adopter

import (
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/defaults"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
)

// DefaultObserveTimeout bounds one node's observe for an adoption.
const DefaultObserveTimeout = 2 * time.Minute

// Config is one adopter's configuration.
type Config struct {
	// Bus is an established connection (an in-process caller such as proxops adopt). Without it Run connects
	// with NATS.
	Bus  *bus.Bus
	NATS bus.ConnectConfig
	// Keys are the age identities that decrypt the clusters' secrets files, to match live SSH keys with
	// their entries (default: the environment, as sops reads it).
	Keys secrets.KeySource
	// LocalSecrets lets a secrets-file outside the repository be read from this host's disk.
	LocalSecrets bool
	// Process is the process configuration of the command that runs this adopter (proxops up --config,
	// command-line flags), laid over every tree's proxops.yaml as the planner does (repo.LoadOptions).
	Process *repo.Config
	// ObserveTimeout bounds one node's observe for an adoption (default 2 min).
	ObserveTimeout time.Duration
	Logger         *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Keys == nil {
		c.Keys = secrets.FromEnvironment(os.LookupEnv)
	}
	defaults.Positive(&c.ObserveTimeout, DefaultObserveTimeout)
	defaults.Logger(&c.Logger)
	return c
}

// Validate checks the configuration once, before anything connects.
func (c Config) Validate() error {
	if c.Bus == nil && c.NATS.URL == "" {
		return errors.New("no NATS server: give --nats-url")
	}
	if c.ObserveTimeout < 0 {
		return errors.New("observe timeout must be positive")
	}
	return nil
}
