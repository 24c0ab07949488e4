package main

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/pveformat"
)

// The demo's decrypted values (internal/secrets/testdata/demo/secrets.plain.yaml): throwaway test material.
type demoPlaintext struct {
	Secrets   map[string]string `yaml:"secrets"`
	CloudInit struct {
		SSHKeys   map[string]string `yaml:"ssh-keys"`
		Passwords map[string]string `yaml:"passwords"`
	} `yaml:"cloud-init"`
}

func readDemoPlaintext(t *testing.T, name string) demoPlaintext {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "internal", "secrets", "testdata", "demo", name))
	if err != nil {
		t.Fatal(err)
	}
	var p demoPlaintext
	if err := yaml.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// needles are the decrypted values that must never leave the process, each with its encoded forms
// (percent-encoded as a URL would carry it, and as PVE's sshkeys value).
func (p demoPlaintext) needles() map[string]string {
	out := map[string]string{}
	add := func(what, v string) {
		out[what] = v
		out[what+" (query-escaped)"] = url.QueryEscape(v)
		out[what+" (path-escaped)"] = url.PathEscape(v)
		out[what+" (sshkeys-encoded)"] = pveformat.EncodeSSHKeys([]string{v})
	}
	add("token secret", p.Secrets["proxops-token"])
	var keys []string
	for name, k := range p.CloudInit.SSHKeys {
		add("ssh key "+name, k)
		if f := strings.Fields(k); len(f) > 1 {
			add("ssh key blob "+name, f[1])
		}
		keys = append(keys, k)
	}
	out["ssh keys (sshkeys-encoded, joined)"] = pveformat.EncodeSSHKeys(keys)
	for name, pw := range p.CloudInit.Passwords {
		add("password "+name, pw)
	}
	return out
}

// findNeedles reports every needle found in text, naming where.
func findNeedles(t *testing.T, where, text string, needles map[string]string) {
	t.Helper()
	for what, v := range needles {
		if v != "" && strings.Contains(text, v) {
			t.Errorf("%s holds the %s", where, what)
		}
	}
}

// S3: an end-to-end run of the demo, whose PVE token, SSH keys and password come from its SOPS file, leaves
// no decrypted value in the process's log (at debug level), in any message of any stream, KV bucket or
// object store (save the tree snapshots, which hold the encrypted file), in any plan rendering (text and
// JSON), in the status reports, the page or the metrics, nor in the adoption report and the manifests
// adoption writes: the values reached PVE and nothing else.
func TestSecretsAppearNowhereButInPVE(t *testing.T) {
	e := newDemoEnv(t)
	needles := readDemoPlaintext(t, "secrets.plain.yaml").needles()
	u := e.startUpProcess("--log-level", "debug")
	addr := u.addr()
	waitConverged(t, u, addr, "demo", e.head())

	// The values were used: PVE has the keys and the password of web-02.
	cfg, ok := e.sim.Config(102)
	if !ok || !strings.Contains(cfg["sshkeys"], "demo-main") || !strings.Contains(cfg["sshkeys"], "demo-backup") || cfg["cipassword"] == "" {
		t.Fatalf("web-02's cloud-init secrets did not reach PVE: %v", cfg)
	}
	// A change that makes a plan worth rendering, then every rendering.
	if err := e.sim.SetConfig(102, "cores", "4"); err != nil {
		t.Fatal(err)
	}
	renderings := map[string]string{}
	for _, args := range [][]string{{"diff"}, {"diff", "--output", "json"}, {"apply", "-n"}, {"apply", "--diff"}, {"apply", "--output", "json"}} {
		out, errOut, _ := e.run(args...)
		renderings["proxops "+strings.Join(args, " ")] = out + errOut
	}
	for _, args := range [][]string{{"status"}, {"status", "--output", "json"}} {
		out, errOut, _ := runCommand(t, append(args, "--data-dir", e.data)...)
		renderings["proxops "+strings.Join(args, " ")] = out + errOut
	}
	// Adoption through the running up: the report, and the manifests it writes into the work tree.
	for _, args := range [][]string{{"adopt", "--cluster", "demo"}, {"adopt", "--cluster", "demo", "--output", "json"}} {
		out, errOut, code := e.run(args...)
		if code != 0 {
			t.Fatalf("proxops %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
		}
		renderings["proxops "+strings.Join(args, " ")] = out + errOut
	}
	err := filepath.WalkDir(e.repo, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.Name() == ".git" {
			if err == nil {
				err = filepath.SkipDir
			}
			return err
		}
		// sim.yaml is the simulated PVE's own configuration (it holds the token PVE accepts).
		if !d.IsDir() && d.Name() != "sim.yaml" {
			renderings["the work tree's "+p] = string(mustRead(t, p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/status", "/status/demo", "/", "/metrics", "/healthz"} {
		_, body := get(t, "http://"+addr+path)
		renderings["GET "+path] = string(body)
	}
	if code := u.stop(); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, u.errOut)
	}
	renderings["the log of proxops up"] = u.errOut.String() + u.out.String()
	if adopted := renderings["proxops adopt --cluster demo --output json"]; !strings.Contains(adopted, "web-02") {
		t.Fatalf("the adoption report does not cover web-02:\n%s", adopted)
	}
	if !strings.Contains(renderings["proxops diff"], "VM/web-02") {
		t.Fatalf("the diff shows no change:\n%s", renderings["proxops diff"])
	}
	for where, text := range renderings {
		findNeedles(t, where, text, needles)
	}

	// Every message kept on the data directory.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: e.data})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	b, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	js := b.JetStream()
	names := js.StreamNames(ctx)
	streams, messages := 0, 0
	for name := range names.Name() {
		if name == "OBJ_"+bus.ObjectTrees {
			continue
		}
		streams++
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				continue // deleted (a work queue's acknowledged operations, a bucket's old revisions)
			}
			messages++
			text := m.Subject + "\n" + string(m.Data)
			for k, vs := range m.Header {
				text += "\n" + k + ": " + strings.Join(vs, ",")
			}
			findNeedles(t, "stream "+name+" message "+m.Subject, text, needles)
		}
	}
	if err := names.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		t.Fatal(err)
	}
	if streams < 8 || messages < 50 {
		t.Fatalf("read %d messages of %d streams: too few to mean anything", messages, streams)
	}
}

// A token rotated in the cluster's secrets file and committed is used by the next reconcile, without a
// restart: the simulator accepts only the new secret from the moment of the rotation.
func TestUpUsesATokenRotatedInTheSecretsFileWithoutARestart(t *testing.T) {
	e := newDemoEnv(t)
	u := e.startUp("--git-poll-sec", "1")
	addr := u.addr()
	waitConverged(t, u, addr, "demo", e.head())

	rotated := readDemoPlaintext(t, "rotated.plain.yaml")
	old := readDemoPlaintext(t, "secrets.plain.yaml")
	if rotated.Secrets["proxops-token"] == old.Secrets["proxops-token"] {
		t.Fatal("the rotated fixture has the old token")
	}
	e.sim.SetToken("proxops@pve!proxops", rotated.Secrets["proxops-token"])
	e.sim.ResetLog()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "internal", "secrets", "testdata", "demo", "rotated.sops.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.repo, "clusters", "demo", "secrets.sops.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	e.edit("vm/demo/web-01.yaml", func(s string) string { return strings.Replace(s, "cores: 2", "cores: 4", 1) })
	e.commit("rotate the PVE token; web-01 gets 4 cores")
	waitConverged(t, u, addr, "demo", e.head())
	if cfg, _ := e.sim.Config(101); cfg["cores"] != "4" {
		t.Fatalf("web-01 cores = %q, want 4", cfg["cores"])
	}
	for _, r := range e.sim.Requests() {
		if r.Status == 401 || r.User != "proxops@pve!proxops" {
			t.Errorf("%s %s: status %d as %q", r.Method, r.Path, r.Status, r.User)
		}
	}
	if len(logLines(u.errOut.String(), "pve credentials changed; connected with the new ones")) == 0 {
		t.Errorf("the executors never changed credentials:\n%s", u.errOut)
	}
	if code := u.stop(); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
}
