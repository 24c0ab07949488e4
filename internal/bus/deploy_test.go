package bus_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
)

// writeTLS writes ca.pem and, for each host, <host>.pem and <host>-key.pem signed by it (valid for the host
// and 127.0.0.1).
func writeTLS(t *testing.T, dir string, hosts ...string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "proxops test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", "CERTIFICATE", caDER)
	for i, host := range hosts {
		writeCert(t, write, caCert, caKey, host, int64(i+2))
	}
}

func writeCert(t *testing.T, write func(name, typ string, b []byte), ca *x509.Certificate, caKey *ecdsa.PrivateKey, host string, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{host},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write(host+".pem", "CERTIFICATE", der)
	write(host+"-key.pem", "EC PRIVATE KEY", keyDER)
}

// TestDeployConfigServesTLSClientsWithServiceUsers renders the deployment for real TLS files, parses every
// server's configuration with nats-server, and runs the first one (on loopback, routes removed) to connect
// over TLS with a service user.
func TestDeployConfigServesTLSClientsWithServiceUsers(t *testing.T) {
	dir := t.TempDir()
	cfg := bus.ExampleDeploy()
	cfg.TLSDir = filepath.Join(dir, "tls")
	cfg.StoreDir = filepath.Join(dir, "store")
	if err := os.MkdirAll(cfg.TLSDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeTLS(t, cfg.TLSDir, cfg.Servers...)
	files, err := bus.DeployFiles(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	users, err := bus.ServiceUsers(cfg.Topology)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		t.Setenv(bus.PasswordVariable(u.Name), "pw-"+u.Name)
	}
	var opts *server.Options
	for i := range cfg.Servers {
		o, err := server.ProcessConfigFile(filepath.Join(dir, fmt.Sprintf("nats-%d.conf", i+1)))
		if err != nil {
			t.Fatalf("nats-%d.conf: %v", i+1, err)
		}
		if !o.JetStream || o.TLSConfig == nil || o.Cluster.TLSConfig == nil || len(o.Routes) != len(cfg.Servers)-1 || len(o.Users) != len(users) {
			t.Fatalf("nats-%d.conf: jetstream=%v tls=%v cluster-tls=%v routes=%d users=%d", i+1, o.JetStream,
				o.TLSConfig != nil, o.Cluster.TLSConfig != nil, len(o.Routes), len(o.Users))
		}
		if i == 0 {
			opts = o
		}
	}
	// Run server 1 alone on loopback: no routes, no cluster listener, no monitoring port.
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.Routes, opts.Cluster = nil, server.ClusterOpts{}
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	ctx := testContext(t)
	url := "tls://" + srv.Addr().String()
	connect := func(user string) *bus.Bus {
		b, err := bus.Connect(ctx, bus.ConnectConfig{URL: url, User: user, Password: "pw-" + user, TLSCA: filepath.Join(cfg.TLSDir, "ca.pem")}, bus.Options{})
		if err != nil {
			t.Fatalf("connect over TLS as %s: %v", user, err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	// The admin user provisions a bare server; the cli user finds it provisioned.
	if _, err := connect("admin").Provision(ctx, bus.ProvisionConfig{}); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	cli := connect("cli")
	if err := cli.CheckProvisioned(ctx); err != nil {
		t.Fatalf("cli checks the provisioning: %v", err)
	}
	if _, err := cli.Publish(ctx, bus.SubjectReconcileRequest, wrapperspb.String("now")); err != nil {
		t.Fatalf("cli publishes a reconcile request: %v", err)
	}
	if _, err := bus.Connect(ctx, bus.ConnectConfig{URL: url, User: "cli", Password: "pw-cli"}, bus.Options{}); err == nil {
		t.Fatal("connected without trusting the server's CA")
	}
	if _, err := bus.Connect(ctx, bus.ConnectConfig{URL: url, User: "cli", Password: "wrong", TLSCA: filepath.Join(cfg.TLSDir, "ca.pem")}, bus.Options{}); err == nil {
		t.Fatal("connected with a wrong password")
	}
}
