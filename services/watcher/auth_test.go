package watcher

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func newTestSigner(t *testing.T) (ed25519.PrivateKey, ssh.Signer) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return priv, s
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSSHAuthChecksHostKeysAgainstKnownHosts(t *testing.T) {
	clientKey, _ := newTestSigner(t)
	block, err := ssh.MarshalPrivateKey(clientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := writeTemp(t, "id", pem.EncodeToMemory(block))
	_, host := newTestSigner(t)
	_, impostor := newTestSigner(t)
	line := knownhosts.Line([]string{knownhosts.Normalize("git.example.com:2222")}, host.PublicKey())
	known := writeTemp(t, "known_hosts", []byte(line+"\n"))

	loc, err := parseLocation("ssh://git.example.com:2222/ops/infra.git")
	if err != nil {
		t.Fatal(err)
	}
	auth, err := newSSHAuth(Config{SSHKeyFile: keyFile, KnownHostsFile: known}, loc, nil)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := auth.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cc.User != "git" {
		t.Errorf("user = %q, want git by default", cc.User)
	}
	if !slices.Contains(cc.HostKeyAlgorithms, ssh.KeyAlgoED25519) {
		t.Errorf("host key algorithms %v do not offer the known key's type", cc.HostKeyAlgorithms)
	}
	if cc.Timeout == 0 {
		t.Error("no dial timeout")
	}
	addr := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 2222}
	if err := cc.HostKeyCallback("git.example.com:2222", addr, host.PublicKey()); err != nil {
		t.Errorf("the known host key is refused: %v", err)
	}
	if err := cc.HostKeyCallback("git.example.com:2222", addr, impostor.PublicKey()); err == nil {
		t.Error("another key for a known host is accepted")
	}
	if err := cc.HostKeyCallback("other.example.com:22", addr, host.PublicKey()); err == nil {
		t.Error("a host absent from known_hosts is accepted")
	}

	loc.user = "deploy"
	auth, err = newSSHAuth(Config{SSHKeyFile: keyFile, KnownHostsFile: known}, loc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cc, _ := auth.ClientConfig(); cc.User != "deploy" {
		t.Errorf("user = %q, want the url's", cc.User)
	}
}

func TestSSHAuthRefusesMissingKnownHostsAndUndecryptableKeys(t *testing.T) {
	clientKey, _ := newTestSigner(t)
	plain, err := ssh.MarshalPrivateKey(clientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	encrypted, err := ssh.MarshalPrivateKeyWithPassphrase(clientKey, "", []byte("right"))
	if err != nil {
		t.Fatal(err)
	}
	plainFile := writeTemp(t, "plain", pem.EncodeToMemory(plain))
	encFile := writeTemp(t, "enc", pem.EncodeToMemory(encrypted))
	_, host := newTestSigner(t)
	known := writeTemp(t, "known_hosts", []byte(knownhosts.Line([]string{"git.example.com"}, host.PublicKey())+"\n"))
	loc, _ := parseLocation("git@git.example.com:ops/infra.git")

	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing known_hosts file", Config{SSHKeyFile: plainFile, KnownHostsFile: filepath.Join(t.TempDir(), "absent")}, "known-hosts"},
		{"encrypted key without passphrase", Config{SSHKeyFile: encFile, KnownHostsFile: known}, "no passphrase"},
		{"encrypted key with a wrong passphrase", Config{SSHKeyFile: encFile, SSHKeyPassphrase: "wrong", KnownHostsFile: known}, "cannot decrypt"},
		{"missing key", Config{SSHKeyFile: filepath.Join(t.TempDir(), "absent"), KnownHostsFile: known}, "ssh-key"},
		{"not a key", Config{SSHKeyFile: known, KnownHostsFile: known}, "ssh-key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newSSHAuth(tc.cfg, loc, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "wrong") {
				t.Errorf("error %q repeats the passphrase", err)
			}
		})
	}
	if _, err := newSSHAuth(Config{SSHKeyFile: encFile, SSHKeyPassphrase: "right", KnownHostsFile: known}, loc, nil); err != nil {
		t.Errorf("encrypted key with its passphrase: %v", err)
	}
}

func TestSSHKnownHostsDefaultsToTheEnvironment(t *testing.T) {
	clientKey, _ := newTestSigner(t)
	plain, _ := ssh.MarshalPrivateKey(clientKey, "")
	keyFile := writeTemp(t, "id", pem.EncodeToMemory(plain))
	loc, _ := parseLocation("git@git.example.com:ops/infra.git")

	t.Setenv("HOME", t.TempDir())
	t.Setenv("SSH_KNOWN_HOSTS", filepath.Join(t.TempDir(), "absent"))
	if _, err := newSSHAuth(Config{SSHKeyFile: keyFile}, loc, nil); err == nil {
		t.Error("accepted without any known_hosts file: host keys would go unchecked")
	}
	_, host := newTestSigner(t)
	t.Setenv("SSH_KNOWN_HOSTS", writeTemp(t, "kh", []byte(knownhosts.Line([]string{"git.example.com"}, host.PublicKey())+"\n")))
	auth, err := newSSHAuth(Config{SSHKeyFile: keyFile}, loc, nil)
	if err != nil {
		t.Fatal(err)
	}
	cc, _ := auth.ClientConfig()
	if err := cc.HostKeyCallback("git.example.com:22", &net.TCPAddr{}, host.PublicKey()); err != nil {
		t.Errorf("the key from $SSH_KNOWN_HOSTS is refused: %v", err)
	}
}
