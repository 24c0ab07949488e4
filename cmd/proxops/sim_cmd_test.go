package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

var (
	simURLLine   = regexp.MustCompile(`(?m)^PVE simulator listening on (https://127\.0\.0\.1:[0-9]+/api2/json)$`)
	simTokenLine = regexp.MustCompile(`(?m)^API token: ([^=\s]+)=(\S+)$`)
)

// proxops sim on a free loopback port with TLS prints its URL and tokens; the printed token reads the
// version over HTTPS, a request without it is refused, and cancelling the context stops it cleanly.
func TestSimCommandServesTheAPIOverTLSUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errOut := &syncBuffer{}, &syncBuffer{}
	cmd := newRootCommand()
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.SetArgs([]string{"sim", "--listen", "127.0.0.1:0", "--tls"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	var base, tokenID, secret string
	deadline := time.Now().Add(10 * time.Second)
	for {
		text := out.String()
		u, tok := simURLLine.FindStringSubmatch(text), simTokenLine.FindStringSubmatch(text)
		if u != nil && tok != nil {
			base, tokenID, secret = u[1], tok[1], tok[2]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("sim ended before printing its URL and token: %v\nstdout: %s\nstderr: %s", err, text, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no URL and token printed: %q", text)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The certificate is self-signed and generated at start, so it cannot be verified against a CA.
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func(auth string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/version", nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s/version: %v", base, err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	resp := get("PVEAPIToken=" + tokenID + "=" + secret)
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("GET /version with the printed token: %s (TLS %v)", resp.Status, resp.TLS != nil)
	}
	if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != "proxops-sim" {
		t.Fatalf("certificate common name %q", cn)
	}
	var env struct {
		Data struct {
			Version string `json:"version"`
			Release string `json:"release"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatalf("version body: %v", err)
	}
	if env.Data.Version == "" || !strings.HasPrefix(env.Data.Version, env.Data.Release) {
		t.Fatalf("version %+v", env.Data)
	}
	if resp := get(""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /version without credentials: %s, want 401", resp.Status)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("sim after cancel: %v (stderr %s)", err, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sim did not stop after its context was cancelled")
	}
}
