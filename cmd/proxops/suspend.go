package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

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
	use, short, long := "resume [CLUSTER/GUEST]...", "Let plans of a suspended cluster, or correct a rolled-back guest, again",
		`resume --cluster C lifts a run-time suspension set by proxops suspend: the cluster's next plan is applied. A
cluster with suspend: true in its config.yaml stays suspended until the repository says otherwise.

resume CLUSTER/GUEST lifts the suspension of a guest that proxops rollback rolled back: the cluster's next
plan corrects it to what git declares again (GUEST is its name, Kind/name or vmid).`
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
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) > 0 && on:
				return fmt.Errorf("suspend takes no arguments (%s): it suspends whole clusters (--cluster)", strings.Join(args, " "))
			case len(args) > 0 && len(clusters) > 0:
				return errors.New("resume takes either --cluster (a suspended cluster) or CLUSTER/GUEST arguments (rolled-back guests), not both")
			case len(args) == 0 && len(clusters) == 0:
				return errors.New("--cluster is required")
			}
			if opts.url == "" {
				dir, err := configuredDataDir(cmd.Context(), cmd, opts.dataDir, os.LookupEnv)
				if err != nil {
					return err
				}
				opts.dataDir = dir
			}
			if len(args) > 0 {
				return runResumeGuests(cmd.Context(), cmd.OutOrStdout(), opts, args)
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
