// Command proxops-status runs ProxOps' status service against a deployed NATS server: it folds the
// repository, plan, result and gap streams into one report per cluster, stores and publishes them, and serves
// /status, /status/<cluster>, /healthz, /readyz, /metrics and a status page.
//
// Configuration comes from flags, each with an environment variable as its default; the NATS password is read
// from PROXOPS_NATS_PASSWORD only, never from a flag.
package main

import (
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/service"
	"github.com/proxops/proxops/services/status"
)

// Set at link time (-X main.version=... -X main.commit=...).
var (
	version = ""
	commit  = ""
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

// options is everything main reads from flags and the environment.
type options struct {
	nats       bus.ConnectConfig
	listen     string
	staleAfter time.Duration
	refresh    time.Duration
	logLevel   slog.Level
}

func parseOptions(args []string, getenv func(string) string, out io.Writer) (options, error) {
	var o options
	fs, env := service.FlagSet("proxops-status", out, getenv, &o.nats)
	fs.StringVar(&o.listen, "listen", env.String("PROXOPS_STATUS_LISTEN", status.DefaultListen), "HTTP address [PROXOPS_STATUS_LISTEN]")
	fs.DurationVar(&o.staleAfter, "stale-after", env.Duration("PROXOPS_STATUS_STALE_AFTER", status.DefaultStaleAfter),
		"/healthz reports stale when a cluster's planner has not answered for longer; twice the drift interval [PROXOPS_STATUS_STALE_AFTER]")
	fs.DurationVar(&o.refresh, "refresh", env.Duration("PROXOPS_STATUS_REFRESH", status.DefaultRefresh), "how often the status page reloads itself [PROXOPS_STATUS_REFRESH]")
	level := env.LevelFlag(fs)
	var err error
	o.logLevel, err = env.ParseAll(fs, args, level, func() error { return service.NATS(&o.nats, bus.RoleStatus, "proxops-status") })
	return o, err
}

func run(args []string, getenv func(string) string, stderr io.Writer) int {
	o, err := parseOptions(args, getenv, stderr)
	if code, done := service.ConfigError(stderr, "proxops-status", err); done {
		return code
	}
	log := service.Logger(stderr, o.logLevel, "status")
	ctx, stop := service.SignalContext()
	defer stop()
	b, err := bus.Connect(ctx, o.nats, bus.Options{Logger: log})
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	defer func() { _ = b.Close() }()
	reg, err := service.Registry(service.BuildInfo(version, commit))
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	err = status.Run(ctx, status.Config{Bus: b, Logger: log, Registry: reg, Listen: o.listen,
		StaleAfter: o.staleAfter, Refresh: o.refresh})
	if err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}
