package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/proxops/proxops/internal/bus"
)

// connectBus connects to NATS JetStream and, when asked, provisions the streams, buckets and stores.
func connectBus(ctx context.Context, o options, log *slog.Logger) (*bus.Bus, error) {
	if o.bus.URL == "" {
		return nil, errors.New("nats url required (-nats-url or PROXOPS_NATS_URL): the watcher publishes its events on NATS JetStream")
	}
	if o.bus.Name == "" {
		o.bus.Name = "proxops-watcher"
	}
	b, err := bus.Connect(ctx, o.bus, bus.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	if o.provision {
		if _, err := b.Provision(ctx, bus.ProvisionConfig{}); err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("provision: %w", err)
		}
	}
	return b, nil
}
