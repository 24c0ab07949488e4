package main

import (
	"fmt"
	"net"

	"github.com/spf13/cobra"

	"github.com/proxops/proxops/internal/pvesim"
)

func init() { register(newSimCommand) }

func newSimCommand() *cobra.Command {
	var (
		listen   string
		useTLS   bool
		specFile string
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Serve a simulated Proxmox VE cluster (the PVE API on /api2/json)",
		Long: `sim serves a simulated Proxmox VE cluster that validates every request against the official API
schema and behaves like PVE (see docs/simulator.md). Without --spec it serves three nodes pve1..pve3 with
storages local and local-lvm and two API tokens. Test-only routes under /_sim/ (fault injection, request
log, counters, state dump, guest locks and HA) are served beside the API without auth.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec := pvesim.DefaultSpec()
			if specFile != "" {
				var err error
				if spec, err = pvesim.LoadSpec(specFile); err != nil {
					return err
				}
			}
			sim, err := pvesim.New(spec)
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", listen, err)
			}
			out := cmd.OutOrStdout()
			return sim.Serve(cmd.Context(), l, useTLS, func(base string) {
				fmt.Fprintf(out, "PVE simulator listening on %s\n", base)
				for _, t := range spec.Tokens {
					fmt.Fprintf(out, "API token: %s=%s\n", t.ID, t.Secret)
				}
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8006", "address to listen on")
	cmd.Flags().BoolVar(&useTLS, "tls", false, "serve HTTPS with a generated self-signed certificate")
	cmd.Flags().StringVar(&specFile, "spec", "", "cluster spec file (YAML, see docs/simulator.md)")
	return cmd
}
