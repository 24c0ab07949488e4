package main

import (
	"cmp"
	"slices"

	"github.com/spf13/cobra"
)

// commands holds the constructors of the subcommands; each command's file registers its own in an init
// function, so adding a command touches only its file.
var commands []func() *cobra.Command

func register(newCommand func() *cobra.Command) { commands = append(commands, newCommand) }

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
	// The predecessor's global flags, on every command; each command reads them with globalsOf.
	var global globalOptions
	global.register(root.PersistentFlags())
	subs := make([]*cobra.Command, 0, len(commands))
	for _, newCommand := range commands {
		subs = append(subs, newCommand())
	}
	slices.SortFunc(subs, func(a, b *cobra.Command) int { return cmp.Compare(a.Name(), b.Name()) })
	root.AddCommand(subs...)
	return root
}
