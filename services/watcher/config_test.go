package watcher

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLocationStripsCredentialsFromTheIdentity(t *testing.T) {
	cases := []struct {
		raw                            string
		kind                           locationKind
		identity, user, password, port string
	}{
		{"https://git.example.com/ops/infra.git", kindHTTP, "https://git.example.com/ops/infra.git", "", "", ""},
		{"https://bot:s3cret@git.example.com/ops/infra.git", kindHTTP, "https://git.example.com/ops/infra.git", "bot", "s3cret", ""},
		{"https://tok@git.example.com:8443/ops/infra.git?x=1#frag", kindHTTP, "https://git.example.com:8443/ops/infra.git", "tok", "", "8443"},
		{"http://127.0.0.1:3000/ops/infra.git", kindHTTP, "http://127.0.0.1:3000/ops/infra.git", "", "", "3000"},
		{"ssh://git@git.example.com:2222/ops/infra.git", kindSSH, "ssh://git.example.com:2222/ops/infra.git", "git", "", "2222"},
		{"git+ssh://deploy@git.example.com/ops/infra.git", kindSSH, "ssh://git.example.com/ops/infra.git", "deploy", "", ""},
		{"git@github.com:ops/infra.git", kindSSH, "github.com:ops/infra.git", "git", "", "22"},
		{"github.com:ops/infra.git", kindSSH, "github.com:ops/infra.git", "", "", "22"},
	}
	for _, tc := range cases {
		t.Run(tc.raw, func(t *testing.T) {
			loc, err := parseLocation(tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			got := []any{loc.kind, loc.identity, loc.user, loc.password, loc.port}
			want := []any{tc.kind, tc.identity, tc.user, tc.password, tc.port}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if strings.Contains(loc.fetchURL, "@") && loc.kind == kindHTTP {
				t.Errorf("fetch url %q carries userinfo", loc.fetchURL)
			}
		})
	}
}

func TestParseLocationErrorsNeverRepeatCredentials(t *testing.T) {
	for _, raw := range []string{
		"ftp://user:pa55word@host/repo.git",
		"git://user:pa55word@host/repo.git",
		"https://user:pa55word@host",
		"file:///srv/repo.git",
		"/srv/repo.git",
		"not a url",
	} {
		_, err := parseLocation(raw)
		if err == nil {
			t.Errorf("%q: accepted", raw)
			continue
		}
		if strings.Contains(err.Error(), "pa55word") {
			t.Errorf("%q: error %q repeats the password", raw, err)
		}
	}
}

func TestValidateRefusesUnsafeOrIncompleteConfigs(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no repository", Config{}, "set a URL or a local path"},
		{"both", Config{URL: "https://h/r.git", Path: "/r", DataDir: "/d"}, "not both"},
		{"no data dir", Config{URL: "https://h/r.git"}, "data-dir"},
		{"token over http", Config{URL: "http://h/r.git", DataDir: "/d", Token: "t"}, "plain http"},
		{"password over http", Config{URL: "http://u:p@h/r.git", DataDir: "/d"}, "plain http"},
		{"ssh without key", Config{URL: "git@h:r.git", DataDir: "/d"}, "ssh-key: required"},
		{"ssh with token", Config{URL: "git@h:r.git", DataDir: "/d", SSHKeyFile: "/k", Token: "t"}, "token: given for an ssh url"},
		{"bad branch", Config{Path: "/r", Branch: "a..b"}, "not a valid branch name"},
		{"ref as branch", Config{Path: "/r", Branch: "refs/heads/main"}, "not a valid branch name"},
		{"negative poll", Config{Path: "/r", PollInterval: -1}, "poll-interval"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	for _, ok := range []Config{
		{Path: "/r"},
		{URL: "https://h/r.git", DataDir: "/d", Token: "t"},
		{URL: "http://h/r.git", DataDir: "/d", Token: "t", Insecure: true},
		{URL: "ssh://git@h/r.git", DataDir: "/d", SSHKeyFile: "/k", Branch: "release/v1"},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

func TestBackoffDoublesUpToItsBound(t *testing.T) {
	got := []int{}
	for n := 1; n <= 7; n++ {
		got = append(got, int(backoff(n, 1, 20)))
	}
	if diff := cmp.Diff([]int{1, 2, 4, 8, 16, 20, 20}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestRedactorRemovesSecretsAndUserinfo(t *testing.T) {
	r := newRedactor(Config{URL: "https://u:urlpass@h/r.git", Token: "tok123", WebhookSecret: "hooksecret"})
	in := "fetch https://u:urlpass@h/r.git with tok123 failed; secret hooksecret; other ssh://bob@h/x"
	got := r.string(in)
	for _, leak := range []string{"urlpass", "tok123", "hooksecret", "bob@"} {
		if strings.Contains(got, leak) {
			t.Errorf("%q still holds %q", got, leak)
		}
	}
}
