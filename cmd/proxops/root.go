package main

import (
	"github.com/spf13/cobra"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "proxops",
		Short: "Keep Proxmox VE clusters equal to what a git repository declares",
		Long: `proxops keeps Proxmox VE clusters equal to what a git repository declares: VMs, containers,
templates, ISOs, container templates and disk images, as YAML manifests.`,
		Version:       buildInfo().Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("proxops version {{.Version}}\n")
	root.AddCommand(newVersionCommand())
	root.AddCommand(newSimCommand())
	root.AddCommand(newValidateCommand())
	return root
}
