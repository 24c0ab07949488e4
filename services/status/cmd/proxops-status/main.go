// Command proxops-status runs ProxOps' status service against a deployed NATS server: it folds the
// repository, plan, result and gap streams into one report per cluster, stores and publishes them, and serves
// /status, /status/<cluster>, /healthz, /readyz, /metrics and a status page.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/metrics"
	"github.com/proxops/proxops/services/status"
)

// Set at link time (-X main.version=... -X main.commit=...).
var (
	version = ""
	commit  = ""
)

type options struct {
	nats       bus.ConnectConfig
	listen     string
	staleAfter time.Duration
	refresh    time.Duration
	logLevel   string
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("proxops-status", flag.ContinueOnError)
	fs.StringVar(&o.nats.URL, "nats", env("PROXOPS_NATS_URL", ""), "NATS server URL(s), comma-separated (env PROXOPS_NATS_URL)")
	fs.StringVar(&o.nats.CredsFile, "nats-creds", env("PROXOPS_NATS_CREDS", ""), "NATS credentials file (env PROXOPS_NATS_CREDS)")
	fs.StringVar(&o.nats.User, "nats-user", env("PROXOPS_NATS_USER", string(bus.RoleStatus)), "NATS user (env PROXOPS_NATS_USER)")
	fs.StringVar(&o.nats.TLSCA, "nats-ca", env("PROXOPS_NATS_CA", ""), "CA file that verifies the NATS server (env PROXOPS_NATS_CA)")
	fs.StringVar(&o.nats.TLSCert, "nats-cert", env("PROXOPS_NATS_CERT", ""), "client certificate file (env PROXOPS_NATS_CERT)")
	fs.StringVar(&o.nats.TLSKey, "nats-key", env("PROXOPS_NATS_KEY", ""), "client key file (env PROXOPS_NATS_KEY)")
	fs.StringVar(&o.listen, "listen", env("PROXOPS_STATUS_LISTEN", status.DefaultListen), "HTTP address (env PROXOPS_STATUS_LISTEN)")
	fs.DurationVar(&o.staleAfter, "stale-after", status.DefaultStaleAfter, "report /healthz stale when a cluster's planner has not answered for longer (twice the drift interval)")
	fs.DurationVar(&o.refresh, "refresh", status.DefaultRefresh, "how often the status page reloads itself")
	fs.StringVar(&o.logLevel, "log-level", env("PROXOPS_LOG_LEVEL", "info"), "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.nats.URL == "" {
		return o, errors.New("--nats (or PROXOPS_NATS_URL) is required")
	}
	if o.nats.CredsFile != "" {
		o.nats.User = ""
	}
	// The password comes from the environment only, never from a flag visible in the process list.
	o.nats.Password = os.Getenv(bus.PasswordVariable(o.nats.User))
	if o.nats.User != "" && o.nats.Password == "" {
		o.nats.User = ""
	}
	o.nats.Name = "proxops-status"
	return o, nil
}

func buildInfo() metrics.BuildInfo {
	b := metrics.BuildInfo{Version: version, Commit: commit}
	if b.Version == "" {
		if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.Version = info.Main.Version
		}
	}
	return b
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	b, err := bus.Connect(ctx, o.nats, bus.Options{Logger: log})
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	reg := prometheus.NewRegistry()
	if err := metrics.RegisterProcess(reg, buildInfo()); err != nil {
		return err
	}
	return status.Run(ctx, status.Config{Bus: b, Logger: log, Registry: reg, Listen: o.listen,
		StaleAfter: o.staleAfter, Refresh: o.refresh})
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(2)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "error: --log-level: %v\n", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, o, log)
	stop()
	if err != nil {
		log.Error("status service stopped", "err", err)
		os.Exit(1)
	}
}
