// Command proxops-executor runs the ProxOps executor of one PVE node: proxops-executor --cluster C --node N.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/proxops/proxops/services/executor"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg, metricsListen, err := configure(os.Args[1:], os.Getenv)
	if err != nil {
		log.Error("configuration", "err", err)
		os.Exit(2)
	}
	cfg.Logger = log
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Registry = reg
	if metricsListen != "" {
		srv := &http.Server{Addr: metricsListen, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "err", err)
			}
		}()
		defer func() { _ = srv.Close() }()
	}
	if err := executor.Run(ctx, cfg); err != nil {
		log.Error("executor", "err", err)
		os.Exit(1)
	}
}

// configure builds the executor's configuration from flags and the environment (credentials).
func configure(args []string, getenv func(string) string) (executor.Config, string, error) {
	var cfg executor.Config
	fs := flag.NewFlagSet("proxops-executor", flag.ContinueOnError)
	fs.StringVar(&cfg.Cluster, "cluster", "", "cluster name (required)")
	fs.StringVar(&cfg.Node, "node", "", "PVE node this executor owns (required)")
	fs.StringVar(&cfg.Replica, "replica", "", "replica name in results and logs (default host-pid)")
	nodes := fs.String("allowed-nodes", "", "the cluster's node allowlist, comma-separated (empty: every node)")
	fs.StringVar(&cfg.NATS.URL, "nats-url", getenv("PROXOPS_NATS_URL"), "NATS server URL(s)")
	fs.StringVar(&cfg.NATS.CredsFile, "nats-creds", "", "NATS credentials file")
	fs.StringVar(&cfg.NATS.User, "nats-user", "", "NATS user")
	fs.StringVar(&cfg.NATS.TLSCA, "nats-ca", "", "CA of the NATS servers' certificates")
	fs.StringVar(&cfg.NATS.TLSCert, "nats-cert", "", "client certificate for NATS")
	fs.StringVar(&cfg.NATS.TLSKey, "nats-key", "", "client key for NATS")
	fs.StringVar(&cfg.PVE.BaseURL, "pve-url", "", "PVE API endpoint, https://host:8006 (required)")
	fs.StringVar(&cfg.PVE.CAFile, "pve-ca-file", "", "PEM CA bundle that signs the PVE certificate")
	fs.BoolVar(&cfg.PVE.Insecure, "pve-insecure", false, "skip PVE certificate verification (only for a cluster configured insecure: true)")
	user := fs.String("pve-user", "", "PVE user (user@realm); PROXOPS_PVE_USER wins")
	tokenID := fs.String("pve-token-id", "", "PVE API token name (with PROXOPS_PVE_TOKEN as its secret)")
	fs.StringVar(&cfg.RepoBaseURL, "repo-base-url", "", "the base-url the repository declares for the cluster; refused when it differs from --pve-url")
	fs.IntVar(&cfg.Concurrency, "concurrency", 4, "operations at once (executor.concurrency)")
	fs.IntVar(&cfg.StorageConcurrency, "storage-concurrency", 1, "clones or downloads at once per storage (executor.storage-concurrency)")
	fs.DurationVar(&cfg.LockWait, "lock-wait", 2*time.Hour, "how long to wait on a guest locked by a long PVE job (reconcile.lock-wait)")
	fs.DurationVar(&cfg.PVE.TaskTimeout, "task-timeout", 30*time.Minute, "longest wait for one PVE task (reconcile.task-timeout)")
	fs.DurationVar(&cfg.PVE.TaskPollMin, "task-poll", 250*time.Millisecond, "first interval between task status polls")
	fs.DurationVar(&cfg.AckWait, "ack-wait", 30*time.Second, "redelivery timeout of an unacknowledged operation")
	fs.IntVar(&cfg.MaxDeliver, "max-deliver", 10, "deliveries of an operation before it is dead-lettered")
	fs.DurationVar(&cfg.RetryBackoff, "retry-backoff", 2*time.Second, "first delay before a retryable failure is retried")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9495", "address of the /metrics endpoint (empty: off)")
	if err := fs.Parse(args); err != nil {
		return cfg, "", err
	}
	if fs.NArg() > 0 {
		return cfg, "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *nodes != "" {
		for n := range strings.SplitSeq(*nodes, ",") {
			if n = strings.TrimSpace(n); n != "" {
				cfg.AllowedNodes = append(cfg.AllowedNodes, n)
			}
		}
	}
	cfg.NATS.Password = getenv("PROXOPS_NATS_PASSWORD")
	cfg.OwnEndpoint = true
	// Credentials: PROXOPS_PVE_TOKEN_VALUE (user@realm!id=secret) wins over user + token id + token;
	// PROXOPS_PVE_PASSWORD selects ticket auth. Environment values override flags.
	if v := getenv("PROXOPS_PVE_USER"); v != "" {
		*user = v
	}
	switch tv := getenv("PROXOPS_PVE_TOKEN_VALUE"); {
	case tv != "":
		id, secret, err := executor.ParseTokenValue(tv)
		if err != nil {
			return cfg, "", fmt.Errorf("PROXOPS_PVE_TOKEN_VALUE: %w", err)
		}
		cfg.PVE.TokenID, cfg.PVE.TokenSecret = id, secret
	case getenv("PROXOPS_PVE_TOKEN") != "":
		if *user == "" || *tokenID == "" {
			return cfg, "", errors.New("PROXOPS_PVE_TOKEN needs --pve-user (or PROXOPS_PVE_USER) and --pve-token-id")
		}
		cfg.PVE.TokenID, cfg.PVE.TokenSecret = *user+"!"+*tokenID, getenv("PROXOPS_PVE_TOKEN")
	case getenv("PROXOPS_PVE_PASSWORD") != "":
		if *user == "" {
			return cfg, "", errors.New("PROXOPS_PVE_PASSWORD needs --pve-user (or PROXOPS_PVE_USER)")
		}
		cfg.PVE.User, cfg.PVE.Password = *user, getenv("PROXOPS_PVE_PASSWORD")
	default:
		return cfg, "", errors.New("no PVE credentials: set PROXOPS_PVE_TOKEN_VALUE, or PROXOPS_PVE_USER with PROXOPS_PVE_TOKEN and --pve-token-id, or PROXOPS_PVE_PASSWORD")
	}
	cfg.PVE.TaskPollMax = max(5*time.Second, cfg.PVE.TaskPollMin)
	if err := cfg.Validate(); err != nil {
		return cfg, "", err
	}
	if msg := fault(getenv("PROXOPS_EXECUTOR_TEST_FAULT")); msg != nil {
		cfg.Fault = msg
	}
	return cfg, *metricsListen, nil
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
