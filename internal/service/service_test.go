package service_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/metrics"
	"github.com/proxops/proxops/internal/service"
	"github.com/proxops/proxops/internal/testkit"
)

func TestEnvTakesTheVariableOrTheDefaultAndReportsEveryBadValue(t *testing.T) {
	vars := map[string]string{"A": "a", "D": "3s", "BAD_D": "soon", "B": "true", "BAD_B": "perhaps"}
	env := &service.Env{Getenv: func(k string) string { return vars[k] }}
	if got := env.String("A", "x"); got != "a" {
		t.Errorf("String(A) = %q", got)
	}
	if got := env.String("UNSET", "x"); got != "x" {
		t.Errorf("String(UNSET) = %q, want the default", got)
	}
	if got := env.Duration("D", time.Second); got != 3*time.Second {
		t.Errorf("Duration(D) = %s", got)
	}
	if got := env.Duration("UNSET", time.Second); got != time.Second {
		t.Errorf("Duration(UNSET) = %s, want the default", got)
	}
	if !env.Bool("B") || env.Bool("UNSET") {
		t.Error("Bool: want B true and UNSET false")
	}
	if env.Err() != nil {
		t.Fatalf("Err = %v before any bad value", env.Err())
	}
	env.Duration("BAD_D", time.Second)
	env.Bool("BAD_B")
	err := env.Err()
	if err == nil || !strings.Contains(err.Error(), `BAD_D="soon"`) || !strings.Contains(err.Error(), `BAD_B="perhaps"`) {
		t.Fatalf("Err = %v, want both bad variables named", err)
	}
}

func TestParseLevelNamesTheFlagOnABadLevel(t *testing.T) {
	if l, err := service.ParseLevel("warn"); err != nil || l != slog.LevelWarn {
		t.Errorf("ParseLevel(warn) = %v, %v", l, err)
	}
	if _, err := service.ParseLevel("loud"); err == nil || !strings.Contains(err.Error(), `--log-level "loud"`) {
		t.Errorf("ParseLevel(loud) = %v, want an error naming the flag", err)
	}
}

func TestServeMetricsServesTheBuildInfoAndRefusesAnAddressInUse(t *testing.T) {
	reg, err := service.Registry(metrics.BuildInfo{Version: "v1.2.3", Commit: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	addr := testkit.FreeAddr(t)
	stop, err := service.ServeMetrics(addr, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	testkit.Eventually(t, 10*time.Second, "proxops_build_info on /metrics", func() bool {
		return strings.Contains(testkit.Get("http://"+addr+"/metrics"), `proxops_build_info{commit="abc"`)
	})
	if _, err := service.ServeMetrics(addr, reg, log); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("a second server on %s: %v, want an error naming the address", addr, err)
	}
}
