// Command proxops-notifier runs ProxOps' notifier against a deployed NATS server: it follows the plan events
// and the adopter's gap reports and tells the providers of a configuration file's notifications section
// (webhooks, chat, e-mail, Alertmanager) what needs people. It serves its own /metrics.
//
// Configuration comes from flags, each with an environment variable as its default; the NATS password is read
// from PROXOPS_NATS_PASSWORD only, and the providers' secrets from the SOPS file that notifications.secrets-file
// names (decrypted with the age keys of SOPS_AGE_KEY_FILE or SOPS_AGE_KEY).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/service"
	"github.com/proxops/proxops/services/notifier"
)

// DefaultMetricsListen is where /metrics is served unless --metrics-listen says otherwise.
const DefaultMetricsListen = "127.0.0.1:9499"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.LookupEnv, os.Stderr))
}

// options is everything main reads from flags and the environment.
type options struct {
	nats          bus.ConnectConfig
	config        string
	metricsListen string
	logLevel      slog.Level
}

func parseOptions(args []string, getenv func(string) string, out io.Writer) (options, error) {
	var o options
	fs, env := service.FlagSet("proxops-notifier", out, getenv, &o.nats)
	fs.StringVar(&o.config, "config", getenv("PROXOPS_CONFIG"),
		"configuration file (proxops.yaml format) whose notifications section names the providers [PROXOPS_CONFIG]")
	fs.StringVar(&o.metricsListen, "metrics-listen", env.String("PROXOPS_NOTIFIER_METRICS_LISTEN", DefaultMetricsListen),
		"address of the /metrics endpoint, empty for off [PROXOPS_NOTIFIER_METRICS_LISTEN]")
	level := env.LevelFlag(fs)
	var err error
	o.logLevel, err = env.ParseAll(fs, args, level,
		func() error { return service.NATS(&o.nats, bus.RoleNotifier, "proxops-notifier") },
		func() error {
			if o.config == "" {
				return errors.New("--config (or PROXOPS_CONFIG) is required: it names the providers")
			}
			return nil
		})
	return o, err
}

// loadNotifications reads the notifications section of file and decrypts the secrets file it names (a
// relative path is relative to file's directory).
func loadNotifications(ctx context.Context, file string, lookup func(string) (string, bool)) (repo.NotificationsConfig, *secrets.Store, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return repo.NotificationsConfig{}, nil, err
	}
	cfg, diags := repo.ParseConfigFile(file, data)
	if diags.HasErrors() {
		return repo.NotificationsConfig{}, nil, diags.Errors()
	}
	n := cfg.Notifications
	if len(n.Providers) == 0 {
		return n, nil, fmt.Errorf("%s: notifications.providers is empty: nothing to notify", file)
	}
	if n.SecretsFile == "" {
		return n, nil, nil
	}
	p, err := secrets.ExpandHome(n.SecretsFile)
	if err != nil {
		return n, nil, err
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(file), p)
	}
	sdata, err := os.ReadFile(p)
	if err != nil {
		return n, nil, fmt.Errorf("notifications.secrets-file: %w", err)
	}
	store, err := secrets.NewDecryptor(secrets.FromEnvironment(lookup)).Decrypt(ctx, p, sdata)
	if err != nil {
		return n, nil, fmt.Errorf("notifications.secrets-file: %w", err)
	}
	return n, store, nil
}

func run(args []string, getenv func(string) string, lookup func(string) (string, bool), stderr io.Writer) int {
	ctx, stop := service.SignalContext()
	defer stop()
	return runContext(ctx, args, getenv, lookup, stderr)
}

// runContext runs the notifier until ctx is cancelled and returns the exit code.
func runContext(ctx context.Context, args []string, getenv func(string) string, lookup func(string) (string, bool), stderr io.Writer) int {
	o, err := parseOptions(args, getenv, stderr)
	if code, done := service.ConfigError(stderr, "proxops-notifier", err); done {
		return code
	}
	log := service.Logger(stderr, o.logLevel, "notifier")
	ncfg, store, err := loadNotifications(ctx, o.config, lookup)
	if err != nil {
		fmt.Fprintln(stderr, "proxops-notifier:", err)
		return 2
	}
	reg, stopMetrics, err := service.Metrics(o.metricsListen, service.BuildInfo("", ""), log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	defer stopMetrics()
	if err := notifier.RegisterMetrics(reg); err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	b, err := bus.Connect(ctx, o.nats, bus.Options{Logger: log})
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	defer func() { _ = b.Close() }()
	if err := notifier.Run(ctx, notifier.Config{Bus: b, Notifications: ncfg, Secrets: store, Registry: reg, Logger: log}); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}
