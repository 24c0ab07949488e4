package bus_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
)

// connSetup is a server that admits clients one way, a client configuration it admits, and client
// configurations it must refuse.
type connSetup struct {
	opts  *server.Options
	url   func(addr string) string
	good  bus.ConnectConfig
	wrong map[string]bus.ConnectConfig
	// refusal reports whether err is the refusal expected of a wrong credential.
	refusal func(err error) bool
}

// TestConnectAuthenticatesWithCredentialsFileNKeySeedAndClientCertificate connects through bus.Connect with
// each way of authenticating that a deployment may use, proves the connection carries a request and its
// reply, and proves that the same server refuses a credential it does not trust.
func TestConnectAuthenticatesWithCredentialsFileNKeySeedAndClientCertificate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string) connSetup
	}{
		{"credentials file", credsSetup},
		{"nkey seed file", nkeySetup},
		{"client certificate", clientCertSetup},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := c.setup(t, t.TempDir())
			addr := runConnServer(t, s.opts)
			ctx := testContext(t)

			good := s.good
			good.URL = s.url(addr)
			good.Name = "proxops-test"
			b, err := bus.Connect(ctx, good, bus.Options{})
			if err != nil {
				t.Fatalf("connect with the trusted credential: %v", err)
			}
			t.Cleanup(func() { _ = b.Close() })
			assertRequestRoundTrips(t, b)

			for _, name := range slices.Sorted(maps.Keys(s.wrong)) {
				cfg := s.wrong[name]
				cfg.URL = s.url(addr)
				cfg.ConnectTimeout = 10 * time.Second
				start := time.Now()
				wb, err := bus.Connect(ctx, cfg, bus.Options{})
				if err == nil {
					_ = wb.Close()
					t.Errorf("%s: connected, want the server to refuse it", name)
					continue
				}
				t.Logf("%s: refused: %v", name, err)
				if !s.refusal(err) {
					t.Errorf("%s: %v, want a refusal", name, err)
				}
				// A refusal ends the attempt; it does not wait out the connect timeout.
				if waited := time.Since(start); waited >= cfg.ConnectTimeout {
					t.Errorf("%s: refused only after %s (the connect timeout)", name, waited)
				}
			}
		})
	}
}

// runConnServer starts a NATS server on a random loopback port with opts and returns its address.
func runConnServer(t *testing.T, opts *server.Options) string {
	t.Helper()
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready for connections")
	}
	return srv.Addr().String()
}

// assertRequestRoundTrips serves a subject on b and requests it through b, so the authenticated connection
// both subscribes and publishes.
func assertRequestRoundTrips(t *testing.T, b *bus.Bus) {
	t.Helper()
	ctx := testContext(t)
	subject, err := bus.ObserveSubject("lab", "pve1")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := b.Serve(ctx, subject, bus.QueueExecutors, bus.ServeOptions{}, func(ctx context.Context, r *bus.Request) (proto.Message, error) {
		var req wrapperspb.StringValue
		if err := r.Decode(ctx, &req); err != nil {
			return nil, err
		}
		return wrapperspb.String("seen " + req.GetValue()), nil
	})
	if err != nil {
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(svc.Stop)
	var resp wrapperspb.StringValue
	if err := b.Request(ctx, subject, wrapperspb.String("pve1"), &resp); err != nil {
		t.Fatalf("request: %v", err)
	}
	if resp.GetValue() != "seen pve1" {
		t.Fatalf("reply %q, want %q", resp.GetValue(), "seen pve1")
	}
}

func isAuthorizationViolation(err error) bool { return errors.Is(err, nats.ErrAuthorization) }

func natsURL(addr string) string { return "nats://" + addr }

// credsSetup runs the server in operator mode: it trusts one operator, which signed one account, which
// signed the user whose credentials file is the good credential.
func credsSetup(t *testing.T, dir string) connSetup {
	t.Helper()
	operator := newKeyPair(t, nkeys.CreateOperator)
	account := newKeyPair(t, nkeys.CreateAccount)
	operatorPub := publicKey(t, operator)
	accountPub := publicKey(t, account)

	oc := jwt.NewOperatorClaims(operatorPub)
	oc.Name = "proxops-test-operator"
	operatorJWT, err := oc.Encode(operator)
	if err != nil {
		t.Fatal(err)
	}
	oc, err = jwt.DecodeOperatorClaims(operatorJWT)
	if err != nil {
		t.Fatal(err)
	}
	ac := jwt.NewAccountClaims(accountPub)
	ac.Name = "proxops"
	accountJWT, err := ac.Encode(operator)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	if err := resolver.Store(accountPub, accountJWT); err != nil {
		t.Fatal(err)
	}

	good := newKeyPair(t, nkeys.CreateUser)
	goodJWT := userJWT(t, good, account)
	// An account the operator never signed, with a user of its own.
	stranger := newKeyPair(t, nkeys.CreateAccount)
	strangerUser := newKeyPair(t, nkeys.CreateUser)
	// A user's JWT with another user's seed: the nonce signature does not match the JWT's subject.
	other := newKeyPair(t, nkeys.CreateUser)

	return connSetup{
		opts: &server.Options{TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: resolver},
		url:  natsURL,
		good: bus.ConnectConfig{CredsFile: writeCreds(t, dir, "good.creds", goodJWT, good)},
		wrong: map[string]bus.ConnectConfig{
			"user of an untrusted account": {CredsFile: writeCreds(t, dir, "stranger.creds", userJWT(t, strangerUser, stranger), strangerUser)},
			"seed not matching the jwt":    {CredsFile: writeCreds(t, dir, "mismatch.creds", goodJWT, other)},
		},
		refusal: isAuthorizationViolation,
	}
}

// nkeySetup runs a server with one nkey user; the good credential is that user's seed file.
func nkeySetup(t *testing.T, dir string) connSetup {
	t.Helper()
	user := newKeyPair(t, nkeys.CreateUser)
	other := newKeyPair(t, nkeys.CreateUser)
	return connSetup{
		opts: &server.Options{Nkeys: []*server.NkeyUser{{Nkey: publicKey(t, user)}}},
		url:  natsURL,
		good: bus.ConnectConfig{NKeySeedFile: writeSeed(t, dir, "user.nk", user)},
		wrong: map[string]bus.ConnectConfig{
			"seed of an unknown user": {NKeySeedFile: writeSeed(t, dir, "other.nk", other)},
		},
		refusal: isAuthorizationViolation,
	}
}

// clientCertSetup runs a TLS server that requires a client certificate and verifies it against its CA
// (`verify: true`, read from a configuration file as a deployment does); the good credential is a client
// certificate that CA signed.
func clientCertSetup(t *testing.T, dir string) connSetup {
	t.Helper()
	trusted := filepath.Join(dir, "trusted")
	rogue := filepath.Join(dir, "rogue")
	for _, d := range []string{trusted, rogue} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeTLS(t, trusted, "localhost", "client")
	// Same client name, but signed by a CA the server does not trust.
	writeTLS(t, rogue, "client")
	conf := filepath.Join(dir, "nats.conf")
	content := fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: true\n  timeout: 5\n}\n",
		filepath.Join(trusted, "localhost.pem"), filepath.Join(trusted, "localhost-key.pem"), filepath.Join(trusted, "ca.pem"))
	if err := os.WriteFile(conf, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("%s: %v", conf, err)
	}
	if opts.TLSConfig == nil || opts.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("%s: the server does not require and verify client certificates", conf)
	}
	ca := filepath.Join(trusted, "ca.pem")
	return connSetup{
		opts: opts,
		url:  func(addr string) string { return "tls://" + addr },
		good: bus.ConnectConfig{TLSCA: ca, TLSCert: filepath.Join(trusted, "client.pem"), TLSKey: filepath.Join(trusted, "client-key.pem")},
		wrong: map[string]bus.ConnectConfig{
			"no client certificate":                 {TLSCA: ca},
			"certificate of an untrusted ca":        {TLSCA: ca, TLSCert: filepath.Join(rogue, "client.pem"), TLSKey: filepath.Join(rogue, "client-key.pem")},
			"trusted certificate, untrusted server": {TLSCA: filepath.Join(rogue, "ca.pem"), TLSCert: filepath.Join(trusted, "client.pem"), TLSKey: filepath.Join(trusted, "client-key.pem")},
		},
		// The refusal happens in the TLS handshake, not in NATS' authorization: either the client's own
		// verification fails or the server's alert arrives (as an alert, or as the connection closing
		// right after the handshake, depending on timing).
		refusal: func(err error) bool {
			return errors.Is(err, nats.ErrTLS) || strings.Contains(err.Error(), "remote error: tls:")
		},
	}
}

func newKeyPair(t *testing.T, create func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func publicKey(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// userJWT is a JWT for user, signed by account.
func userJWT(t *testing.T, user, account nkeys.KeyPair) string {
	t.Helper()
	uc := jwt.NewUserClaims(publicKey(t, user))
	uc.Name = "proxops-test-user"
	token, err := uc.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// writeCreds writes a credentials file holding token and seed's seed. It is written by hand, not with
// jwt.FormatUserConfig, so that a seed which does not match the token can be written too.
func writeCreds(t *testing.T, dir, name, token string, seed nkeys.KeyPair) string {
	t.Helper()
	s, err := seed.Seed()
	if err != nil {
		t.Fatal(err)
	}
	content := "-----BEGIN NATS USER JWT-----\n" + token + "\n------END NATS USER JWT------\n\n" +
		"-----BEGIN USER NKEY SEED-----\n" + string(s) + "\n------END USER NKEY SEED------\n"
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeSeed writes kp's seed alone, as an nkey seed file.
func writeSeed(t *testing.T, dir, name string, kp nkeys.KeyPair) string {
	t.Helper()
	s, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, append(s, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
