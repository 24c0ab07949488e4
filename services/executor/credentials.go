package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/proxops/proxops/internal/clock"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/wire"
)

// Credentials are the PVE credentials and the secret resolver an executor uses at one moment. Exactly one
// of an API token (TokenID, TokenSecret) and a user with a password is set.
type Credentials struct {
	TokenID     string
	TokenSecret string
	User        string
	Password    string
	// Secrets resolves the secret references operations carry (nil: operations with references fail).
	Secrets pve.SecretResolver
}

// String never shows a secret.
func (c Credentials) String() string {
	if c.TokenID != "" {
		return "api token " + c.TokenID
	}
	return "user " + c.User
}

// GoString implements fmt.GoStringer (the %#v verb): the token secret and password are redacted.
func (c Credentials) GoString() string {
	return fmt.Sprintf("executor.Credentials{TokenID:%q, TokenSecret:%q, User:%q, Password:%q, Secrets:%T}",
		c.TokenID, redactedIfSet(c.TokenSecret), c.User, redactedIfSet(c.Password), c.Secrets)
}

// Format implements fmt.Formatter: %#v prints GoString, every other verb String, so no form prints a secret.
func (c Credentials) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = io.WriteString(f, c.GoString())
		return
	}
	_, _ = io.WriteString(f, c.String())
}

// LogValue implements slog.LogValuer: the principal only.
func (c Credentials) LogValue() slog.Value {
	if c.TokenID != "" {
		return slog.GroupValue(slog.String("token_id", c.TokenID), slog.String("token_secret", redactedIfSet(c.TokenSecret)))
	}
	return slog.GroupValue(slog.String("user", c.User), slog.String("password", redactedIfSet(c.Password)))
}

func redactedIfSet(s string) string {
	if s == "" {
		return ""
	}
	return "<redacted>"
}

func (c Credentials) sameAuth(o Credentials) bool {
	return c.TokenID == o.TokenID && c.TokenSecret == o.TokenSecret && c.User == o.User && c.Password == o.Password
}

// CredentialSource gives an executor its credentials afresh. An in-process executor whose credentials come
// from the repository's secrets file uses one, so a rotated token that is committed is used by the next
// observe and operation without a restart.
type CredentialSource interface {
	// Current returns the credentials to use now. Its errors never carry a secret.
	Current(ctx context.Context) (Credentials, error)
}

// fixedCredentials is the source of a static configuration's credentials: an executor that could not
// connect at start uses it to try again on every observe and operation, so each one reports PVE's answer.
type fixedCredentials Credentials

func (f fixedCredentials) Current(context.Context) (Credentials, error) { return Credentials(f), nil }

// pveClients holds the executor's PVE client, and replaces it when the credential source hands out other
// credentials. The endpoint (base URL, CA, TLS settings) never changes.
type pveClients struct {
	cfg    pve.Config
	source CredentialSource
	log    *slog.Logger

	mu      sync.Mutex
	client  *pve.Client
	creds   Credentials
	secrets pve.SecretResolver
}

// credentialsOf are the credentials of a static configuration.
func credentialsOf(c pve.Config, secrets pve.SecretResolver) Credentials {
	return Credentials{TokenID: c.TokenID, TokenSecret: c.TokenSecret, User: c.User, Password: c.Password, Secrets: secrets}
}

// Apply returns cfg (an endpoint) with these credentials.
func (c Credentials) Apply(cfg pve.Config) pve.Config {
	cfg.TokenID, cfg.TokenSecret, cfg.User, cfg.Password = c.TokenID, c.TokenSecret, c.User, c.Password
	return cfg
}

// current returns the client and secret resolver to use now, connecting again when the credentials changed.
func (p *pveClients) current(ctx context.Context) (*pve.Client, pve.SecretResolver, error) {
	if p.source == nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.client, p.secrets, nil
	}
	creds, err := p.source.Current(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("pve credentials: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil && creds.sameAuth(p.creds) {
		p.secrets = creds.Secrets
		return p.client, p.secrets, nil
	}
	client, err := pve.New(ctx, creds.Apply(p.cfg), p.log)
	if err != nil {
		return nil, nil, err
	}
	if p.client != nil {
		p.log.Info("pve credentials changed; connected with the new ones", "principal", client.Principal())
	}
	p.client, p.creds, p.secrets = client, creds, creds.Secrets
	return client, p.secrets, nil
}

// connect makes the first client: with the source's credentials when there is a source, else with the
// static configuration's.
func (p *pveClients) connect(ctx context.Context, secrets pve.SecretResolver) (*pve.Client, error) {
	if p.source != nil {
		c, _, err := p.current(ctx)
		return c, err
	}
	client, err := pve.New(ctx, p.cfg, p.log)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.client, p.creds, p.secrets = client, credentialsOf(p.cfg, secrets), secrets
	p.mu.Unlock()
	return client, nil
}

// watchCredentials asks the credential source every CredentialsCheck whether the credentials changed. On a
// change it observes the node with them and publishes the inventory, so the planners learn that a node
// which refused (rejected credentials) reads PVE again and plan a cluster rejected for it. Credentials PVE
// still refuses, and a source that cannot be read, are logged once per change.
func (e *executor) watchCredentials(ctx context.Context) {
	src := e.cfg.Credentials
	last, err := src.Current(ctx)
	lastErr := ""
	if err != nil {
		lastErr = err.Error()
	}
	clock.Every(ctx, e.cfg.CredentialsCheck, func() {
		creds, err := src.Current(ctx)
		if err != nil {
			if msg := err.Error(); msg != lastErr && ctx.Err() == nil {
				e.log.Warn("pve credentials cannot be read", "err", err)
				lastErr = msg
			}
			return
		}
		lastErr = ""
		if creds.sameAuth(last) {
			return
		}
		last = creds
		e.log.Info("pve credentials changed; observing the node with them", "credentials", creds)
		if err := e.observeSelf(ctx); err != nil {
			if ctx.Err() == nil {
				e.log.Warn("the node cannot be read with the new pve credentials", "credentials", creds, "err", err)
			}
			return
		}
		e.log.Info("the node reads with the new pve credentials; inventory published")
	})
}

// observeSelf observes the node with the current credentials, unasked, and publishes the inventory.
func (e *executor) observeSelf(ctx context.Context) error {
	if msg := e.refusal(e.cfg.Cluster, e.cfg.Node, ""); msg != "" {
		return errors.New(msg)
	}
	client, _, err := e.pve.current(ctx)
	if err != nil {
		return err
	}
	n, err := client.Observe(ctx, pve.ObserveRequest{Cluster: e.cfg.Cluster, Node: e.cfg.Node})
	if err != nil {
		return err
	}
	n.Cluster, n.Node = e.cfg.Cluster, e.cfg.Node
	now := time.Now().UTC()
	msg, err := wire.NodeInventoryToProto(wire.NodeInventory{Node: n, ObservedAt: now,
		RequestID: fmt.Sprintf("credentials-%s-%d", e.cfg.Replica, now.UnixNano())})
	if err != nil {
		return err
	}
	e.metrics.pveRead(now)
	return e.publishInventory(ctx, msg)
}
