package pvesim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"time"

	"github.com/proxops/proxops/internal/httpserver"
)

// Serve runs the simulator on a listener until ctx ends, then shuts down cleanly. With useTLS it serves
// HTTPS with a freshly generated self-signed certificate (HTTP/1.1 only, so error reason phrases survive).
// ready, if not nil, gets the base URL (https://host:port/api2/json) once the listener accepts.
func (s *Sim) Serve(ctx context.Context, l net.Listener, useTLS bool, ready func(baseURL string)) error {
	srv := httpserver.New(s, httpserver.Limits{})
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	scheme := "http"
	if useTLS {
		cert, err := selfSignedCert(l.Addr())
		if err != nil {
			return err
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
		l = tls.NewListener(l, srv.TLSConfig)
		scheme = "https"
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	if ready != nil {
		ready(fmt.Sprintf("%s://%s%s", scheme, l.Addr().String(), apiPrefix))
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shut down simulator: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	s.WaitTasks()
	return nil
}

func selfSignedCert(addr net.Addr) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "proxops-sim", Organization: []string{"ProxOps simulator"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP != nil && !ta.IP.IsUnspecified() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ta.IP)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("create certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
