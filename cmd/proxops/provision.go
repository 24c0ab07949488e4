package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/proxops/proxops/internal/bus"
)

func init() { register(newProvisionCommand) }

// provisionOptions are the flags of proxops provision.
type provisionOptions struct {
	nats     natsOptions
	replicas int
	leaseTTL time.Duration
	timeout  time.Duration
}

func newProvisionCommand() *cobra.Command {
	var opts provisionOptions
	cmd := &cobra.Command{
		Use:   "provision",
		Short: "Create or update the streams, buckets and object stores of a deployed NATS system",
		Long: `provision creates every JetStream stream, key-value bucket and object store ProxOps uses on the NATS
server or cluster at --nats, or updates the settings that changed. Running it again changes nothing. Use
--replicas 3 on a three-server cluster. Connect as a user allowed to manage JetStream (the admin user of
deploy/nats). proxops up provisions its embedded server itself; this command is for deployed systems, before
their services start. It prints one line per stream, bucket and store: created, updated or unchanged.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runProvision(cmd.Context(), cmd.OutOrStdout(), opts)
		},
	}
	f := cmd.Flags()
	opts.nats.flags(f)
	_ = f.MarkHidden("data-dir") // provision only ever talks to --nats
	f.IntVar(&opts.replicas, "replicas", 1, "replicas of every stream, bucket and store (3 on a three-server cluster)")
	f.DurationVar(&opts.leaseTTL, "lease-ttl", 0, "how long a cluster's plan lease lives without renewal (default 30s)")
	f.DurationVar(&opts.timeout, "timeout", time.Minute, "give up after this long")
	return cmd
}

func runProvision(ctx context.Context, w io.Writer, opts provisionOptions) error {
	if opts.nats.url == "" {
		return errors.New("--nats URL required: provision sets up a deployed NATS system (proxops up provisions its own)")
	}
	if opts.replicas < 1 || opts.replicas > 5 {
		return fmt.Errorf("--replicas %d: want 1 to 5", opts.replicas)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()
	b, err := opts.nats.connectRemote(ctx)
	if err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	defer func() { _ = b.Close() }()
	results, err := b.Provision(ctx, bus.ProvisionConfig{Replicas: opts.replicas, LeaseTTL: opts.leaseTTL})
	for _, r := range results {
		fmt.Fprintf(w, "%-6s %-24s %s\n", r.Kind, r.Name, r.Action)
	}
	if err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	return nil
}
