package repo_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/repo"
)

// A notifications section is read with every provider, filter and override; each mistake is reported at
// its line and column, and nothing else.
func TestNotificationsSectionIsReadAndEveryMistakeReported(t *testing.T) {
	good := `notifications:
  secrets-file: notify.sops.yaml
  external-url: https://proxops.example.com
  providers:
    - name: ops-chat
      type: slack
      url-ref: slack-url
      events: [run-failed, plan-rejected]
      rate-limit: 10
    - name: audit
      type: webhook
      url: https://hooks.example.com/proxops
      token-ref: audit-hmac
      clusters: [prod]
  overrides:
    lab:
      providers: [audit]
      mute: true
`
	cfg, diags := repo.ParseConfigFile("proxops.yaml", []byte(good))
	if len(diags) > 0 {
		t.Fatalf("unexpected diagnostics: %v", diags)
	}
	n := cfg.Notifications
	if n.SecretsFile != "notify.sops.yaml" || len(n.Providers) != 2 || n.Providers[0].URLRef != "slack-url" ||
		n.Providers[0].RateLimit != 10 || n.Providers[1].Clusters[0] != "prod" || !n.Overrides["lab"].Mute {
		t.Fatalf("notifications read as %+v", n)
	}

	bad := `notifications:
  external-url: ftp://x
  providers:
    - name: ops-chat
      type: pager
      url: https://user:pw@hooks.example.com/
      events: [run-exploded]
    - name: ops-chat
      type: smtp
      url: smtp://mail.example.com:25
      token-ref: smtp-password
  overrides:
    lab:
      providers: [nobody]
`
	_, diags = repo.ParseConfigFile("proxops.yaml", []byte(bad))
	got := diags.Error()
	for _, want := range []string{
		`proxops.yaml:2:17: notifications.external-url: invalid URL "ftp://x"`,
		`proxops.yaml:5:13: notifications.providers[0].type: invalid value "pager"`,
		`proxops.yaml:6:12: notifications.providers[0].url: must not carry credentials`,
		`proxops.yaml:7:16: notifications.providers[0].events[0]: unknown event "run-exploded"`,
		`proxops.yaml:8:13: notifications.providers[1].name: provider ops-chat is declared twice`,
		`notifications.providers[1].to: smtp needs from and to`,
		`notifications.secrets-file: required: providers name secrets`,
		`proxops.yaml:14:19: notifications.overrides.lab.providers[0]: no provider named "nobody"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
}
