package service_test

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
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

func TestMetricsServesTheProcessRegistryOnlyWhenAnAddressIsGiven(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	b := metrics.BuildInfo{Version: "v1.2.3", Commit: "abc"}
	reg, stop, err := service.Metrics("", b, log)
	if err != nil || reg == nil {
		t.Fatalf("Metrics without an address = %v, %v: want a registry and no endpoint", reg, err)
	}
	stop()
	addr := testkit.FreeAddr(t)
	if _, stop, err = service.Metrics(addr, b, log); err != nil {
		t.Fatal(err)
	}
	defer stop()
	testkit.Eventually(t, 10*time.Second, "proxops_build_info on /metrics", func() bool {
		return strings.Contains(testkit.Get("http://"+addr+"/metrics"), `proxops_build_info{commit="abc"`)
	})
	if _, stop2, err := service.Metrics(addr, b, log); err == nil || stop2 != nil {
		t.Errorf("a second endpoint on %s: %v, want an error and no stop", addr, err)
	}
}

func TestNATSGivesAPasswordAloneTheRolesUserAndRequiresTheURL(t *testing.T) {
	cfg := bus.ConnectConfig{URL: "nats://x:4222", Password: "p"}
	if err := service.NATS(&cfg, bus.RoleStatus, "proxops-status"); err != nil {
		t.Fatalf("NATS = %v", err)
	}
	if cfg.User != "status" || cfg.Name != "proxops-status" {
		t.Errorf("user %q, name %q; want status and proxops-status", cfg.User, cfg.Name)
	}
	creds := bus.ConnectConfig{URL: "nats://x:4222", Password: "p", CredsFile: "c.creds"}
	if err := service.NATS(&creds, bus.RoleStatus, "proxops-status"); err != nil || creds.User != "" {
		t.Errorf("with a credentials file: user %q, err %v; want no user", creds.User, err)
	}
	var none bus.ConnectConfig
	if err := service.NATS(&none, bus.RoleNotifier, "proxops-notifier"); err == nil || !strings.Contains(err.Error(), "--nats-url") {
		t.Errorf("without a URL: %v, want --nats-url named", err)
	}
}

func TestConfigErrorEndsAfterHelpWithZeroAndOnABadConfigurationWithTwo(t *testing.T) {
	var out strings.Builder
	if _, done := service.ConfigError(&out, "proxops-x", nil); done {
		t.Error("no error: done, want the command to go on")
	}
	if code, done := service.ConfigError(&out, "proxops-x", flag.ErrHelp); !done || code != 0 {
		t.Errorf("--help: code %d done %v, want 0 and done", code, done)
	}
	if out.Len() != 0 {
		t.Errorf("--help printed %q; the flag set prints the usage", out.String())
	}
	if code, done := service.ConfigError(&out, "proxops-x", errors.New("bad")); !done || code != 2 || out.String() != "proxops-x: bad\n" {
		t.Errorf("bad configuration: code %d done %v, printed %q", code, done, out.String())
	}
}

func TestParseRefusesPositionalArguments(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	v := fs.String("v", "", "")
	if err := service.Parse(fs, []string{"-v", "1"}); err != nil || *v != "1" {
		t.Fatalf("Parse = %v, v %q", err, *v)
	}
	if err := service.Parse(fs, []string{"-v", "1", "extra"}); err == nil || !strings.Contains(err.Error(), `"extra"`) {
		t.Errorf("Parse with an argument = %v, want it named", err)
	}
}

func TestLevelFlagDefaultsToTheEnvironment(t *testing.T) {
	var nats bus.ConnectConfig
	fs, env := service.FlagSet("x", io.Discard, func(k string) string {
		return map[string]string{"PROXOPS_LOG_LEVEL": "debug", "PROXOPS_NATS_URL": "nats://y:4222"}[k]
	}, &nats)
	level := env.LevelFlag(fs)
	if err := service.Parse(fs, nil); err != nil {
		t.Fatal(err)
	}
	if *level != "debug" || nats.URL != "nats://y:4222" {
		t.Errorf("level %q, NATS URL %q; want both from the environment", *level, nats.URL)
	}
}

func TestParseWithLevelReadsTheLevelAfterTheFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	name := fs.String("log-level", "info", "")
	if l, err := service.ParseWithLevel(fs, []string{"-log-level", "error"}, name); err != nil || l != slog.LevelError {
		t.Errorf("ParseWithLevel(error) = %v, %v", l, err)
	}
	if _, err := service.ParseWithLevel(fs, []string{"-log-level", "loud"}, name); err == nil || !strings.Contains(err.Error(), `"loud"`) {
		t.Errorf("ParseWithLevel(loud) = %v, want the level named", err)
	}
	if _, err := service.ParseWithLevel(fs, []string{"extra"}, name); err == nil || !strings.Contains(err.Error(), `"extra"`) {
		t.Errorf("ParseWithLevel with an argument = %v, want it named", err)
	}
}

func TestParseAllReportsEveryMistakeAtOnceButABadFlagAlone(t *testing.T) {
	var nats bus.ConnectConfig
	newSet := func() (*flag.FlagSet, *service.Env, *string) {
		fs, env := service.FlagSet("x", io.Discard, func(k string) string { return map[string]string{"WAIT": "soon"}[k] }, &nats)
		fs.Duration("wait", env.Duration("WAIT", time.Second), "")
		return fs, env, env.LevelFlag(fs)
	}
	fs, env, level := newSet()
	_, err := env.ParseAll(fs, []string{"--log-level", "loud", "extra"}, level, func() error { return errors.New("own check") })
	for _, want := range []string{`WAIT="soon"`, `unexpected arguments ["extra"]`, "own check", `--log-level "loud"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseAll = %v, want %q among the mistakes", err, want)
		}
	}
	fs, env, level = newSet()
	checked := false
	_, err = env.ParseAll(fs, []string{"--no-such-flag"}, level, func() error { checked = true; return nil })
	if err == nil || strings.Contains(err.Error(), "WAIT") || checked {
		t.Errorf("a bad flag: %v (checks run: %v), want it alone and no check run", err, checked)
	}
	fs, env, level = newSet()
	if l, err := env.ParseAll(fs, []string{"--log-level", "warn"}, level); l != slog.LevelWarn || err == nil || !strings.Contains(err.Error(), "WAIT") {
		t.Errorf("ParseAll = %v, %v; want warn and the bad variable", l, err)
	}
}
