// Command proxops-watcher runs the ProxOps watcher service: it follows one git repository and announces its
// manifest trees on the bus.
//
// It serves /metrics and /healthz on --metrics-listen (default 127.0.0.1:9498) whether or not the webhook
// server (--listen) runs.
//
// Configuration comes from flags, each with an environment variable as its default; credentials (the git
// token, the ssh key passphrase and the webhook secret) are read from the environment only, never from flags.
package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/service"
	"github.com/proxops/proxops/services/watcher"
)

// DefaultMetricsListen is the default address of the watcher's /metrics and /healthz endpoint.
const DefaultMetricsListen = "127.0.0.1:9498"

func main() {
	ctx, stop := service.SignalContext()
	code := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	os.Exit(code)
}

// options is everything main reads from flags and the environment.
type options struct {
	watcher   watcher.Config
	bus       bus.ConnectConfig
	provision bool
	logLevel  slog.Level
}

// run runs the watcher until ctx ends and returns the exit code: 2 for a bad configuration, 1 when it
// cannot run.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	opts, err := parseOptions(args, getenv, stderr)
	if code, done := service.ConfigError(stderr, "proxops-watcher", err); done {
		return code
	}
	log := service.Logger(stderr, opts.logLevel, "watcher")
	if err := opts.watcher.Validate(); err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	b, err := connectBus(ctx, opts, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	defer func() { _ = b.Close() }()
	reg, err := service.Registry(service.BuildInfo("", ""))
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	deps := watcher.BusDeps(b, reg, log)

	if err := watcher.Run(ctx, opts.watcher, deps); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

// parseOptions reads flags, with environment variables as their defaults.
func parseOptions(args []string, getenv func(string) string, out io.Writer) (options, error) {
	var o options
	fs, e := service.FlagSet("proxops-watcher", out, getenv, &o.bus)
	env, envDuration, envBool := e.String, e.Duration, e.Bool
	c := &o.watcher
	fs.StringVar(&c.URL, "git-url", env("PROXOPS_GIT_URL", ""), "remote repository: https://…, ssh://… or user@host:path [PROXOPS_GIT_URL]")
	fs.StringVar(&c.Path, "git-path", env("PROXOPS_GIT_PATH", ""), "local repository; its committed objects are read, its work tree never [PROXOPS_GIT_PATH]")
	fs.StringVar(&c.Branch, "git-branch", env("PROXOPS_GIT_BRANCH", watcher.DefaultBranch), "branch to follow [PROXOPS_GIT_BRANCH]")
	fs.StringVar(&c.Username, "git-username", env("PROXOPS_GIT_USERNAME", ""), "https user sent with the token, default git [PROXOPS_GIT_USERNAME]; the token is read from PROXOPS_GIT_TOKEN")
	fs.StringVar(&c.CAFile, "git-ca-file", env("PROXOPS_GIT_CA_FILE", ""), "PEM CA bundle trusted for https [PROXOPS_GIT_CA_FILE]")
	fs.BoolVar(&c.Insecure, "git-insecure", envBool("PROXOPS_GIT_INSECURE"), "skip https certificate verification [PROXOPS_GIT_INSECURE]")
	fs.StringVar(&c.SSHKeyFile, "git-ssh-key", env("PROXOPS_GIT_SSH_KEY", ""), "private key file for ssh [PROXOPS_GIT_SSH_KEY]; its passphrase is read from PROXOPS_GIT_SSH_PASSPHRASE")
	fs.StringVar(&c.KnownHostsFile, "git-known-hosts", env("PROXOPS_GIT_KNOWN_HOSTS", ""), "known_hosts file for ssh, default ~/.ssh/known_hosts [PROXOPS_GIT_KNOWN_HOSTS]")
	fs.StringVar(&c.DataDir, "data-dir", env("PROXOPS_DATA_DIR", defaultDataDir(getenv)), "data directory; the mirror lives in <data-dir>/git [PROXOPS_DATA_DIR]")
	fs.DurationVar(&c.PollInterval, "poll-interval", envDuration("PROXOPS_POLL_INTERVAL", watcher.DefaultPollInterval), "interval between remote ref listings [PROXOPS_POLL_INTERVAL]")
	fs.DurationVar(&c.DriftInterval, "drift-interval", envDuration("PROXOPS_DRIFT_INTERVAL", watcher.DefaultDriftInterval), "re-announce the current commit this often, negative for never (reconcile.drift-interval) [PROXOPS_DRIFT_INTERVAL]")
	fs.StringVar(&c.Listen, "listen", env("PROXOPS_WATCHER_LISTEN", ""), "address of the HTTP server for webhooks, /metrics and /healthz [PROXOPS_WATCHER_LISTEN]")
	fs.StringVar(&c.MetricsListen, "metrics-listen", env("PROXOPS_WATCHER_METRICS_LISTEN", DefaultMetricsListen), "address of the /metrics and /healthz endpoint, empty for off [PROXOPS_WATCHER_METRICS_LISTEN]")
	secretEnv := fs.String("webhook-secret-env", env("PROXOPS_WEBHOOK_SECRET_ENV", "PROXOPS_WEBHOOK_SECRET"), "name of the environment variable holding the webhook secret (webhook.secret-env)")
	fs.BoolVar(&o.provision, "provision", false, "create or update the streams, buckets and object stores before starting (needs a NATS user allowed to)")
	level := e.LevelFlag(fs)
	var err error
	o.logLevel, err = e.ParseAll(fs, args, level)
	c.Token = getenv("PROXOPS_GIT_TOKEN")
	c.SSHKeyPassphrase = getenv("PROXOPS_GIT_SSH_PASSPHRASE")
	if *secretEnv != "" {
		c.WebhookSecret = getenv(*secretEnv)
	}
	return o, err
}

// defaultDataDir is ~/.local/share/proxops, or $XDG_DATA_HOME/proxops.
func defaultDataDir(getenv func(string) string) string {
	if x := getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "proxops")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "share", "proxops")
	}
	return ""
}
