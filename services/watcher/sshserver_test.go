package watcher_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// sshGitServer serves the bare repositories under root to git clients over ssh, running git upload-pack for
// each exec request, like a git host's ssh daemon. It accepts one client key.
type sshGitServer struct {
	addr     string
	hostKey  ssh.Signer
	sessions atomic.Int64
}

func newSSHGitServer(t testing.TB, root string, client ssh.PublicKey) *sshGitServer {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if bytes.Equal(key.Marshal(), client.Marshal()) {
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("unknown key")
		},
	}
	cfg.AddHostKey(hostKey)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sshGitServer{addr: ln.Addr().String(), hostKey: hostKey}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { s.serveConn(conn, cfg, root) })
		}
	})
	return s
}

func (s *sshGitServer) serveConn(conn net.Conn, cfg *ssh.ServerConfig, root string) {
	defer conn.Close()
	sconn, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		return
	}
	defer func() { _ = sconn.Close() }()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "sessions only")
			continue
		}
		ch, requests, err := nc.Accept()
		if err != nil {
			return
		}
		s.sessions.Add(1)
		go s.serveSession(ch, requests, root)
	}
}

func (s *sshGitServer) serveSession(ch ssh.Channel, requests <-chan *ssh.Request, root string) {
	defer func() { _ = ch.Close() }()
	for req := range requests {
		if req.Type != "exec" {
			_ = req.Reply(req.Type == "env", nil)
			continue
		}
		if len(req.Payload) < 4 {
			_ = req.Reply(false, nil)
			return
		}
		command := string(req.Payload[4:])
		repo, ok := strings.CutPrefix(command, "git-upload-pack ")
		repo = strings.Trim(repo, "'")
		dir := filepath.Join(root, filepath.FromSlash(path.Clean("/"+repo)))
		if _, err := os.Stat(dir); !ok || err != nil {
			_ = req.Reply(false, nil)
			return
		}
		_ = req.Reply(true, nil)
		cmd := exec.Command("git", "upload-pack", dir)
		cmd.Env = gitEnv(root)
		cmd.Stdout = ch
		cmd.Stderr = ch.Stderr()
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return
		}
		go func() {
			_, _ = io.Copy(stdin, ch)
			_ = stdin.Close()
		}()
		code := uint32(0)
		if err := cmd.Run(); err != nil {
			code = 1
		}
		status := make([]byte, 4)
		binary.BigEndian.PutUint32(status, code)
		_, _ = ch.SendRequest("exit-status", false, status)
		return
	}
}

// knownHostsLine is the known_hosts entry of the server.
func (s *sshGitServer) knownHostsLine() string {
	return knownhosts.Line([]string{knownhosts.Normalize(s.addr)}, s.hostKey.PublicKey())
}

// newClientKey writes a new ed25519 private key (encrypted when passphrase is set) and returns its path and
// public key.
func newClientKey(t testing.TB, passphrase string) (string, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var block *pem.Block
	if passphrase == "" {
		block, err = ssh.MarshalPrivateKey(priv, "watcher test")
	} else {
		block, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "watcher test", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(p, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return p, sshPub
}

// writeFile writes content to a new file of a temporary directory.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
