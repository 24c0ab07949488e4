package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func init() { register(newVersionCommand) }

// versionInfo describes the running binary.
type versionInfo struct {
	Version string
	Commit  string
	Go      string
}

// buildInfo returns the version from the linker flags, else from the module build info, else "dev".
func buildInfo() versionInfo {
	v := versionInfo{Version: version, Commit: commit, Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if v.Version == "" && ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.Version = bi.Main.Version
	}
	if v.Commit == "" && ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Commit = s.Value
			}
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	return v
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := buildInfo()
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "proxops %s (commit %s, %s)\n", v.Version, v.Commit, v.Go)
			return err
		},
	}
}
