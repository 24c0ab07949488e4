package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/report"
	"github.com/proxops/proxops/services/status"
)

func init() { register(newStatusCommand) }

// statusOptions are the flags of proxops status.
type statusOptions struct {
	output   string
	clusters []string
	dataDir  string
	nats     []string
	creds    string
	user     string
	ca       string
	cert     string
	key      string
	timeout  time.Duration
}

// statusPasswordVariable holds the NATS password for --nats-user (never a flag: flags show in ps).
const statusPasswordVariable = "PROXOPS_NATS_PASSWORD"

func newStatusCommand() *cobra.Command {
	var opts statusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each cluster's status as the running system reports it",
		Long: `status reads the latest report of every cluster from a running ProxOps: by default the local
proxops up on the data directory (it finds the address and credentials in <data-dir>/nats.json), or a
deployed system with --nats URL. The data directory is found as proxops up finds it: --data-dir, else
PROXOPS_DATA_DIR, else data-dir of --config over the repository's proxops.yaml, else the default. It
prints the predecessor's status text (last cycle, counters, and one row per resource:
<Kind> <name> <id|-> <state> <reason>[ err: ...]) with each cluster's phase, findings, gaps and rejection
diagnostics, or with --output json the same document /status serves. It exits 0 whatever the clusters'
state; before the first reconcile it prints "no reconcile cycle has completed yet".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(opts.nats) == 0 {
				dir, err := configuredDataDir(cmd.Context(), cmd, opts.dataDir, os.LookupEnv)
				if err != nil {
					return err
				}
				opts.dataDir = dir
			}
			return runStatus(cmd.Context(), cmd.OutOrStdout(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opts.output, "output", "o", "text", "output format: text or json")
	f.StringArrayVar(&opts.clusters, "cluster", nil, "show only this cluster (repeatable)")
	f.StringVar(&opts.dataDir, "data-dir", defaultStatusDataDir(), "data directory of the local proxops up (env PROXOPS_DATA_DIR)")
	f.StringArrayVar(&opts.nats, "nats", nil, "NATS server URL of a deployed system (repeatable); the password for --nats-user comes from "+statusPasswordVariable)
	f.StringVar(&opts.creds, "nats-creds", "", "NATS credentials file")
	f.StringVar(&opts.user, "nats-user", "", "NATS user")
	f.StringVar(&opts.ca, "nats-ca", "", "CA file that verifies the NATS server")
	f.StringVar(&opts.cert, "nats-cert", "", "client certificate file")
	f.StringVar(&opts.key, "nats-key", "", "client key file")
	f.DurationVar(&opts.timeout, "timeout", 15*time.Second, "give up reaching NATS after this long")
	return cmd
}

// defaultStatusDataDir is PROXOPS_DATA_DIR, else ~/.local/share/proxops.
func defaultStatusDataDir() string {
	if d := os.Getenv("PROXOPS_DATA_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".local", "share", "proxops")
	}
	return filepath.Join(home, ".local", "share", "proxops")
}

// statusConnection says how to reach NATS: --nats, else the local proxops up's client info.
func statusConnection(opts statusOptions) (bus.ConnectConfig, error) {
	if len(opts.nats) > 0 {
		cfg := bus.ConnectConfig{URL: strings.Join(opts.nats, ","), Name: "proxops-status-cli", CredsFile: opts.creds,
			User: opts.user, TLSCA: opts.ca, TLSCert: opts.cert, TLSKey: opts.key}
		if opts.user != "" {
			cfg.Password = os.Getenv(statusPasswordVariable)
		}
		return cfg, nil
	}
	if opts.creds != "" || opts.user != "" {
		return bus.ConnectConfig{}, errors.New("--nats-creds and --nats-user need --nats URL")
	}
	ci, err := bus.ReadClientInfo(opts.dataDir)
	if errors.Is(err, os.ErrNotExist) {
		return bus.ConnectConfig{}, fmt.Errorf("no running proxops up found in %s (no %s): start proxops up there, pass --data-dir, or reach a deployed system with --nats URL",
			opts.dataDir, bus.ClientInfoFile)
	}
	if err != nil {
		return bus.ConnectConfig{}, err
	}
	return bus.ConnectConfig{URL: ci.URL, Name: "proxops-status-cli", User: ci.User, Password: ci.Password}, nil
}

func runStatus(ctx context.Context, w io.Writer, opts statusOptions) error {
	if opts.output != "text" && opts.output != "json" {
		return fmt.Errorf("--output %q: want text or json", opts.output)
	}
	for _, c := range opts.clusters {
		if err := bus.ValidateCluster(c); err != nil {
			return fmt.Errorf("--cluster: %w", err)
		}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()
	var view render.StatusView
	if stopped, err := readStoppedStatuses(ctx, opts, &view); err != nil {
		return err
	} else if !stopped {
		cfg, err := statusConnection(opts)
		if err != nil {
			return err
		}
		b, err := bus.Connect(ctx, cfg, bus.Options{})
		if err != nil {
			return fmt.Errorf("status: %w", err)
		}
		defer func() { _ = b.Close() }()
		if view, err = readView(ctx, b, opts.clusters); err != nil {
			return err
		}
	}
	if opts.output == "json" {
		return render.StatusJSON(w, view)
	}
	return render.StatusText(w, view)
}

// readStoppedStatuses reads the last reports of a data directory that no process holds (a proxops up that
// stopped, or up --once that finished) from its store. stopped is false when the data directory is held
// (read through its proxops up) or has no store, or with --nats.
func readStoppedStatuses(ctx context.Context, opts statusOptions, into *render.StatusView) (stopped bool, err error) {
	if len(opts.nats) > 0 || opts.creds != "" || opts.user != "" {
		return false, nil
	}
	if _, err := os.Stat(filepath.Join(opts.dataDir, "jetstream")); err != nil {
		return false, nil
	}
	lock, err := lockDataDir(opts.dataDir)
	if errors.Is(err, errDataDirBusy) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer lock.release()
	_ = os.Remove(filepath.Join(opts.dataDir, bus.ClientInfoFile))
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: opts.dataDir, SyncAlways: true})
	if err != nil {
		return false, fmt.Errorf("status: %w", err)
	}
	defer srv.Shutdown()
	b, err := srv.Connect(bus.Options{})
	if err != nil {
		return false, fmt.Errorf("status: %w", err)
	}
	defer func() { _ = b.Close() }()
	*into, err = readView(ctx, b, opts.clusters)
	return true, err
}

// readView reads what the status command shows: the clusters' reports and the health of the repositories
// the watcher follows (a repository that cannot be read makes the desired state stale).
func readView(ctx context.Context, b *bus.Bus, only []string) (render.StatusView, error) {
	statuses, err := readStatuses(ctx, b, only)
	if err != nil {
		return render.StatusView{}, err
	}
	sources, err := status.Sources(ctx, b)
	if err != nil {
		return render.StatusView{}, fmt.Errorf("status: %w", err)
	}
	return render.StatusView{Clusters: statuses, Sources: sources}, nil
}

// readStatuses reads the reports of the proxops_status bucket, all of them or the clusters named.
func readStatuses(ctx context.Context, b *bus.Bus, only []string) ([]report.ClusterStatus, error) {
	keys, err := status.StoredClusters(ctx, b)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, fmt.Errorf("status: no %s bucket: the system has not been provisioned (is proxops up running?)", bus.BucketStatus)
	}
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	for _, c := range only {
		if !slices.Contains(keys, c) {
			known := "none yet"
			if len(keys) > 0 {
				known = strings.Join(keys, ", ")
			}
			return nil, fmt.Errorf("--cluster %q: no status for it (known: %s)", c, known)
		}
	}
	var out []report.ClusterStatus
	for _, k := range keys {
		if len(only) > 0 && !slices.Contains(only, k) {
			continue
		}
		s, _, err := status.ReadStored(ctx, b, k)
		if errors.Is(err, bus.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("status: %w", err)
		}
		out = append(out, s)
	}
	return out, nil
}
