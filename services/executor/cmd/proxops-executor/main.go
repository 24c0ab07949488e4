// Command proxops-executor runs the ProxOps executor of one PVE node: proxops-executor --cluster C --node N.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/opsign"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/service"
	"github.com/proxops/proxops/services/executor"
)

func main() {
	service.Exit(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.LookupEnv, os.Stderr) })
}

// run runs the executor until ctx ends and returns the exit code: 2 for a bad configuration, 1 when it
// cannot run. Its /metrics carries the cluster and node on every ProxOps series, as in proxops up.
func run(ctx context.Context, args []string, lookup func(string) (string, bool), stderr io.Writer) int {
	cfg, metricsListen, err := configure(ctx, args, lookup, stderr)
	if code, done := service.ConfigError(stderr, "proxops-executor", err); done {
		return code
	}
	log := service.Logger(stderr, slog.LevelInfo, "executor")
	cfg.Logger = log
	reg, stopMetrics, err := service.Metrics(metricsListen, service.BuildInfo("", ""), log)
	if err != nil {
		log.Error("metrics server", "err", err)
		return 1
	}
	defer stopMetrics()
	cfg.Registry = prometheus.WrapRegistererWith(prometheus.Labels{"cluster": cfg.Cluster, "node": cfg.Node}, reg)
	if err := executor.Run(ctx, cfg); err != nil {
		log.Error("executor", "err", err)
		return 1
	}
	return 0
}

// configure builds the executor's configuration from flags, the environment (credentials, age keys) and
// the SOPS file --secrets-file names (decrypted here, once).
func configure(ctx context.Context, args []string, lookup func(string) (string, bool), out io.Writer) (executor.Config, string, error) {
	getenv := func(k string) string { v, _ := lookup(k); return v }
	var cfg executor.Config
	fs, _ := service.FlagSet("proxops-executor", out, getenv, &cfg.NATS)
	fs.StringVar(&cfg.Cluster, "cluster", "", "cluster name (required)")
	fs.StringVar(&cfg.Node, "node", "", "PVE node this executor owns (required)")
	fs.StringVar(&cfg.Replica, "replica", "", "replica name in results and logs, unique among running replicas (default host-pid)")
	nodes := fs.String("allowed-nodes", "", "the cluster's node allowlist, comma-separated (empty: every node)")
	fs.StringVar(&cfg.PVE.BaseURL, "pve-url", "", "PVE API endpoint, https://host:8006 (required)")
	fs.StringVar(&cfg.PVE.CAFile, "pve-ca-file", "", "PEM CA bundle that signs the PVE certificate")
	fs.BoolVar(&cfg.PVE.Insecure, "pve-insecure", false, "skip PVE certificate verification (only for a cluster configured insecure: true)")
	auth := fs.String("pve-auth", "", "token or ticket (default: ticket when only a password is configured, else token)")
	user := fs.String("pve-user", "", "PVE user (user@realm); PROXOPS_PVE_USER wins")
	tokenID := fs.String("pve-token-id", "", "PVE API token name (with PROXOPS_PVE_TOKEN as its secret)")
	secretsFile := fs.String("secrets-file", "", "SOPS file with the cluster's secrets (age keys from SOPS_AGE_KEY_FILE or SOPS_AGE_KEY)")
	var refs secrets.PVESecretRefs
	fs.StringVar(&refs.User, "secrets-pve-user", "", "entry of the secrets file's secrets: block holding the PVE user")
	fs.StringVar(&refs.TokenID, "secrets-pve-token-id", "", "entry holding the PVE API token name")
	fs.StringVar(&refs.Token, "secrets-pve-token", "", "entry holding the PVE API token secret")
	fs.StringVar(&refs.Password, "secrets-pve-password", "", "entry holding the PVE password (ticket auth)")
	fs.StringVar(&cfg.RepoBaseURL, "repo-base-url", "", "the base-url the repository declares for the cluster; refused when it differs from --pve-url")
	fs.IntVar(&cfg.Concurrency, "concurrency", 4, "operations at once on the node, across its replicas (executor.concurrency)")
	fs.IntVar(&cfg.StorageConcurrency, "storage-concurrency", 1, "clones or downloads at once per storage (executor.storage-concurrency)")
	fs.IntVar(&cfg.PVE.ObserveConcurrency, "observe-concurrency", 8, "per-guest config reads at once during one observe")
	fs.DurationVar(&cfg.LockWait, "lock-wait", 2*time.Hour, "how long to wait on a guest locked by a long PVE job (reconcile.lock-wait)")
	fs.DurationVar(&cfg.PVE.TaskTimeout, "task-timeout", 30*time.Minute, "longest wait for one PVE task (reconcile.task-timeout)")
	fs.DurationVar(&cfg.PVE.TaskPollMin, "task-poll", 250*time.Millisecond, "first interval between task status polls")
	fs.DurationVar(&cfg.AckWait, "ack-wait", 30*time.Second, "redelivery timeout of an unacknowledged operation (also the guest guard's TTL)")
	fs.IntVar(&cfg.MaxDeliver, "max-deliver", 10, "deliveries of an operation before it is dead-lettered")
	fs.DurationVar(&cfg.RetryBackoff, "retry-backoff", 2*time.Second, "first delay before a retryable failure, or an operation the bus could not serve, is retried (doubling, at most 2 min)")
	fs.IntVar(&cfg.TaskRetries, "task-retries", 1, "times an operation whose PVE task failed without a known reason is tried again (0: never)")
	var trusted keyList
	fs.Var(&trusted, "trusted-planner-key", "public nkey (U…) of a planner whose signed operations this executor runs; repeat it to "+
		"trust several while a key is rotated [PROXOPS_TRUSTED_PLANNER_KEYS, comma-separated]")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9495", "address of the /metrics endpoint (empty: off)")
	if err := service.Parse(fs, args); err != nil {
		return cfg, "", err
	}
	if cfg.TaskRetries == 0 {
		cfg.TaskRetries = -1 // the flag's 0 is "never"; the Config's zero value is the default
	}
	if *nodes != "" {
		for n := range strings.SplitSeq(*nodes, ",") {
			if n = strings.TrimSpace(n); n != "" {
				cfg.AllowedNodes = append(cfg.AllowedNodes, n)
			}
		}
	}
	cfg.TrustedPlannerKeys = trusted
	if len(cfg.TrustedPlannerKeys) == 0 {
		cfg.TrustedPlannerKeys = opsign.SplitKeys(getenv("PROXOPS_TRUSTED_PLANNER_KEYS"))
	}
	cfg.OwnEndpoint = true
	cfg.PVE.TaskPollMax = max(5*time.Second, cfg.PVE.TaskPollMin)
	if cfg.PVE.ObserveConcurrency < 1 {
		return cfg, "", fmt.Errorf("--observe-concurrency %d: want at least 1", cfg.PVE.ObserveConcurrency)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", err
	}
	env := secrets.PVEEnvironment(lookup)
	if *secretsFile != "" {
		// The file is read again on every observe and operation and decrypted again when it changed: a
		// rotated token or cloud-init key is used without a restart. It must decrypt now, at start.
		base := cfg
		source := &executor.SecretsFile{Path: *secretsFile, Decryptor: secrets.NewDecryptor(secrets.FromEnvironment(lookup)),
			Credentials: func(store *secrets.Store) (executor.Credentials, error) {
				c := base
				if err := pveCredentials(&c, secrets.AuthMode(*auth), refs, store, *user, *tokenID, env); err != nil {
					return executor.Credentials{}, err
				}
				return executor.Credentials{TokenID: c.PVE.TokenID, TokenSecret: c.PVE.TokenSecret, User: c.PVE.User, Password: c.PVE.Password}, nil
			}}
		creds, err := source.Current(ctx)
		if err != nil {
			return cfg, "", fmt.Errorf("--secrets-file: %w", err)
		}
		cfg.PVE, cfg.Secrets, cfg.Credentials = creds.Apply(cfg.PVE), creds.Secrets, source
	} else if refs != (secrets.PVESecretRefs{}) {
		return cfg, "", errors.New("--secrets-pve-* name entries of a secrets file: give --secrets-file")
	} else if err := pveCredentials(&cfg, secrets.AuthMode(*auth), refs, nil, *user, *tokenID, env); err != nil {
		return cfg, "", err
	}
	if msg := fault(getenv("PROXOPS_EXECUTOR_TEST_FAULT")); msg != nil {
		cfg.Fault = msg
	}
	return cfg, *metricsListen, nil
}

// pveCredentials resolves the PVE credentials with the predecessor's precedence
// (secrets.ResolvePVECredentials): per credential the secrets file's entry when one is named, else its
// PROXOPS_PVE_* variable, else the flag; a composed token value (PROXOPS_PVE_TOKEN_VALUE) is ignored when
// any credential comes from the secrets file, and otherwise wins over user, token id and token (its user
// part then stands for the user when none is given). Without --pve-auth, ticket auth is chosen when a
// password is configured and no token is.
func pveCredentials(cfg *executor.Config, mode secrets.AuthMode, refs secrets.PVESecretRefs, store *secrets.Store,
	user, tokenID string, env map[string]string) error {
	fromFile := refs != (secrets.PVESecretRefs{})
	if mode == "" {
		mode = secrets.AuthToken
		token := env[secrets.EnvPVETokenValue] != "" || env[secrets.EnvPVEToken] != "" || tokenID != "" ||
			refs.Token != "" || refs.TokenID != ""
		if !token && (env[secrets.EnvPVEPassword] != "" || refs.Password != "") {
			mode = secrets.AuthTicket
		}
	}
	global := secrets.PVECredentials{User: secrets.New(user), TokenID: secrets.New(tokenID)}
	if tv := env[secrets.EnvPVETokenValue]; tv != "" && !fromFile && user == "" && env[secrets.EnvPVEUser] == "" {
		if u, _, ok := strings.Cut(tv, "!"); ok {
			global.User = secrets.New(u)
		}
	}
	a, err := secrets.ResolvePVECredentials(secrets.PVECredentialInput{Cluster: cfg.Cluster, Auth: mode, Refs: refs,
		Store: store, Global: global, Env: env})
	if err != nil {
		return fmt.Errorf("PVE credentials: %w", err)
	}
	switch a.Mode {
	case secrets.AuthToken:
		id, secret, _ := a.APIToken()
		cfg.PVE.TokenID, cfg.PVE.TokenSecret = id.Reveal(), secret.Reveal()
	case secrets.AuthTicket:
		cfg.PVE.User, cfg.PVE.Password = a.User.Reveal(), a.Password.Reveal()
	}
	return nil
}

// fault is the test-only fault hook, enabled by PROXOPS_EXECUTOR_TEST_FAULT=kill:<point> (the process
// kills itself with SIGKILL at that point) or block:<point> (it stops there forever). Never set it in
// production.
func fault(spec string) func(string) {
	mode, point, ok := strings.Cut(spec, ":")
	if !ok || (mode != "kill" && mode != "block") {
		return nil
	}
	return func(at string) {
		if at != point {
			return
		}
		if mode == "kill" {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		select {}
	}
}

// keyList is a repeatable flag.
type keyList []string

func (k *keyList) String() string { return strings.Join(*k, ",") }

func (k *keyList) Set(v string) error {
	*k = append(*k, opsign.SplitKeys(v)...)
	return nil
}
