package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/tap"
)

func init() { register(newEventsCommand) }

// eventsOptions are the flags of proxops events.
type eventsOptions struct {
	nats     natsOptions
	cluster  string
	follow   bool
	fromNow  bool
	progress bool
	output   string
}

func newEventsCommand() *cobra.Command {
	var opts eventsOptions
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the repository, plan, run, gap and status events of a running system",
		Long: `events prints what ProxOps publishes, readably: repository events (commits noticed, reconcile
requests, repository health), plan events (planned, rejected with its diagnostics, held, confirmed,
finished), operation results, gap reports and status changes. It reads from the start of the streams (what
they still hold: repository events 7 days, plans and results 30 days, the latest gap report and status of
each cluster) in the order they were stored, and with --follow goes on printing new events as they come
until interrupted; --from-now skips the history. Heartbeats of running PVE tasks are left out unless
--progress is given.

It reaches ProxOps as the other bus commands do: --nats URL for a deployed system, else the proxops up
running on the data directory, else the data directory's store itself.

-o text (the default) prints one line per event: time, cluster, kind and what happened. -o json prints one
JSON object per line: time, stream, seq, subject, type, content_id, cluster, kind, text and the message
itself as JSON (field names as in the proto files).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.nats.url == "" {
				dir, err := configuredDataDir(cmd.Context(), cmd, opts.nats.dataDir, os.LookupEnv)
				if err != nil {
					return err
				}
				opts.nats.dataDir = dir
			}
			return runEvents(cmd.Context(), cmd.OutOrStdout(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.cluster, "cluster", "", "only events of this cluster")
	f.BoolVarP(&opts.follow, "follow", "f", false, "keep printing new events until interrupted")
	f.BoolVar(&opts.fromNow, "from-now", false, "with --follow: skip the events stored before the command started")
	f.BoolVar(&opts.progress, "progress", false, "also print the heartbeats of running PVE tasks")
	f.StringVarP(&opts.output, "output", "o", "text", "output format: text or json (one object per line)")
	opts.nats.flags(f)
	return cmd
}

func runEvents(ctx context.Context, w io.Writer, opts eventsOptions) error {
	if opts.output != "text" && opts.output != "json" {
		return fmt.Errorf("--output %q: want text or json", opts.output)
	}
	if opts.fromNow && !opts.follow {
		return fmt.Errorf("--from-now needs --follow")
	}
	if opts.cluster != "" {
		if err := bus.ValidateCluster(opts.cluster); err != nil {
			return fmt.Errorf("--cluster: %w", err)
		}
	}
	sources, err := tap.Sources(opts.cluster)
	if err != nil {
		return err
	}
	show := func(e tap.Entry) error {
		if !e.Concerns(opts.cluster) || e.Progress && !opts.progress {
			return nil
		}
		return writeEntry(w, e, opts.output)
	}
	return withBus(ctx, opts.nats, func(b *bus.Bus) error {
		entries, next, err := tap.History(ctx, b, sources)
		if err != nil {
			return fmt.Errorf("events: %w", err)
		}
		if !opts.fromNow {
			for _, e := range entries {
				if err := show(e); err != nil {
					return err
				}
			}
		}
		if !opts.follow {
			return nil
		}
		if err := tap.Follow(ctx, b, sources, next, show); err != nil {
			return fmt.Errorf("events: %w", err)
		}
		return nil
	})
}

func writeEntry(w io.Writer, e tap.Entry, output string) error {
	if output == "json" {
		data, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	}
	cluster := e.Cluster
	if cluster == "" {
		cluster = "-"
	}
	_, err := fmt.Fprintf(w, "%s %s %s %s\n", e.Time.Format("2006-01-02T15:04:05.000Z07:00"), cluster, e.Kind, e.Text)
	return err
}
