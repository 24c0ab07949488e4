package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
)

// testServer starts an embedded server on a fresh data directory, connects and provisions it.
type testEnv struct {
	dir    string
	server *bus.Server
	bus    *bus.Bus
}

func startEnv(t testing.TB, cfg bus.ServerConfig, pcfg bus.ProvisionConfig) *testEnv {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	ctx := context.Background()
	srv, err := bus.StartServer(ctx, cfg)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	b, err := srv.Connect(bus.Options{APITimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if _, err := b.Provision(ctx, pcfg); err != nil {
		t.Fatalf("provision: %v", err)
	}
	return &testEnv{dir: cfg.Dir, server: srv, bus: b}
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
