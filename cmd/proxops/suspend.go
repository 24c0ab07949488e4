package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/services/planner"
)

func init() {
	register(newSuspendCommand)
	register(newResumeCommand)
}

func newSuspendCommand() *cobra.Command { return suspendCommand(true) }
func newResumeCommand() *cobra.Command  { return suspendCommand(false) }

// suspendCommand is proxops suspend (on) or proxops resume (off).
func suspendCommand(on bool) *cobra.Command {
	var (
		opts     natsOptions
		clusters []string
	)
	use, short, long := "resume", "Let plans of a suspended cluster be applied again",
		`resume lifts a run-time suspension set by proxops suspend: the cluster's next plan is applied. A cluster
with suspend: true in its config.yaml stays suspended until the repository says otherwise.`
	if on {
		use, short, long = "suspend", "Stop applying plans to a cluster; plans are still computed and shown",
			`suspend stops ProxOps from applying anything to a cluster, at run time and without a commit: its plans
are still computed and published (dry), nothing is written to PVE. A run in progress finishes; the
suspension applies from the next plan. The flag lives in the planners' shared state (KV proxops_clusters),
so it holds for every planner of a deployment (--nats) or for the data directory's single-host system.
proxops resume lifts it.`
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(clusters) == 0 {
				return errors.New("--cluster is required")
			}
			if opts.url == "" {
				dir, err := configuredDataDir(cmd.Context(), cmd, opts.dataDir, os.LookupEnv)
				if err != nil {
					return err
				}
				opts.dataDir = dir
			}
			return runSuspend(cmd.Context(), cmd.OutOrStdout(), opts, clusters, on)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&clusters, "cluster", nil, "the cluster (repeatable; required)")
	opts.flags(f)
	return cmd
}

func runSuspend(ctx context.Context, w io.Writer, opts natsOptions, clusters []string, on bool) error {
	for _, c := range clusters {
		if err := bus.ValidateCluster(c); err != nil {
			return fmt.Errorf("--cluster: %w", err)
		}
	}
	return withBus(ctx, opts, func(b *bus.Bus) error {
		for _, c := range clusters {
			changed, err := planner.SetSuspended(ctx, b, c, on, requestedBy())
			if err != nil {
				return err
			}
			state := "resumed"
			if on {
				state = "suspended"
			}
			if changed {
				fmt.Fprintf(w, "%s: %s\n", c, state)
			} else {
				fmt.Fprintf(w, "%s: already %s\n", c, state)
			}
		}
		return nil
	})
}
