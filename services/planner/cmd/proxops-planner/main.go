// Command proxops-planner runs a ProxOps planner replica: proxops-planner --nats-url nats://... Any number of
// replicas may run; each repository event is handled by one of them, and each cluster is driven by the one
// holding its lease.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/proxops/proxops/internal/opsign"
	"github.com/proxops/proxops/internal/service"
	"github.com/proxops/proxops/services/planner"
)

func main() {
	service.Exit(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Getenv, os.Stderr) })
}

// run runs the planner until ctx ends and returns the exit code: 2 for a bad configuration, 1 when it
// cannot run.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, metricsListen, level, err := configure(args, getenv)
	if code, done := service.ConfigError(stderr, "proxops-planner", err); done {
		return code
	}
	log := service.Logger(stderr, level, "planner")
	cfg.Logger = log
	reg, stopMetrics, err := service.Metrics(metricsListen, service.BuildInfo("", ""), log)
	if err != nil {
		log.Error("planner", "err", err)
		return 1
	}
	defer stopMetrics()
	cfg.Registry = reg
	if err := planner.Run(ctx, cfg); err != nil {
		log.Error("planner", "err", err)
		return 1
	}
	return 0
}

// configure builds the planner's configuration from flags and the environment.
func configure(args []string, getenv func(string) string) (planner.Config, string, slog.Level, error) {
	var cfg planner.Config
	fs := flag.NewFlagSet("proxops-planner", flag.ContinueOnError)
	fs.StringVar(&cfg.Name, "name", "", "replica name in leases and logs (default host-pid)")
	cfg.NATS.RegisterFlags(fs, getenv)
	fs.DurationVar(&cfg.ObserveTimeout, "observe-timeout", planner.DefaultObserveTimeout, "longest wait for one node's inventory")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", planner.DefaultLeaseTTL, "the proxops_leases bucket's TTL (renewed every third of it)")
	fs.IntVar(&cfg.Concurrency, "concurrency", planner.DefaultConcurrency, "repository events handled at once")
	fs.BoolVar(&cfg.LocalSecrets, "local-secrets", false, "read a secrets-file outside the repository from this host's disk")
	signingKey := fs.String("signing-key-file", getenv("PROXOPS_SIGNING_KEY_FILE"),
		"nkey seed file the planner signs operations with; executors trust its public key [PROXOPS_SIGNING_KEY_FILE]")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9496", "address of the /metrics endpoint (empty: off)")
	levelName := fs.String("log-level", "info", "debug, info, warn or error")
	level, err := service.ParseWithLevel(fs, args, levelName)
	if err != nil {
		return cfg, "", 0, err
	}
	if *signingKey != "" {
		signer, err := opsign.LoadSigner(*signingKey)
		if err != nil {
			return cfg, "", 0, fmt.Errorf("--signing-key-file: %w", err)
		}
		cfg.Signer = signer
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", 0, err
	}
	return cfg, *metricsListen, level, nil
}
