// Package service holds what every service command's main does the same way: environment variables as the
// defaults of flags, the NATS connection flags' completion, the log level and the JSON logger, the exit codes
// of a bad configuration, the context a signal ends, the process metrics with the build's version, and the
// /metrics endpoint. Each command keeps its own flags; this package only binds
// them alike.
package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/httpserver"
	"github.com/proxops/proxops/internal/metrics"
)

// Env reads environment variables as the defaults of flags. A value that does not parse is remembered and
// returned by Err, so that every bad variable is reported at once.
type Env struct {
	Getenv func(string) string
	errs   []error
}

// String returns the variable name, or def when it is empty or unset.
func (e *Env) String(name, def string) string {
	if v := e.Getenv(name); v != "" {
		return v
	}
	return def
}

// Duration returns the variable name as a duration, or def when it is empty or unset.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	v := e.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: %w", name, v, err))
	}
	return d
}

// Bool returns the variable name as a boolean, false when it is empty or unset.
func (e *Env) Bool(name string) bool {
	v := e.Getenv(name)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: %w", name, v, err))
	}
	return b
}

// FlagSet is a service command's flag set: it returns its errors (printing usage on out) and binds the NATS
// connection flags to nats (bus.RegisterFlags), and e reads its environment.
func FlagSet(name string, out io.Writer, getenv func(string) string, nats *bus.ConnectConfig) (*flag.FlagSet, *Env) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	nats.RegisterFlags(fs, getenv)
	return fs, &Env{Getenv: getenv}
}

// Parse parses a command's arguments, all of them flags: a positional argument is an error.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

// ParseWithLevel parses fs like Parse, then the value of its --log-level flag (level) like ParseLevel.
func ParseWithLevel(fs *flag.FlagSet, args []string, level *string) (slog.Level, error) {
	if err := Parse(fs, args); err != nil {
		return 0, err
	}
	return ParseLevel(*level)
}

// ParseAll parses a command's arguments like ParseWithLevel, but goes on past a mistake so that the command
// reports them all at once: a variable that did not parse (Err), a positional argument, each of the
// command's own checks that fails (run after the flags are read) and a bad --log-level (level) come back
// joined. Only a flag that does not parse, or --help, is returned alone, at once.
func (e *Env) ParseAll(fs *flag.FlagSet, args []string, level *string, checks ...func() error) (slog.Level, error) {
	if err := fs.Parse(args); err != nil {
		return 0, err
	}
	errs := []error{e.Err()}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	for _, check := range checks {
		errs = append(errs, check())
	}
	l, err := ParseLevel(*level)
	return l, errors.Join(append(errs, err)...)
}

// LevelFlag registers --log-level on fs, with PROXOPS_LOG_LEVEL as its default; ParseLevel reads the value
// after parsing.
func (e *Env) LevelFlag(fs *flag.FlagSet) *string {
	return fs.String("log-level", e.String("PROXOPS_LOG_LEVEL", "info"), "debug, info, warn or error [PROXOPS_LOG_LEVEL]")
}

// Err returns every variable that did not parse, joined; nil when all did.
func (e *Env) Err() error { return errors.Join(e.errs...) }

// Exit runs a command's run under SignalContext and exits the process with the code it returns.
func Exit(run func(ctx context.Context) int) {
	ctx, stop := SignalContext()
	code := run(ctx)
	stop()
	os.Exit(code)
}

// ConfigError ends a command whose configuration did not parse: after --help with 0, otherwise with err
// on stderr under the command's name and 2. done is false when err is nil and the command goes on.
func ConfigError(stderr io.Writer, name string, err error) (code int, done bool) {
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2, true
	}
}

// NATS completes the NATS connection a service command read from its flags (bus.RegisterFlags): the client
// is named name, and a password given without a user, credentials or an nkey is the role's own user's. The
// server URL is required.
func NATS(cfg *bus.ConnectConfig, role bus.Role, name string) error {
	cfg.Name = name
	if cfg.User == "" && cfg.CredsFile == "" && cfg.NKeySeedFile == "" && cfg.Password != "" {
		cfg.User = string(role)
	}
	if cfg.URL == "" {
		return errors.New("--nats-url (or PROXOPS_NATS_URL) is required")
	}
	return nil
}

// ParseLevel reads a --log-level value: debug, info, warn or error.
func ParseLevel(name string) (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(name)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", name)
	}
	return level, nil
}

// Logger is a service's logger: JSON lines on w from level up, each with the service's name.
func Logger(w io.Writer, level slog.Level, name string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})).With("service", name)
}

// SignalContext is a context that SIGINT or SIGTERM ends; stop releases it.
func SignalContext() (ctx context.Context, stop context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// BuildInfo is the build's version and commit, as set at link time (-X main.version=... -X main.commit=...);
// without a version, the module version go install recorded.
func BuildInfo(version, commit string) metrics.BuildInfo {
	b := metrics.BuildInfo{Version: version, Commit: commit}
	if b.Version == "" {
		if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.Version = info.Main.Version
		}
	}
	return b
}

// Registry is a new registry with the Go runtime and process collectors and proxops_build_info.
func Registry(b metrics.BuildInfo) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	if err := metrics.RegisterProcess(reg, b); err != nil {
		return nil, err
	}
	return reg, nil
}

// Metrics is the start every service command that serves its own /metrics shares: the process's registry
// (Registry, with the build's version and commit b) served on addr (StartMetrics). stop is nil only with an
// error.
func Metrics(addr string, b metrics.BuildInfo, log *slog.Logger) (reg *prometheus.Registry, stop func(), err error) {
	if reg, err = Registry(b); err != nil {
		return nil, nil, err
	}
	if stop, err = StartMetrics(addr, reg, log); err != nil {
		return nil, nil, err
	}
	return reg, stop, nil
}

// StartMetrics is ServeMetrics when addr is set and nothing when it is empty (the endpoint is off); stop is
// never nil.
func StartMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	return ServeMetrics(addr, reg, log)
}

// ServeMetrics serves reg's /metrics on addr until the returned stop is called. It listens before it
// returns, so an address in use is an error here, not a log line later.
func ServeMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics server: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httpserver.New(mux, httpserver.Limits{})
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("metrics server listening", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}
