// Command proxops-adopter runs a ProxOps adopter: proxops-adopter --nats-url nats://... It reports the live
// settings the manifests do not cover as gaps, continuously, and serves proxops adopt --nats.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/proxops/proxops/services/adopter"
)

func main() {
	cfg, level, err := configure(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "proxops-adopter: %v\n", err)
		os.Exit(2)
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := adopter.Run(ctx, cfg); err != nil {
		cfg.Logger.Error("adopter", "err", err)
		os.Exit(1)
	}
}

// configure builds the adopter's configuration from flags and the environment.
func configure(args []string, getenv func(string) string) (adopter.Config, slog.Level, error) {
	var cfg adopter.Config
	fs := flag.NewFlagSet("proxops-adopter", flag.ContinueOnError)
	cfg.NATS.RegisterFlags(fs, getenv)
	fs.DurationVar(&cfg.ObserveTimeout, "observe-timeout", adopter.DefaultObserveTimeout, "longest wait for one node's inventory during an adoption")
	fs.BoolVar(&cfg.LocalSecrets, "local-secrets", false, "read a secrets-file outside the repository from this host's disk")
	levelName := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return cfg, 0, err
	}
	if fs.NArg() > 0 {
		return cfg, 0, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*levelName)); err != nil {
		return cfg, 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", *levelName)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, 0, err
	}
	return cfg, level, nil
}
