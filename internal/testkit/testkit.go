// Package testkit holds small helpers the tests of several packages share: a buffer that many goroutines
// may write (a process's log), a free loopback address, polling for a condition (Eventually) and polling a
// running command for a condition (WaitUntil). Only tests import it.
package testkit

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/opsign"
	"github.com/proxops/proxops/internal/wire"
)

// SyncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeAddr returns a loopback address no one listens on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// Get returns the body of url, whatever its status, or "" when it cannot be read.
func Get(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return ""
	}
	return string(b)
}

// Eventually polls cond every 10 ms until it holds; it fails the test, naming what it waited for, when cond
// still does not hold after timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitUntil polls cond every 20 ms while a command runs; it fails the test when the command exits first (its
// exit code arrives on done) or after 30 s, showing the command's log.
func WaitUntil(t testing.TB, what string, done <-chan int, log *SyncBuffer, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		select {
		case code := <-done:
			t.Fatalf("exited with %d while waiting for %s; log:\n%s", code, what, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30 s; log:\n%s", what, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Commands builds Go commands once per test binary into a temporary directory, for tests that run services
// as separate processes (so a kill is a real SIGKILL). Remove deletes the directory; call it from TestMain.
type Commands struct {
	// Prefix names the temporary directory.
	Prefix string
	// Packages are the import paths to build.
	Packages []string

	once sync.Once
	dir  string
	err  error
	out  []byte
}

// Path builds the commands on first use and returns the path of the one named name.
func (c *Commands) Path(t testing.TB, name string) string {
	t.Helper()
	c.once.Do(func() {
		dir, err := os.MkdirTemp("", c.Prefix)
		if err != nil {
			c.err = err
			return
		}
		c.dir = dir
		cmd := exec.Command("go", append([]string{"build", "-o", dir + string(os.PathSeparator)}, c.Packages...)...)
		c.out, c.err = cmd.CombinedOutput()
	})
	if c.err != nil {
		t.Fatalf("build commands: %v\n%s", c.err, c.out)
	}
	return filepath.Join(c.dir, name)
}

// Remove deletes the built commands.
func (c *Commands) Remove() {
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// RunService runs a service's Run function until the returned stop is called or the test ends; stop waits for
// it to return (30 s at most) and reports an error it returned.
func RunService(t testing.TB, what string, fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: %v", what, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop", what)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Snapshot is a repository of files (path to content) as a tree snapshot, named by its content
// (event.TreeName), as the watcher and the clients store trees.
func Snapshot(files map[string]string) event.TreeSnapshot {
	snap := event.TreeSnapshot{}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		snap.Files = append(snap.Files, event.File{Path: p, Content: []byte(files[p])})
	}
	snap.Named()
	return snap
}

// Owned reads a cluster's ownership inventory (the proxops_owned bucket), by vmid.
func Owned(t testing.TB, ctx context.Context, b *bus.Bus, cluster string) map[int]wire.OwnedGuest {
	t.Helper()
	entries, err := b.Entries(ctx, bus.BucketOwned, cluster+".*")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]wire.OwnedGuest{}
	for _, en := range entries {
		o, err := wire.UnmarshalOwnedGuest(en.Value)
		if err != nil {
			t.Fatal(err)
		}
		out[o.VMID] = o
	}
	return out
}

var plannerKey struct {
	once   sync.Once
	seed   []byte
	signer *opsign.Signer
	err    error
}

// PlannerKey is the planner signing key of the test binary: test planners sign with it and test executors
// trust its public key.
func PlannerKey(t testing.TB) *opsign.Signer {
	t.Helper()
	plannerKey.once.Do(func() {
		plannerKey.seed, plannerKey.err = opsign.GenerateSeed()
		if plannerKey.err == nil {
			plannerKey.signer, plannerKey.err = opsign.NewSigner(plannerKey.seed)
		}
	})
	if plannerKey.err != nil {
		t.Fatalf("planner key: %v", plannerKey.err)
	}
	return plannerKey.signer
}

// PlannerKeyFile writes PlannerKey's seed to a file (mode 0600) for a planner run as a process, and
// returns its path.
func PlannerKeyFile(t testing.TB) string {
	t.Helper()
	PlannerKey(t)
	path := filepath.Join(t.TempDir(), opsign.KeyFile)
	if err := os.WriteFile(path, plannerKey.seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
