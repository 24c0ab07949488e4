package watcher

import (
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
)

// sshDialTimeout bounds the ssh connection and handshake (go-git's ssh dial ignores the context).
const sshDialTimeout = 30 * time.Second

// remoteAccess is how the watcher reaches a remote: the auth method and the TLS options.
type remoteAccess struct {
	// auth builds the auth method for one operation (nil for anonymous https). ssh re-reads the key and the
	// known_hosts file each time, so a rotated key or an added host needs no restart.
	auth     func() (transport.AuthMethod, error)
	caBundle []byte
	insecure bool
}

// buildAccess prepares the auth and TLS options of a remote location. It reads the CA, key and known_hosts
// files once to report a mistake at start.
func buildAccess(cfg Config, loc location) (remoteAccess, error) {
	switch loc.kind {
	case kindHTTP:
		acc := remoteAccess{insecure: cfg.Insecure}
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return remoteAccess{}, fmt.Errorf("ca-file: %w", err)
			}
			if !x509.NewCertPool().AppendCertsFromPEM(pem) {
				return remoteAccess{}, fmt.Errorf("ca-file %s: no PEM certificate in it", cfg.CAFile)
			}
			acc.caBundle = pem
		}
		user, token := cfg.Username, cfg.Token
		if token == "" {
			token = loc.password
			if user == "" {
				user = loc.user
			}
		}
		if token != "" {
			if user == "" {
				user = DefaultUsername
			}
			auth := &githttp.BasicAuth{Username: user, Password: token}
			acc.auth = func() (transport.AuthMethod, error) { return auth, nil }
		} else {
			acc.auth = func() (transport.AuthMethod, error) { return nil, nil }
		}
		return acc, nil
	case kindSSH:
		keys := &signerCache{}
		build := func() (transport.AuthMethod, error) { return newSSHAuth(cfg, loc, keys) }
		if _, err := build(); err != nil {
			return remoteAccess{}, err
		}
		return remoteAccess{auth: build}, nil
	}
	return remoteAccess{}, errors.New("unsupported repository location")
}

// sshKeyAuth authenticates with one private key and checks the server's host key against known_hosts. It
// implements go-git's ssh auth method.
type sshKeyAuth struct {
	user              string
	signer            ssh.Signer
	hostKeyCallback   ssh.HostKeyCallback
	hostKeyAlgorithms []string
}

var _ gitssh.AuthMethod = (*sshKeyAuth)(nil)

func (a *sshKeyAuth) Name() string   { return "ssh-public-key" }
func (a *sshKeyAuth) String() string { return "user: " + a.user + ", name: " + a.Name() }

// ClientConfig returns the ssh client configuration: key auth, strict host key checking, a dial timeout.
func (a *sshKeyAuth) ClientConfig() (*ssh.ClientConfig, error) {
	return &ssh.ClientConfig{
		User:              a.user,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(a.signer)},
		HostKeyCallback:   a.hostKeyCallback,
		HostKeyAlgorithms: a.hostKeyAlgorithms,
		Timeout:           sshDialTimeout,
	}, nil
}

// signerCache keeps the last parsed private key: decrypting a key is slow by design (bcrypt), so it is done
// again only when the key file changes.
type signerCache struct {
	mu     sync.Mutex
	sum    [sha256.Size]byte
	signer ssh.Signer
}

// newSSHAuth reads the key and the known_hosts database for an ssh location; keys may be nil.
func newSSHAuth(cfg Config, loc location, keys *signerCache) (*sshKeyAuth, error) {
	if cfg.SSHKeyFile == "" {
		return nil, errors.New("ssh-key: required for an ssh url")
	}
	pem, err := os.ReadFile(cfg.SSHKeyFile)
	if err != nil {
		return nil, fmt.Errorf("ssh-key: %w", err)
	}
	if keys == nil {
		keys = &signerCache{}
	}
	signer, err := keys.parse(cfg, pem)
	if err != nil {
		return nil, err
	}
	var files []string
	if cfg.KnownHostsFile != "" {
		if _, err := os.Stat(cfg.KnownHostsFile); err != nil {
			return nil, fmt.Errorf("known-hosts: %w", err)
		}
		files = []string{cfg.KnownHostsFile}
	}
	db, err := gitssh.NewKnownHostsDb(files...)
	if err != nil {
		return nil, fmt.Errorf("known-hosts: %w (give a known_hosts file; host keys are always checked)", err)
	}
	user := loc.user
	if user == "" {
		user = "git"
	}
	port := loc.port
	if port == "" {
		port = "22"
	}
	return &sshKeyAuth{
		user:              user,
		signer:            signer,
		hostKeyCallback:   db.HostKeyCallback(),
		hostKeyAlgorithms: db.HostKeyAlgorithms(net.JoinHostPort(loc.host, port)),
	}, nil
}

func (c *signerCache) parse(cfg Config, pem []byte) (ssh.Signer, error) {
	sum := sha256.Sum256(pem)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.signer != nil && sum == c.sum {
		return c.signer, nil
	}
	signer, err := ssh.ParsePrivateKey(pem)
	var missing *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &missing):
		if cfg.SSHKeyPassphrase == "" {
			return nil, fmt.Errorf("ssh-key %s: the key is encrypted and no passphrase is set", cfg.SSHKeyFile)
		}
		signer, err = ssh.ParsePrivateKeyWithPassphrase(pem, []byte(cfg.SSHKeyPassphrase))
		if err != nil {
			return nil, fmt.Errorf("ssh-key %s: cannot decrypt it with the passphrase: %w", cfg.SSHKeyFile, err)
		}
	case err != nil:
		return nil, fmt.Errorf("ssh-key %s: %w", cfg.SSHKeyFile, err)
	}
	c.sum, c.signer = sum, signer
	return signer, nil
}

// redactor removes credentials from text: the configured secrets and the userinfo of any URL.
type redactor struct {
	secrets []string
}

func newRedactor(cfg Config) redactor {
	var r redactor
	for _, s := range []string{cfg.Token, cfg.SSHKeyPassphrase, cfg.WebhookSecret} {
		if s != "" {
			r.secrets = append(r.secrets, s)
		}
	}
	if cfg.URL != "" {
		if loc, err := parseLocation(cfg.URL); err == nil && loc.password != "" {
			r.secrets = append(r.secrets, loc.password)
		}
	}
	return r
}

func (r redactor) string(s string) string {
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, "<redacted>")
	}
	return stripUserinfo(s)
}

// error returns err with a redacted message; errors.Is and errors.As still see the original chain.
func (r redactor) error(err error) error {
	if err == nil {
		return nil
	}
	msg := r.string(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
