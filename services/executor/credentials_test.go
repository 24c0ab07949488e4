package executor_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/services/executor"
)

// swappable is a credential source a test changes.
type swappable struct {
	mu    sync.Mutex
	creds executor.Credentials
	err   error
}

func (s *swappable) Current(context.Context) (executor.Credentials, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creds, s.err
}

func (s *swappable) set(c executor.Credentials, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.creds, s.err = c, err
}

// An executor with a credential source asks it before every operation: a token rotated on PVE and handed
// out by the source is used from the next operation on, without a restart; a source that fails fails the
// operation with its (secret-free) reason, and nothing reaches PVE.
func TestExecutorUsesTheCredentialsItsSourceHandsOut(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	source := &swappable{creds: executor.Credentials{TokenID: pvesim.DefaultRootTokenID, TokenSecret: pvesim.DefaultRootTokenSecret}}
	cfg := e.config()
	cfg.PVE.TokenID, cfg.PVE.TokenSecret = "", ""
	cfg.Credentials = source
	cfg.MaxDeliver = 2
	e.start(cfg)
	e.mustSucceed(e.dispatch(plan.Operation{Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Action: plan.ActionCreate,
		Values: kvs("name", "web-01", "memory", "1024", "tags", "proxops"), Precondition: plan.Precondition{ExpectAbsent: true}}))
	e.own(101)

	const rotated = "5e0c8a7b-3f21-4d6e-9a14-2b7c6d8e0f13"
	e.sim.SetToken(pvesim.DefaultRootTokenID, rotated)
	source.set(executor.Credentials{TokenID: pvesim.DefaultRootTokenID, TokenSecret: rotated}, nil)
	e.sim.ResetLog()
	e.mustSucceed(e.dispatch(plan.Operation{Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: kvs("memory", "2048")}))
	if conf, _ := e.sim.Config(101); conf["memory"] != "2048" {
		t.Fatalf("memory %q after the configure with the rotated token", conf["memory"])
	}
	for _, r := range e.sim.Requests() {
		if r.Status == 401 {
			t.Errorf("%s %s refused: the old token was used", r.Method, r.Path)
		}
	}

	source.set(executor.Credentials{}, errors.New("pve.clusters.lab.secrets.pve.token: cloud-init secret resolution: no such entry"))
	e.sim.ResetLog()
	r := e.final(e.dispatch(plan.Operation{Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: kvs("memory", "4096")}), time.Minute)
	if r.Status != plan.StatusFailed || !strings.Contains(r.Message, "pve.clusters.lab.secrets.pve.token") {
		t.Fatalf("with a failing source: %s: %s", r.Status, r.Message)
	}
	if n := len(e.sim.Requests()); n != 0 {
		t.Fatalf("%d requests reached PVE without credentials", n)
	}
}

func TestCredentialsNeverPrintTheirSecrets(t *testing.T) {
	const token, password = "0b9f4e2d-token-secret", "correct-horse-password"
	for _, c := range []executor.Credentials{
		{TokenID: "root@pam!proxops", TokenSecret: token},
		{User: "root@pam", Password: password},
	} {
		var logged bytes.Buffer
		slog.New(slog.NewJSONHandler(&logged, nil)).Info("credentials", slog.Any("creds", c), slog.Any("ptr", &c))
		forms := map[string]string{
			"%v": fmt.Sprintf("%v", c), "%+v": fmt.Sprintf("%+v", c), "%#v": fmt.Sprintf("%#v", c),
			"%s": fmt.Sprintf("%s", c), "%q": fmt.Sprintf("%q", c), "pointer %#v": fmt.Sprintf("%#v", &c),
			"nested %#v": fmt.Sprintf("%#v", struct{ C executor.Credentials }{c}), "slog": logged.String(),
		}
		for name, out := range forms {
			if strings.Contains(out, token) || strings.Contains(out, password) {
				t.Errorf("%s leaks a secret: %s", name, out)
			}
			if !strings.Contains(out, "root@pam") {
				t.Errorf("%s hides the principal: %s", name, out)
			}
		}
		if got := fmt.Sprintf("%#v", c); !strings.Contains(got, "<redacted>") {
			t.Errorf("%%#v = %s, want the secret shown as redacted", got)
		}
	}
}
