package watcher_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/services/watcher"
)

// fingerprint records every file and directory under dir: its mode, size, modification time and content.
func fingerprint(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		entry := fmt.Sprintf("%v %d %d", info.Mode(), info.Size(), info.ModTime().UnixNano())
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			entry += " " + hex.EncodeToString(sum[:])
		}
		out[p] = entry
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLocalRepositoryIsReadFromCommitsWithoutBeingTouched(t *testing.T) {
	repo := newWorkRepo(t, t.TempDir())
	seed(repo)
	first := repo.commit("initial manifests")
	// Uncommitted work of the repository's owner: a change, a staged file, an untracked file.
	repo.write("vm/base/web.yaml", "work in progress\n")
	repo.write("vm/base/staged.yaml", "kind: VM\n")
	runGit(t, repo.dir, "add", "vm/base/staged.yaml")
	repo.write("vm/base/untracked.yaml", "kind: VM\n")
	before := fingerprint(t, repo.dir)

	cfg := watcher.Config{Path: repo.dir, PollInterval: 20 * time.Millisecond, DriftInterval: -1}
	r := startWatcher(t, cfg, newTestBus(t))
	ev := r.waitCommit(first, watcher.TriggerStartup)
	if ev.Repo != repo.dir || ev.Tree != repo.treeOf(first) {
		t.Errorf("event repo %q tree %q, want %q %q", ev.Repo, ev.Tree, repo.dir, repo.treeOf(first))
	}
	snap, err := r.bus.getTree(ev.Tree)
	if err != nil {
		t.Fatal(err)
	}
	if got := fileContent(snap, "vm/base/web.yaml"); !strings.HasPrefix(got, "apiVersion: proxops/v1") {
		t.Errorf("web.yaml = %q, want the committed content", got)
	}
	for _, p := range []string{"vm/base/staged.yaml", "vm/base/untracked.yaml"} {
		if got := fileContent(snap, p); got != "<absent>" {
			t.Errorf("uncommitted %s is in the snapshot", p)
		}
	}
	lists := r.metric("proxops_watcher_git_duration_seconds", map[string]string{"operation": "list"})
	testkit.Eventually(t, waitTimeout, "more polls", func() bool {
		return r.metric("proxops_watcher_git_duration_seconds", map[string]string{"operation": "list"}) >= lists+5
	})
	if diff := cmp.Diff(before, fingerprint(t, repo.dir)); diff != "" {
		t.Errorf("the watcher changed the repository (-before +after):\n%s", diff)
	}

	second := repo.commit("commit the work")
	got := r.waitCommit(second, watcher.TriggerPoll)
	snap, err = r.bus.getTree(got.Tree)
	if err != nil {
		t.Fatal(err)
	}
	if fileContent(snap, "vm/base/web.yaml") != "work in progress\n" || fileContent(snap, "vm/base/untracked.yaml") != "kind: VM\n" {
		t.Errorf("the second commit's snapshot lacks the committed work: %+v", snap.Files)
	}
}

func TestHTTPSWithTokenAndCAFile(t *testing.T) {
	const token = "tok-3f9a1c77e2b54d0c"
	root := t.TempDir()
	repo := newWorkRepo(t, root)
	seed(repo)
	first := repo.commitAndPush("initial manifests")
	srv := newGitHTTPServer(t, root, true, "deploy", token)
	ca := srv.caFile(t)
	host := strings.TrimPrefix(srv.srv.URL, "https://")
	base := watcher.Config{
		DataDir: t.TempDir(), PollInterval: time.Hour, DriftInterval: -1,
		RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
	}
	noSecrets := func(t *testing.T, r *running) {
		t.Helper()
		texts := []string{r.logs.String(), fmt.Sprintf("%+v", r.w.Status()), fmt.Sprintf("%+v", r.bus.pub.all())}
		_, metrics := r.get("/metrics")
		texts = append(texts, metrics)
		for _, text := range texts {
			if strings.Contains(text, token) {
				t.Errorf("the token leaked: %s", text)
			}
		}
	}

	ok := []struct {
		name string
		edit func(*watcher.Config)
	}{
		{"token and CA file", func(c *watcher.Config) {
			c.URL, c.Username, c.Token, c.CAFile = srv.url("repo.git"), "deploy", token, ca
		}},
		{"credentials in the url", func(c *watcher.Config) {
			c.URL, c.CAFile = "https://deploy:"+token+"@"+host+"/repo.git", ca
		}},
		{"insecure", func(c *watcher.Config) {
			c.URL, c.Username, c.Token, c.Insecure = srv.url("repo.git"), "deploy", token, true
		}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.DataDir = t.TempDir()
			tc.edit(&cfg)
			r := startWatcher(t, cfg, newTestBus(t))
			ev := r.waitCommit(first, watcher.TriggerStartup)
			if ev.Repo != srv.url("repo.git") {
				t.Errorf("event repo = %q, want %q", ev.Repo, srv.url("repo.git"))
			}
			noSecrets(t, r)
		})
	}

	failing := []struct {
		name  string
		edit  func(*watcher.Config)
		error string
	}{
		{"unknown certificate authority", func(c *watcher.Config) {
			c.URL, c.Username, c.Token = "https://deploy:"+token+"@"+host+"/repo.git", "", ""
		}, "certificate"},
		{"wrong token", func(c *watcher.Config) {
			c.URL, c.Username, c.Token, c.CAFile = srv.url("repo.git"), "deploy", token+"-old", ca
		}, "authentication"},
	}
	for _, tc := range failing {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.DataDir = t.TempDir()
			tc.edit(&cfg)
			r := startWatcher(t, cfg, newTestBus(t))
			testkit.Eventually(t, waitTimeout, "failures", func() bool { return r.w.Status().ConsecutiveFailures >= 2 })
			st := r.w.Status()
			if !strings.Contains(st.LastError, tc.error) {
				t.Errorf("last error %q does not mention %q", st.LastError, tc.error)
			}
			if n := len(r.bus.pub.all()); n != 0 {
				t.Errorf("%d events published without access to the repository", n)
			}
			noSecrets(t, r)
		})
	}
}

func TestSSHWithKeyAndKnownHosts(t *testing.T) {
	root := t.TempDir()
	repo := newWorkRepo(t, root)
	seed(repo)
	first := repo.commitAndPush("initial manifests")
	const passphrase = "key-passphrase-for-tests"
	key, pub := newClientKey(t, passphrase)
	srv := newSSHGitServer(t, root, pub)
	base := watcher.Config{
		URL:     "ssh://git@" + srv.addr + "/repo.git",
		DataDir: t.TempDir(), PollInterval: 20 * time.Millisecond, DriftInterval: -1,
		SSHKeyFile: key, SSHKeyPassphrase: passphrase,
		KnownHostsFile: writeFile(t, "known_hosts", srv.knownHostsLine()+"\n"),
		RetryMin:       10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
	}

	t.Run("known host", func(t *testing.T) {
		cfg := base
		cfg.DataDir = t.TempDir()
		r := startWatcher(t, cfg, newTestBus(t))
		ev := r.waitCommit(first, watcher.TriggerStartup)
		if ev.Repo != "ssh://"+srv.addr+"/repo.git" {
			t.Errorf("event repo = %q, want the url without its user", ev.Repo)
		}
		second := repo.commitAndPush("second")
		r.waitCommit(second, watcher.TriggerPoll)
		if strings.Contains(r.logs.String(), passphrase) {
			t.Error("the passphrase leaked into the logs")
		}
	})
	t.Run("unknown host key", func(t *testing.T) {
		other := newSSHGitServer(t, root, pub)
		cfg := base
		cfg.DataDir = t.TempDir()
		// The host key is refused before the client authenticates: a plain key will do.
		cfg.SSHKeyFile, _ = newClientKey(t, "")
		cfg.SSHKeyPassphrase = ""
		// The known_hosts entry of another server, under this server's address.
		line := strings.Replace(other.knownHostsLine(), knownhostsAddr(other.addr), knownhostsAddr(srv.addr), 1)
		cfg.KnownHostsFile = writeFile(t, "known_hosts", line+"\n")
		r := startWatcher(t, cfg, newTestBus(t))
		testkit.Eventually(t, waitTimeout, "failures", func() bool { return r.w.Status().ConsecutiveFailures >= 2 })
		if st := r.w.Status(); !strings.Contains(st.LastError, "key mismatch") {
			t.Errorf("last error %q, want a host key mismatch", st.LastError)
		}
		if n := len(r.bus.pub.all()); n != 0 {
			t.Errorf("%d events published from an unverified host", n)
		}
	})
}

// knownhostsAddr is how known_hosts writes an address with a port.
func knownhostsAddr(addr string) string {
	host, port, _ := strings.Cut(addr, ":")
	return "[" + host + "]:" + port
}
