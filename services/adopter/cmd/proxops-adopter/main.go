// Command proxops-adopter runs a ProxOps adopter: proxops-adopter --nats-url nats://... It reports the live
// settings the manifests do not cover as gaps, continuously, and serves proxops adopt --nats. It serves its
// own Prometheus /metrics on --metrics-listen (default 127.0.0.1:9497).
package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"

	"github.com/proxops/proxops/internal/service"
	"github.com/proxops/proxops/services/adopter"
)

// DefaultMetricsListen is the default address of the adopter's /metrics endpoint.
const DefaultMetricsListen = "127.0.0.1:9497"

func main() {
	service.Exit(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Getenv, os.Stderr) })
}

// run runs the adopter until ctx ends and returns the exit code: 2 for a bad configuration, 1 when it
// cannot run.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, metricsListen, level, err := configure(args, getenv)
	if code, done := service.ConfigError(stderr, "proxops-adopter", err); done {
		return code
	}
	cfg.Logger = service.Logger(stderr, level, "adopter")
	_, stopMetrics, err := service.Metrics(metricsListen, service.BuildInfo("", ""), cfg.Logger)
	if err != nil {
		cfg.Logger.Error("metrics server", "err", err)
		return 1
	}
	defer stopMetrics()
	// A failure after the context ended (a signal, or the caller stopping it) is the shutdown's own doing,
	// for example setting up a consumer that the cancelled context cut short.
	if err := adopter.Run(ctx, cfg); err != nil && ctx.Err() == nil {
		cfg.Logger.Error("adopter", "err", err)
		return 1
	}
	return 0
}

// configure builds the adopter's configuration from flags and the environment, with the address of the
// /metrics endpoint and the log level.
func configure(args []string, getenv func(string) string) (adopter.Config, string, slog.Level, error) {
	var cfg adopter.Config
	fs := flag.NewFlagSet("proxops-adopter", flag.ContinueOnError)
	cfg.NATS.RegisterFlags(fs, getenv)
	fs.DurationVar(&cfg.ObserveTimeout, "observe-timeout", adopter.DefaultObserveTimeout, "longest wait for one node's inventory during an adoption")
	fs.BoolVar(&cfg.LocalSecrets, "local-secrets", false, "read a secrets-file outside the repository from this host's disk")
	metricsListen := fs.String("metrics-listen", DefaultMetricsListen, "address of the /metrics endpoint (empty: off)")
	levelName := fs.String("log-level", "info", "debug, info, warn or error")
	level, err := service.ParseWithLevel(fs, args, levelName)
	if err != nil {
		return cfg, "", 0, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", 0, err
	}
	return cfg, *metricsListen, level, nil
}
