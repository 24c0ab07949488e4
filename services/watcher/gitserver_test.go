package watcher_test

import (
	"encoding/pem"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	pathpkg "path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/services/watcher"
)

// gitEnv makes the git CLI independent of the machine's and the user's configuration.
func gitEnv(home string) []string {
	return append(os.Environ(),
		"HOME="+home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL="+filepath.Join(home, "gitconfig"),
		"GIT_AUTHOR_NAME=Test Author", "GIT_AUTHOR_EMAIL=author@example.invalid",
		"GIT_COMMITTER_NAME=Test Committer", "GIT_COMMITTER_EMAIL=committer@example.invalid",
		"GIT_TERMINAL_PROMPT=0",
	)
}

// runGit runs the git CLI in dir and returns its trimmed output.
func runGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// runGitRaw runs git and returns its standard output as it is.
func runGitRaw(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s in %s: %v", strings.Join(args, " "), dir, err)
	}
	return string(out)
}

// workRepo is a git work tree the tests commit in, with a bare "origin" it pushes to.
type workRepo struct {
	t    testing.TB
	dir  string
	bare string
}

// newWorkRepo creates a work tree on branch main and a bare repository origin.git under root.
func newWorkRepo(t testing.TB, root string) *workRepo {
	t.Helper()
	r := &workRepo{t: t, dir: filepath.Join(root, "work"), bare: filepath.Join(root, "repo.git")}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	runGit(t, root, "init", "-q", "--bare", "-b", "main", r.bare)
	runGit(t, r.dir, "init", "-q", "-b", "main")
	runGit(t, r.dir, "remote", "add", "origin", r.bare)
	return r
}

// write sets a file of the work tree.
func (r *workRepo) write(path, content string) {
	r.t.Helper()
	p := filepath.Join(r.dir, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// commit commits every change of the work tree and returns the commit id.
func (r *workRepo) commit(msg string) string {
	r.t.Helper()
	runGit(r.t, r.dir, "add", "-A")
	runGit(r.t, r.dir, "commit", "-q", "--allow-empty", "-m", msg)
	return runGit(r.t, r.dir, "rev-parse", "HEAD")
}

// push pushes the current branch to origin's branch, forced when force.
func (r *workRepo) push(branch string, force bool) {
	r.t.Helper()
	args := []string{"push", "-q", "origin", "HEAD:refs/heads/" + branch}
	if force {
		args = append(args, "--force")
	}
	runGit(r.t, r.dir, args...)
}

// commitAndPush commits and pushes to main.
func (r *workRepo) commitAndPush(msg string) string {
	r.t.Helper()
	sha := r.commit(msg)
	r.push("main", false)
	return sha
}

// treeOf is the name of a commit's manifest snapshot, computed from git's own listing of the commit: the
// content hash (event.TreeName) of its files below the manifest roots and proxops.yaml, a link to a file
// read as that file.
func (r *workRepo) treeOf(commit string) string {
	r.t.Helper()
	var files []event.File
	for _, line := range strings.Split(runGit(r.t, r.dir, "ls-tree", "-r", "--full-tree", commit), "\n") {
		meta, path, ok := strings.Cut(line, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 || f[1] != "blob" || !watcher.IsManifestPath(path) {
			continue
		}
		source := path
		if f[0] == "120000" {
			// A link inside the repository is read as the file it leads to.
			source = pathpkg.Join(pathpkg.Dir(path), runGitRaw(r.t, r.dir, "cat-file", "blob", commit+":"+path))
		}
		files = append(files, event.File{Path: path, Content: []byte(runGitRaw(r.t, r.dir, "cat-file", "blob", commit+":"+source))})
	}
	return event.TreeName(files)
}

// gitHTTPServer serves the bare repositories under root with git http-backend, the way a git host does.
type gitHTTPServer struct {
	srv      *httptest.Server
	requests atomic.Int64
	// down makes the server answer 503, like a host in maintenance.
	down atomic.Bool
	// user and token, when set, are required as basic auth.
	user, token string
}

func gitHTTPBackend(t testing.TB, root string) http.Handler {
	t.Helper()
	execPath := runGit(t, root, "--exec-path")
	backend := filepath.Join(execPath, "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("git http-backend is needed to serve test repositories: %v", err)
	}
	return &cgi.Handler{
		Path: backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "HOME=" + root, "GIT_CONFIG_NOSYSTEM=1"},
	}
}

// newGitHTTPServer serves root over http (or https with tls).
func newGitHTTPServer(t testing.TB, root string, tls bool, user, token string) *gitHTTPServer {
	t.Helper()
	g := &gitHTTPServer{user: user, token: token}
	backend := gitHTTPBackend(t, root)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.requests.Add(1)
		if g.down.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		if g.token != "" {
			u, p, ok := r.BasicAuth()
			if !ok || u != g.user || p != g.token {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
		}
		backend.ServeHTTP(w, r)
	})
	if tls {
		g.srv = httptest.NewTLSServer(h)
	} else {
		g.srv = httptest.NewServer(h)
	}
	t.Cleanup(g.srv.Close)
	return g
}

// url is the address of a repository of the server.
func (g *gitHTTPServer) url(name string) string { return g.srv.URL + "/" + name }

// caFile writes the server's certificate as a PEM file.
func (g *gitHTTPServer) caFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.pem")
	data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: g.srv.Certificate().Raw})
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
