package reliability_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// Separate processes: the planner, the executors and the NATS servers are built once per test run and run
// as their own processes, so a kill is a real SIGKILL with no cleanup at all.

// commands are nats-server and the planner and executor commands, built once per test run.
var commands = &testkit.Commands{Prefix: "proxops-reliability-", Packages: []string{
	"github.com/nats-io/nats-server/v2",
	"github.com/proxops/proxops/services/planner/cmd/proxops-planner",
	"github.com/proxops/proxops/services/executor/cmd/proxops-executor",
}}

// binary returns the path of one of the commands.
func binary(t testing.TB, name string) string {
	t.Helper()
	return commands.Path(t, name)
}

// TestMain removes the commands built for the process tests.
func TestMain(m *testing.M) {
	code := m.Run()
	commands.Remove()
	os.Exit(code)
}

// proc is a process the test started.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *lockedBuffer
	done chan struct{}
}

// lockedBuffer is a process's log, written by its output copiers and read by the test.
type lockedBuffer = testkit.SyncBuffer

// startProc starts a command; at the test's end it is stopped with SIGTERM (SIGKILL after 30 s) and, when
// the test failed, its log is shown.
func startProc(t testing.TB, name, bin string, args, env []string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PROXOPS_") && !strings.HasPrefix(kv, "SOPS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	p := &proc{name: name, cmd: cmd, log: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if dir := os.Getenv("PROXOPS_TEST_LOG_DIR"); dir != "" {
		// Keep every process's whole log for a post-mortem.
		f, err := os.OpenFile(filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-").Replace(name)+".log"),
			os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		w := io.MultiWriter(p.log, f)
		cmd.Stdout, cmd.Stderr = w, w
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() || os.Getenv("PROXOPS_TEST_LOG") != "" {
			t.Logf("%s log (tail):\n%s", name, tail(p.log.String(), 60))
		}
	})
	return p
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// stop ends the process gracefully (SIGTERM, SIGKILL after 30 s) and waits for it.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill sends SIGKILL: the process dies in the middle of whatever it does.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", p.name, err)
	}
	<-p.done
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// freePorts returns n distinct free loopback ports.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return out
}

// natsCluster is a JetStream cluster of nats-server processes, routes and clients on 127.0.0.1.
type natsCluster struct {
	t       testing.TB
	names   []string
	confs   []string
	ports   []int
	servers []*proc
}

// startNATSCluster starts n servers forming one JetStream cluster. Free ports are found by binding and
// releasing them, so another process may take one first: a cluster whose servers do not all listen is
// started again on other ports.
func startNATSCluster(t testing.TB, n int) *natsCluster {
	t.Helper()
	for attempt := 1; ; attempt++ {
		c, err := tryNATSCluster(t, n)
		if err == nil {
			return c
		}
		for _, p := range c.servers {
			p.stop()
		}
		if attempt == 3 {
			t.Fatalf("start a NATS cluster: %v", err)
		}
		t.Logf("start a NATS cluster: %v; again on other ports", err)
	}
}

func tryNATSCluster(t testing.TB, n int) (*natsCluster, error) {
	ports := freePorts(t, 2*n)
	c := &natsCluster{t: t, ports: ports[:n]}
	routes := ports[n:]
	dir := t.TempDir()
	for i := range n {
		name := fmt.Sprintf("nats-%d", i+1)
		var peers []string
		for j := range n {
			if j != i {
				peers = append(peers, fmt.Sprintf("    nats-route://127.0.0.1:%d", routes[j]))
			}
		}
		conf := fmt.Sprintf("server_name: %s\nlisten: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n}\n"+
			"cluster {\n  name: proxops\n  listen: \"127.0.0.1:%d\"\n  routes: [\n%s\n  ]\n}\n",
			name, c.ports[i], filepath.Join(dir, name), routes[i], strings.Join(peers, "\n"))
		path := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		c.names = append(c.names, name)
		c.confs = append(c.confs, path)
	}
	for i := range n {
		c.servers = append(c.servers, startProc(t, c.names[i], binary(t, "nats-server"), []string{"-c", c.confs[i]}, nil))
	}
	deadline := time.Now().Add(30 * time.Second)
	for i, p := range c.ports {
		for {
			if c.servers[i].exited() {
				return c, fmt.Errorf("%s exited: %s", c.names[i], tail(c.servers[i].log.String(), 3))
			}
			conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), time.Second)
			if err == nil {
				_ = conn.Close()
				break
			}
			if time.Now().After(deadline) {
				return c, fmt.Errorf("%s does not listen on %d", c.names[i], p)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c, nil
}

// url is the client URL list of every server.
func (c *natsCluster) url() string {
	var urls []string
	for _, p := range c.ports {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	return strings.Join(urls, ",")
}

// stopServer kills one server (by its server name) and waits until it is gone.
func (c *natsCluster) stopServer(name string) {
	c.t.Helper()
	for i, n := range c.names {
		if n == name {
			c.servers[i].kill(c.t)
			return
		}
	}
	c.t.Fatalf("no NATS server %q", name)
}

// connect connects the test to the cluster and provisions every stream, bucket and object store with three
// replicas, retrying until the cluster has elected its leaders.
func (c *natsCluster) connect(leaseTTL time.Duration) *bus.Bus {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var b *bus.Bus
	var err error
	for {
		if b == nil {
			b, err = bus.Connect(ctx, bus.ConnectConfig{URL: c.url(), Name: "reliability-test"}, bus.Options{Logger: testLogger(c.t)})
		}
		if b != nil {
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = b.Provision(pctx, bus.ProvisionConfig{Replicas: 3, LeaseTTL: leaseTTL})
			pcancel()
			if err == nil {
				c.t.Cleanup(func() { _ = b.Close() })
				return b
			}
		}
		if ctx.Err() != nil {
			c.t.Fatalf("provision the NATS cluster: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// streamLeader names the server leading a stream.
func streamLeader(t testing.TB, b *bus.Bus, stream string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.JetStream().Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("stream %s has no leader", stream)
	}
	return info.Cluster.Leader
}

// processEnv runs the planner and executors as processes against a NATS URL and a simulator.
type processEnv struct {
	*env
	natsURL  string
	leaseTTL time.Duration
}

func (e *processEnv) startPlannerProcess(name string) *proc {
	e.t.Helper()
	return startProc(e.t, "planner "+name, binary(e.t, "proxops-planner"), []string{"--name", name,
		"--nats-url", e.natsURL, "--lease-ttl", e.leaseTTL.String(), "--observe-timeout", "30s",
		"--metrics-listen", "", "--log-level", "debug", "--signing-key-file", testkit.PlannerKeyFile(e.t)}, nil)
}

func (e *processEnv) startExecutorProcess(node, replica string, concurrency int) *proc {
	e.t.Helper()
	return startProc(e.t, "executor "+node+"/"+replica, binary(e.t, "proxops-executor"), []string{"--cluster", cluster,
		"--node", node, "--replica", replica, "--nats-url", e.natsURL, "--pve-url", e.srv.URL, "--task-poll", "20ms",
		"--ack-wait", "2s", "--retry-backoff", "100ms", "--concurrency", fmt.Sprint(concurrency), "--metrics-listen", "",
		"--trusted-planner-key", testkit.PlannerKey(e.t).PublicKey()},
		[]string{"PROXOPS_PVE_TOKEN_VALUE=" + pvesim.DefaultRootTokenID + "=" + pvesim.DefaultRootTokenSecret})
}

// waitConsumer waits until a node's durable work-queue consumer exists.
func (e *env) waitConsumer(node string) {
	e.t.Helper()
	durable, _ := bus.ExecutorConsumer(cluster, node)
	testkit.Eventually(e.t, time.Minute, "the consumer of "+node, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := e.bus.JetStream().Consumer(ctx, bus.StreamOps, durable)
		return err == nil
	})
}
