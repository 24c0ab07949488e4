package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/proxops/proxops/internal/defaults"
)

// ClientInfoFile is the file, in an embedded server's data directory, that tells local clients (the proxops
// command, the nats CLI) where the server listens and with which credentials. It is written with mode 0600.
const ClientInfoFile = "nats.json"

// adminUser is the embedded server's own full-access user, used by the in-process connection and written to
// ClientInfoFile when the server listens.
const adminUser = "proxops"

// ServerConfig configures an embedded NATS server with JetStream.
type ServerConfig struct {
	// Dir is the JetStream store directory. Empty means a temporary directory removed at Shutdown.
	Dir string
	// SyncAlways fsyncs every write before acknowledging it (single-host mode); otherwise the server
	// fsyncs every two minutes and a power loss can lose acknowledged messages.
	SyncAlways bool
	// Listen opens a client listener on 127.0.0.1 (never another address) with generated credentials,
	// written to Dir/nats.json. Without it the server has no listener and is reached in-process only.
	Listen bool
	// Port of the listener; 0 picks a free port.
	Port int
	// Users are additional users with subject permissions (a single host that mirrors a deployment's
	// per-service users). Setting any enables authentication for every connection.
	Users []User
	// MaxPayload overrides the server's payload limit (default 1 MiB).
	MaxPayload int32
	// Name is the server name (default "proxops").
	Name string
	// Logger receives the server's log (default: discarded).
	Logger *slog.Logger
	// ReadyTimeout bounds the start (default 10 s).
	ReadyTimeout time.Duration
}

// User is a NATS user with the permissions of one service.
type User struct {
	Name        string
	Password    string
	Permissions Permissions
}

// ClientInfo tells a local client how to reach an embedded server.
type ClientInfo struct {
	URL      string `json:"url"`
	User     string `json:"user"`
	Password string `json:"password"`
}

// Server is an embedded NATS server with JetStream.
type Server struct {
	srv      *server.Server
	cfg      ServerConfig
	password string
	auth     bool
	tempDir  string
}

// StartServer starts an embedded server and waits until it accepts connections.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Name == "" {
		cfg.Name = "proxops"
	}
	defaults.Positive(&cfg.ReadyTimeout, 10*time.Second)
	defaults.Logger(&cfg.Logger)
	s := &Server{cfg: cfg}
	dir := cfg.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "proxops-nats-")
		if err != nil {
			return nil, fmt.Errorf("start nats server: %w", err)
		}
		s.tempDir, dir = tmp, tmp
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("start nats server: data directory: %w", err)
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		JetStream:  true,
		StoreDir:   filepath.Join(dir, "jetstream"),
		SyncAlways: cfg.SyncAlways,
		MaxPayload: cfg.MaxPayload,
		NoSigs:     true,
		DontListen: !cfg.Listen,
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		HTTPPort:   0,
	}
	if cfg.Listen && cfg.Port > 0 {
		opts.Port = cfg.Port
	}
	if cfg.Listen || len(cfg.Users) > 0 {
		pw, err := randomSecret()
		if err != nil {
			s.cleanup()
			return nil, fmt.Errorf("start nats server: %w", err)
		}
		s.password, s.auth = pw, true
		opts.Users = append(opts.Users, &server.User{Username: adminUser, Password: pw})
		for _, u := range cfg.Users {
			if u.Name == "" || u.Name == adminUser {
				s.cleanup()
				return nil, fmt.Errorf("start nats server: user name %q is reserved or empty", u.Name)
			}
			opts.Users = append(opts.Users, &server.User{Username: u.Name, Password: u.Password, Permissions: u.Permissions.server()})
		}
	}
	if err := s.start(ctx, opts); err != nil {
		s.cleanup()
		return nil, err
	}
	if cfg.Listen && cfg.Dir != "" {
		if err := s.writeClientInfo(); err != nil {
			s.Shutdown()
			return nil, err
		}
	}
	return s, nil
}

func (s *Server) start(ctx context.Context, opts *server.Options) error {
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("start nats server: %w", err)
	}
	srv.SetLoggerV2(slogAdapter{s.cfg.Logger}, false, false, false)
	srv.Start()
	deadline := s.cfg.ReadyTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < deadline {
		deadline = time.Until(d)
	}
	if !srv.ReadyForConnections(deadline) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("start nats server: not ready within %s", deadline)
	}
	s.srv = srv
	return nil
}

// ClientURL is the listener's URL, or "" without a listener.
func (s *Server) ClientURL() string {
	if !s.cfg.Listen {
		return ""
	}
	return s.srv.ClientURL()
}

// ClientInfo returns the admin credentials and URL local clients use.
func (s *Server) ClientInfo() ClientInfo {
	return ClientInfo{URL: s.ClientURL(), User: adminUser, Password: s.password}
}

// Connect opens an in-process connection with full access.
func (s *Server) Connect(opts Options) (*Bus, error) {
	if s.auth {
		return s.ConnectUser(adminUser, s.password, opts)
	}
	return s.connect("", "", opts)
}

// ConnectUser opens an in-process connection as one of the configured users, with that user's inbox prefix.
func (s *Server) ConnectUser(user, password string, opts Options) (*Bus, error) {
	return s.connect(user, password, opts)
}

func (s *Server) connect(user, password string, opts Options) (*Bus, error) {
	nopts := []nats.Option{
		nats.InProcessServer(s.srv),
		nats.Name("proxops-inprocess"),
		nats.MaxReconnects(-1),
	}
	if user != "" {
		nopts = append(nopts, nats.UserInfo(user, password), nats.CustomInboxPrefix(InboxPrefix(user)))
	}
	if opts.Logger != nil {
		nopts = append(nopts, errorHandler(opts.Logger))
	}
	nc, err := nats.Connect("", nopts...)
	if err != nil {
		return nil, fmt.Errorf("connect in-process: %w", err)
	}
	b, err := newBus(nc, opts, true)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return b, nil
}

// Shutdown stops the server and waits until it has flushed and closed its store.
func (s *Server) Shutdown() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	s.cleanup()
}

func (s *Server) cleanup() {
	if s.tempDir != "" {
		_ = os.RemoveAll(s.tempDir)
		s.tempDir = ""
	}
}

func (s *Server) writeClientInfo() error {
	data, err := json.MarshalIndent(s.ClientInfo(), "", "  ")
	if err != nil {
		return fmt.Errorf("write client info: %w", err)
	}
	path := filepath.Join(s.cfg.Dir, ClientInfoFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write client info: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write client info: %w", err)
	}
	return nil
}

// ReadClientInfo reads the ClientInfoFile an embedded server wrote into its data directory.
func ReadClientInfo(dir string) (ClientInfo, error) {
	data, err := os.ReadFile(filepath.Join(dir, ClientInfoFile))
	if err != nil {
		return ClientInfo{}, fmt.Errorf("read client info: %w", err)
	}
	var ci ClientInfo
	if err := json.Unmarshal(data, &ci); err != nil {
		return ClientInfo{}, fmt.Errorf("read client info %s: %w", filepath.Join(dir, ClientInfoFile), err)
	}
	if ci.URL == "" {
		return ClientInfo{}, fmt.Errorf("read client info %s: no url", filepath.Join(dir, ClientInfoFile))
	}
	return ci, nil
}

func randomSecret() (string, error) {
	var buf [24]byte
	if _, err := rand.Read(buf[:]); err != nil {
		return "", fmt.Errorf("generate secret: %w", err)
	}
	return hex.EncodeToString(buf[:]), nil
}

// slogAdapter routes the server's log into slog.
type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Noticef(format string, v ...any) { a.log.Info(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Warnf(format string, v ...any)   { a.log.Warn(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Fatalf(format string, v ...any)  { a.log.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Errorf(format string, v ...any)  { a.log.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Debugf(format string, v ...any)  { a.log.Debug(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Tracef(format string, v ...any)  { a.log.Debug(fmt.Sprintf(format, v...)) }

func errorHandler(log *slog.Logger) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		subject := ""
		if sub != nil {
			subject = sub.Subject
		}
		log.Warn("nats async error", "subject", subject, "err", err)
	})
}
