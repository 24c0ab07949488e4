// Package service holds what every service command's main does the same way: environment variables as the
// defaults of flags, the log level and the JSON logger, the context a signal ends, the process metrics with
// the build's version, and the /metrics endpoint. Each command keeps its own flags; this package only binds
// them alike.
package service

import (
	"context"
	"errors"
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

// Err returns every variable that did not parse, joined; nil when all did.
func (e *Env) Err() error { return errors.Join(e.errs...) }

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
