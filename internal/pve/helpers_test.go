package pve_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

// simCluster is the simulator behind a real loopback HTTP server.
type simCluster struct {
	sim *pvesim.Sim
	srv *httptest.Server
}

func newSim(t *testing.T, spec pvesim.Spec) *simCluster {
	t.Helper()
	return newSimHandler(t, spec, nil)
}

// newSimHandler serves the simulator, optionally through a middleware.
func newSimHandler(t *testing.T, spec pvesim.Spec, wrap func(http.Handler) http.Handler) *simCluster {
	t.Helper()
	if spec.TaskDurations == nil {
		spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond)}
	}
	if spec.Seed == 0 {
		spec.Seed = 7
	}
	sim, err := pvesim.New(spec)
	if err != nil {
		t.Fatalf("new simulator: %v", err)
	}
	var h http.Handler = sim
	if wrap != nil {
		h = wrap(sim)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	return &simCluster{sim: sim, srv: srv}
}

// config is a token-auth adapter config for the simulator with fast task polls.
func (c *simCluster) config() pve.Config {
	return pve.Config{
		BaseURL:     c.srv.URL,
		TokenID:     pvesim.DefaultRootTokenID,
		TokenSecret: pvesim.DefaultRootTokenSecret,
		TaskPollMin: 2 * time.Millisecond,
		TaskPollMax: 20 * time.Millisecond,
		ReadBackoff: time.Millisecond,
		TaskTimeout: 30 * time.Second,
	}
}

func (c *simCluster) client(t *testing.T) *pve.Client {
	t.Helper()
	return c.clientWith(t, c.config())
}

func (c *simCluster) clientWith(t *testing.T, cfg pve.Config) *pve.Client {
	t.Helper()
	cl, err := pve.New(testContext(t), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return cl
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// writes counts the non-GET requests the simulator saw for a path template.
func (c *simCluster) count(method, template string) int { return c.sim.Count(method, template) }

// baseSpec is the default simulated cluster with artifacts on local storage.
func baseSpec() pvesim.Spec {
	s := pvesim.DefaultSpec()
	s.Files = []pvesim.FileSpec{
		{VolID: "local:iso/debian-12.iso", Size: 600 << 20},
		{VolID: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", Size: 120 << 20},
	}
	return s
}

// seedVM is a stopped qemu guest on pve1 tagged proxops.
const seedVM = `cores: 2
memory: 2048
name: web
net0: virtio=BC:24:11:00:00:01,bridge=vmbr0
scsi0: local-lvm:vm-100-disk-0,size=8G
scsihw: virtio-scsi-single
smbios1: uuid=6f1b2c3d-0000-4000-8000-000000000100
tags: proxops
`

// seedCT is a stopped lxc guest on pve1 tagged proxops.
const seedCT = `arch: amd64
cores: 1
hostname: ct200
memory: 512
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:02:00,type=veth
ostype: debian
rootfs: local-lvm:vm-200-disk-0,size=4G
tags: proxops
unprivileged: 1
`
