// Package httpserver builds every HTTP server ProxOps runs (the status page, the watcher's webhooks, each
// service's /metrics, the notifications listener and the PVE simulator) with the same limits: how long a
// client may take to send a request's headers and body, how long a response may take to be written, and how
// long an idle keep-alive connection is kept. A client that opens connections and sends nothing, or never
// reads, cannot hold a server's connections for ever. A test of this package fails on any http.Server built
// elsewhere in the module.
package httpserver

import (
	"net/http"
	"time"

	"github.com/proxops/proxops/internal/defaults"
)

// Default limits. Nothing ProxOps serves streams: every response is written at once, well within Write.
const (
	// DefaultReadHeaderTimeout bounds reading a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included (a webhook's payload).
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds handling a request and writing its response, from the end of its headers.
	DefaultWriteTimeout = time.Minute
	// DefaultIdleTimeout is how long a keep-alive connection may wait for its next request.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxHeaderBytes bounds a request's headers.
	DefaultMaxHeaderBytes = 64 << 10
)

// Limits are a server's timeouts; a zero field takes its default.
type Limits struct {
	ReadHeader, Read, Write, Idle time.Duration
	MaxHeaderBytes                int
}

func (l Limits) withDefaults() Limits {
	defaults.Positive(&l.ReadHeader, DefaultReadHeaderTimeout)
	defaults.Positive(&l.Read, DefaultReadTimeout)
	defaults.Positive(&l.Write, DefaultWriteTimeout)
	defaults.Positive(&l.Idle, DefaultIdleTimeout)
	defaults.Positive(&l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	return l
}

// New returns a server for h with the given limits (Limits{} for the defaults). The caller serves it on
// its own listener and shuts it down.
func New(h http.Handler, l Limits) *http.Server {
	l = l.withDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeader,
		ReadTimeout:       l.Read,
		WriteTimeout:      l.Write,
		IdleTimeout:       l.Idle,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}
