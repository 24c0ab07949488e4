package executor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/defaults"
	"github.com/proxops/proxops/internal/opsign"
	"github.com/proxops/proxops/internal/pve"
)

// Config is one executor replica's configuration.
type Config struct {
	// Cluster and Node are what this executor owns; it refuses everything else.
	Cluster string
	Node    string
	// Replica names this process in results and logs (default <hostname>-<pid>).
	Replica string
	// AllowedNodes is the cluster's node allowlist (empty: every node).
	AllowedNodes []string

	// Bus is an established connection (an in-process caller such as proxops up). Without it Run connects
	// with NATS.
	Bus  *bus.Bus
	NATS bus.ConnectConfig

	// PVE is the endpoint and credentials. OwnEndpoint says they come from the executor's own configuration
	// (flags, environment, secrets) rather than from the repository (single-host mode). An executor with its
	// own endpoint refuses every observe request and operation that names a base-url (the one the commit
	// declares for the cluster) other than PVE.BaseURL: a commit can never send its credentials to another
	// host. Without it the base-url they name is not checked: an in-process executor is built from the
	// repository's base-url and rebuilt when it changes.
	PVE         pve.Config
	OwnEndpoint bool
	// RepoBaseURL is the base-url the repository's clusters/<name>/config.yaml declares, when known at
	// start. An executor whose endpoint differs refuses every operation and observe.
	RepoBaseURL string
	// Secrets resolves the secret references operations carry (nil: operations with references fail).
	Secrets pve.SecretResolver
	// Credentials, when set, is asked before every observe and operation for the PVE credentials and the
	// secret resolver to use; they replace PVE's credentials and Secrets (the endpoint stays PVE's). An
	// executor with a credential source serves even when it cannot connect at start: each observe and
	// operation connects again and reports what failed.
	Credentials CredentialSource
	// CredentialsCheck is how often the credential source is asked whether the credentials changed (default
	// 10 s; only with Credentials). On a change the executor observes its node with the new credentials and
	// publishes the inventory: the planners learn that a node that refused reads PVE again, and plan a
	// cluster rejected for it without waiting for a new commit.
	CredentialsCheck time.Duration

	// TrustedPlannerKeys are the public nkeys (U…) of the planners whose operations this executor runs;
	// an operation unsigned, badly signed or signed by another key is refused, dead-lettered and reported
	// failed. Several keys may be trusted at once while a planner key is rotated. Required unless
	// ObserveOnly.
	TrustedPlannerKeys []string

	// Concurrency bounds the operations run at once on the node, across all its replicas
	// (executor.concurrency, default 4): it is the node consumer's MaxAckPending, and each replica also
	// runs at most this many itself. Replicas of a node should agree; the last one started sets the bound.
	Concurrency int
	// StorageConcurrency bounds clones and downloads per storage (executor.storage-concurrency, default 1).
	StorageConcurrency int
	// LockWait is how long an operation waits on a guest locked by a long PVE job (reconcile.lock-wait,
	// default 2h), without spending deliveries.
	LockWait time.Duration
	// AckWait is the consumer's redelivery timeout (default 30s); heartbeats keep a running operation's
	// delivery alive.
	AckWait time.Duration
	// GuardTTL is how long a guest guard (one operation per guest across replicas) outlives its holder's
	// last renewal (default AckWait): a replica killed mid-operation blocks its guest for at most this long.
	GuardTTL time.Duration
	// MaxDeliver bounds an operation's deliveries (default 10); the last failed one goes to PROXOPS_DLQ.
	MaxDeliver int
	// RetryBackoff is the first redelivery delay after a retryable failure or a delivery the bus could not
	// serve (default 2s, doubling with each delivery, at most 2 min).
	RetryBackoff time.Duration
	// TaskRetries is how often an operation whose PVE task failed for a reason PVE's text does not explain
	// is tried again in place, re-observing first, before it is reported failed (default 1; -1 never).
	TaskRetries int
	// ShutdownGrace is how long operations in flight may finish after Run's context ends (default 20s);
	// what is still running then is handed back.
	ShutdownGrace time.Duration

	// Registry receives the executor's Prometheus metrics (optional).
	Registry prometheus.Registerer
	Logger   *slog.Logger

	// ObserveOnly serves observe requests and applies nothing: operations stay queued for an executor that
	// applies them. proxops diff runs its executors this way, so a diff never writes to PVE, not even an
	// operation an interrupted apply left in the work queue.
	ObserveOnly bool
	// OnReady, when set, is called once the executor serves: observe subscribed and, unless ObserveOnly, the
	// node's consumer in place. An in-process caller waits on it before sending work.
	OnReady func()

	// Fault is a test hook called at named points ("received": a delivery arrived, before anything is done
	// with it, heartbeats included; "submitted": PVE accepted a request whose UPID is not recorded yet). Nil
	// in production.
	Fault func(point string)
}

func (c Config) withDefaults() Config {
	if c.Replica == "" {
		host, _ := os.Hostname()
		c.Replica = host + "-" + strconv.Itoa(os.Getpid())
	}
	defaults.Positive(&c.Concurrency, 4)
	defaults.Positive(&c.StorageConcurrency, 1)
	defaults.Positive(&c.LockWait, 2*time.Hour)
	defaults.Positive(&c.AckWait, 30*time.Second)
	defaults.Positive(&c.GuardTTL, c.AckWait)
	if c.MaxDeliver == 0 {
		c.MaxDeliver = 10
	}
	defaults.Positive(&c.RetryBackoff, 2*time.Second)
	if c.TaskRetries == 0 {
		c.TaskRetries = 1
	}
	defaults.Positive(&c.CredentialsCheck, 10*time.Second)
	defaults.Positive(&c.ShutdownGrace, 20*time.Second)
	defaults.Logger(&c.Logger)
	return c
}

// Validate checks the configuration once, before anything connects.
func (c Config) Validate() error {
	var errs []error
	if err := bus.ValidateCluster(c.Cluster); err != nil {
		errs = append(errs, fmt.Errorf("--cluster: %w", err))
	}
	if err := bus.ValidateNode(c.Node); err != nil {
		errs = append(errs, fmt.Errorf("--node: %w", err))
	}
	if len(c.AllowedNodes) > 0 && !slices.Contains(c.AllowedNodes, c.Node) {
		errs = append(errs, fmt.Errorf("--node %s is not in the cluster's node allowlist %v", c.Node, c.AllowedNodes))
	}
	if c.Bus == nil && c.NATS.URL == "" {
		errs = append(errs, errors.New("no NATS server: give --nats-url"))
	}
	if len(c.TrustedPlannerKeys) == 0 && !c.ObserveOnly {
		errs = append(errs, errors.New("no trusted planner key: give --trusted-planner-key (every operation would be refused)"))
	}
	if _, err := opsign.NewVerifier(c.TrustedPlannerKeys); err != nil {
		errs = append(errs, err)
	}
	if c.PVE.BaseURL == "" {
		errs = append(errs, errors.New("no PVE endpoint: give --pve-url (or run in-process with the repository's base-url)"))
	}
	if c.TaskRetries < -1 {
		errs = append(errs, fmt.Errorf("task retries %d: want -1 (never) or more", c.TaskRetries))
	}
	if c.MaxDeliver < -1 || c.MaxDeliver == 1 {
		errs = append(errs, fmt.Errorf("max deliver %d: want at least 2, or -1 for unlimited", c.MaxDeliver))
	}
	return errors.Join(errs...)
}

// endpointMismatch says why the base-url the repository declares for the cluster is refused, or "" when it
// matches this executor's PVE endpoint (pve.SameEndpoint) or is unknown.
func (c Config) endpointMismatch(baseURL string) string {
	if baseURL == "" || pve.SameEndpoint(baseURL, c.PVE.BaseURL) {
		return ""
	}
	return fmt.Sprintf("refused: the repository's base-url %s for cluster %s is not this executor's PVE endpoint %s; "+
		"a commit cannot redirect an executor", baseURL, c.Cluster, c.PVE.BaseURL)
}

// requestMismatch says why an observe request or operation naming baseURL is refused, or "". Only an
// executor with its own endpoint checks it: an in-process one uses the repository's base-url already.
func (c Config) requestMismatch(baseURL string) string {
	if !c.OwnEndpoint {
		return ""
	}
	return c.endpointMismatch(baseURL)
}

// ParseTokenValue splits PROXOPS_PVE_TOKEN_VALUE (user@realm!tokenid=secret) at its last '='.
func ParseTokenValue(v string) (id, secret string, err error) {
	i := strings.LastIndexByte(v, '=')
	if i <= 0 || i == len(v)-1 || !strings.Contains(v[:i], "!") || !strings.Contains(v[:i], "@") {
		return "", "", errors.New("token value: want user@realm!tokenid=secret")
	}
	return v[:i], v[i+1:], nil
}
