package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnectConfig says how to reach a deployed NATS server (or a local `proxops up`).
type ConnectConfig struct {
	// URL is one or more comma-separated server URLs (nats://, tls://).
	URL string
	// Name identifies the client in the server's monitoring (e.g. "proxops-planner").
	Name string
	// CredsFile is a decentralised-auth credentials file (JWT and nkey seed).
	CredsFile string
	// User and Password authenticate with a configured user.
	User     string
	Password string
	// NKeySeedFile authenticates with an nkey.
	NKeySeedFile string
	// TLSCA verifies the server's certificate; TLSCert and TLSKey are the client certificate, if required.
	TLSCA   string
	TLSCert string
	TLSKey  string
	// InboxPrefix is the prefix of reply subjects. Per-service permissions allow each user only its own
	// inboxes; empty means InboxPrefix(User) when User is set, and the server default otherwise.
	InboxPrefix string
	// ConnectTimeout bounds the initial connection (default 10 s).
	ConnectTimeout time.Duration
}

// ConnectUnlessGiven is the connection of a service: given, when an in-process caller passed one, or else a
// new connection with cfg, named name unless cfg names it. done closes only a connection it made.
func ConnectUnlessGiven(ctx context.Context, given *Bus, cfg ConnectConfig, name string, opts Options) (b *Bus, done func(), err error) {
	if given != nil {
		return given, func() {}, nil
	}
	if cfg.Name == "" {
		cfg.Name = name
	}
	if b, err = Connect(ctx, cfg, opts); err != nil {
		return nil, nil, err
	}
	return b, func() { _ = b.Close() }, nil
}

// Connect connects to a NATS server by URL. The returned Bus owns the connection.
func Connect(ctx context.Context, cfg ConnectConfig, opts Options) (*Bus, error) {
	if cfg.URL == "" {
		return nil, fmt.Errorf("connect: no server url")
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < cfg.ConnectTimeout {
		cfg.ConnectTimeout = time.Until(d)
	}
	nopts, err := cfg.natsOptions()
	if err != nil {
		return nil, err
	}
	if opts.Logger != nil {
		nopts = append(nopts, errorHandler(opts.Logger))
	}
	type result struct {
		nc  *nats.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(cfg.URL, nopts...)
		ch <- result{nc, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("connect %s: %w", cfg.URL, r.err)
		}
		b, err := newBus(r.nc, opts, true)
		if err != nil {
			r.nc.Close()
			return nil, err
		}
		return b, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("connect %s: %w", cfg.URL, ctx.Err())
	}
}

func (cfg ConnectConfig) natsOptions() ([]nats.Option, error) {
	name := cfg.Name
	if name == "" {
		name = "proxops"
	}
	nopts := []nats.Option{
		nats.Name(name),
		nats.Timeout(cfg.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
	}
	methods := 0
	if cfg.CredsFile != "" {
		methods++
		nopts = append(nopts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.User != "" {
		methods++
		nopts = append(nopts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.NKeySeedFile != "" {
		methods++
		opt, err := nats.NkeyOptionFromSeed(cfg.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("connect: nkey seed %s: %w", cfg.NKeySeedFile, err)
		}
		nopts = append(nopts, opt)
	}
	if methods > 1 {
		return nil, errors.New("connect: choose one of credentials file, user/password and nkey seed")
	}
	if cfg.TLSCA != "" {
		nopts = append(nopts, nats.RootCAs(cfg.TLSCA))
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, errors.New("connect: a client certificate needs both the certificate and the key file")
	}
	if cfg.TLSCert != "" {
		nopts = append(nopts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	prefix := cfg.InboxPrefix
	if prefix == "" && cfg.User != "" {
		prefix = InboxPrefix(cfg.User)
	}
	if prefix != "" {
		nopts = append(nopts, nats.CustomInboxPrefix(prefix))
	}
	return nopts, nil
}
