package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/secrets"
)

// natsOptions say how a command reaches ProxOps: a deployed system (--nats), a proxops up running on the
// data directory, or a system of its own started in this process on the data directory.
type natsOptions struct {
	dataDir string
	url     string
	creds   string
	user    string
	ca      string
	cert    string
	key     string
}

// flags registers the data directory and NATS flags (the same as proxops status).
func (o *natsOptions) flags(f *pflag.FlagSet) {
	f.StringVar(&o.dataDir, "data-dir", defaultStatusDataDir(), "data directory shared with proxops up (env PROXOPS_DATA_DIR); the ownership inventory lives here")
	f.StringVar(&o.url, "nats", "", "NATS URL of a deployed ProxOps: become its client instead of running one")
	f.StringVar(&o.creds, "nats-creds", "", "NATS credentials file (with --nats)")
	f.StringVar(&o.user, "nats-user", "", "NATS user (with --nats); the password is read from PROXOPS_NATS_PASSWORD")
	f.StringVar(&o.ca, "nats-ca", "", "CA file that verifies the NATS server (with --nats)")
	f.StringVar(&o.cert, "nats-cert", "", "client certificate file (with --nats)")
	f.StringVar(&o.key, "nats-key", "", "client key file (with --nats)")
}

// dir returns the data directory with ~ expanded.
func (o natsOptions) dir() (string, error) {
	d := o.dataDir
	if d == "" {
		d = defaultStatusDataDir()
	}
	return secrets.ExpandHome(d)
}

// connectRemote connects to a deployed system or to a running proxops up.
func (o natsOptions) connectRemote(ctx context.Context) (*bus.Bus, error) {
	return bus.Connect(ctx, bus.ConnectConfig{URL: o.url, Name: "proxops-cli", CredsFile: o.creds, User: o.user,
		Password: os.Getenv("PROXOPS_NATS_PASSWORD"), TLSCA: o.ca, TLSCert: o.cert, TLSKey: o.key}, bus.Options{})
}

// connectUp connects to the proxops up that holds the data directory, through the client information it
// wrote there.
func connectUp(ctx context.Context, dir string) (*bus.Bus, error) {
	ci, err := bus.ReadClientInfo(dir)
	if err != nil {
		return nil, fmt.Errorf("%w (%s holds no address of a running proxops up: another diff or apply is running; wait for it or use another --data-dir)", errDataDirBusy, dir)
	}
	b, err := bus.Connect(ctx, bus.ConnectConfig{URL: ci.URL, Name: "proxops-cli", User: ci.User, Password: ci.Password}, bus.Options{})
	if err != nil {
		return nil, fmt.Errorf("connect to the proxops up on %s: %w", dir, err)
	}
	return b, nil
}

// attachBus connects to ProxOps' NATS: --nats, else the proxops up that holds the data directory. When
// neither is there, it locks the data directory and returns it as own, for the caller to run a server of
// its own there; b is nil then. release closes the connection or unlocks the directory.
func attachBus(ctx context.Context, o natsOptions) (b *bus.Bus, own string, release func(), err error) {
	if o.url != "" {
		if b, err = o.connectRemote(ctx); err != nil {
			return nil, "", nil, err
		}
		return b, "", func() { _ = b.Close() }, nil
	}
	dir, err := o.dir()
	if err != nil {
		return nil, "", nil, err
	}
	lock, err := lockDataDir(dir)
	if errors.Is(err, errDataDirBusy) {
		if b, err = connectUp(ctx, dir); err != nil {
			return nil, "", nil, err
		}
		return b, "", func() { _ = b.Close() }, nil
	}
	if err != nil {
		return nil, "", nil, err
	}
	return nil, dir, lock.release, nil
}

// withBus runs fn with a connection to ProxOps' NATS: --nats, else the proxops up on the data directory,
// else a server of its own on the data directory (no services), provisioned.
func withBus(ctx context.Context, o natsOptions, fn func(*bus.Bus) error) error {
	b, dir, release, err := attachBus(ctx, o)
	if err != nil {
		return err
	}
	defer release()
	if b != nil {
		return fn(b)
	}
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: dir, SyncAlways: true})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	if b, err = srv.Connect(bus.Options{}); err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	if _, err := b.Provision(ctx, bus.ProvisionConfig{}); err != nil {
		return err
	}
	return fn(b)
}
