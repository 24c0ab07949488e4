package main

import (
	"context"
	"errors"

	"github.com/proxops/proxops/services/watcher"
)

// busConfig is how the watcher reaches NATS JetStream.
type busConfig struct {
	URL   string
	Creds string
}

// connectBus builds the watcher's dependencies on NATS JetStream: the proxops_trees object store as its tree
// store, the PROXOPS_REPO stream as its publisher and request source, and a KV bucket for its state. The
// returned function closes the connection.
//
// This build carries no NATS client, so it refuses to start rather than run without a bus.
func connectBus(_ context.Context, bc busConfig) (watcher.Deps, func(), error) {
	if bc.URL == "" {
		return watcher.Deps{}, nil, errors.New("nats url required (-nats-url or PROXOPS_NATS_URL): the watcher publishes its events on NATS JetStream")
	}
	return watcher.Deps{}, nil, errors.New("nats: this build of proxops-watcher has no NATS bus client")
}
