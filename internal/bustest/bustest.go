// Package bustest starts a real, provisioned NATS JetStream server for tests: every test of a service talks
// to the same kind of server it meets in production, in-process and on a temporary store.
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
)

// Env is a running server and a provisioned connection to it.
type Env struct {
	Server *bus.Server
	Bus    *bus.Bus
	Dir    string
}

// Start starts an embedded server with its store in a temporary directory, connects in-process and
// provisions every stream, bucket and object store. Everything is stopped when the test ends.
func Start(t testing.TB) *Env {
	t.Helper()
	return StartIn(t, t.TempDir(), bus.ProvisionConfig{})
}

// StartIn is Start with a given store directory (to restart a server on the same data) and provisioning.
func StartIn(t testing.TB, dir string, pc bus.ProvisionConfig) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: dir})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	b, err := srv.Connect(bus.Options{})
	if err != nil {
		srv.Shutdown()
		t.Fatalf("connect nats: %v", err)
	}
	if _, err := b.Provision(ctx, pc); err != nil {
		_ = b.Close()
		srv.Shutdown()
		t.Fatalf("provision: %v", err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		srv.Shutdown()
	})
	return &Env{Server: srv, Bus: b, Dir: dir}
}

// Connect opens another in-process connection (a second service of the same system).
func (e *Env) Connect(t testing.TB) *bus.Bus {
	t.Helper()
	b, err := e.Server.Connect(bus.Options{})
	if err != nil {
		t.Fatalf("connect nats: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
