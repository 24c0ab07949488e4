package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestOptionsComeFromFlagsWithTheEnvironmentAsDefault(t *testing.T) {
	var out bytes.Buffer
	o, err := parseOptions([]string{"--stale-after", "20m"}, envOf(map[string]string{
		"PROXOPS_NATS_URL": "nats://127.0.0.1:4222", "PROXOPS_NATS_PASSWORD": "s3cret",
		"PROXOPS_STATUS_LISTEN": "127.0.0.1:9999", "PROXOPS_LOG_LEVEL": "debug",
	}), &out)
	if err != nil {
		t.Fatal(err)
	}
	if o.nats.URL != "nats://127.0.0.1:4222" || o.nats.User != "status" || o.nats.Password != "s3cret" ||
		o.listen != "127.0.0.1:9999" || o.staleAfter != 20*time.Minute || o.refresh != 10*time.Second || o.logLevel.String() != "DEBUG" {
		t.Errorf("options = %+v", o)
	}
}

func TestBadConfigurationExitsWithUsageStatus(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "--nats-url (or PROXOPS_NATS_URL) is required"},
		{[]string{"--nats-url", "nats://x", "--log-level", "loud"}, nil, "--log-level"},
		{[]string{"--nats-url", "nats://x"}, map[string]string{"PROXOPS_STATUS_STALE_AFTER": "soon"}, `PROXOPS_STATUS_STALE_AFTER="soon"`},
	} {
		var stderr bytes.Buffer
		if code := run(tt.args, envOf(tt.env), &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("run %v: code %d, stderr %q; want 2 and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}
