package secrets_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/secrets"
)

func TestResolvePVECredentialsPrecedence(t *testing.T) {
	store := decryptFixture(t, "valid.sops.yaml")
	const sopsToken = "bdada1ed-2934-4ec1-8628-42f4fdc982d3"
	global := secrets.PVECredentials{
		User:       secrets.New("root@pam"),
		TokenID:    secrets.New("global-id"),
		Token:      secrets.New("global-token-6f0e5d4c"),
		TokenValue: secrets.New("root@pam!shared=shared-token-0a9b8c7d"),
		Password:   secrets.New("global-password-5e4d3c"),
	}
	allRefs := secrets.PVESecretRefs{User: "proxops-user", TokenID: "proxops-token-id", Token: "proxops-token"}
	env := map[string]string{
		secrets.EnvPVEUser:       "env@pam",
		secrets.EnvPVEToken:      "env-token-1b2c3d4e",
		secrets.EnvPVETokenValue: "env@pam!envtok=env-value-9f8e7d",
		secrets.EnvPVEPassword:   "env-password-7a6b5c",
	}
	type want struct {
		user, tokenID, token, tokenValue, password string
		apiID, apiSecret                           string
		sources                                    secrets.PVESources
	}
	src := func(name string) string { return "secrets." + name + " in " + labFile }
	tests := []struct {
		name string
		in   secrets.PVECredentialInput
		want want
	}{
		{
			name: "secrets file beats environment and configuration; the global token value is dropped",
			in:   secrets.PVECredentialInput{Cluster: "lab", Refs: allRefs, Store: store, Global: global, Env: env},
			want: want{user: "proxops@pve", tokenID: "proxops", token: sopsToken,
				apiID: "proxops@pve!proxops", apiSecret: sopsToken,
				sources: secrets.PVESources{User: src("proxops-user"), TokenID: src("proxops-token-id"), Token: src("proxops-token")}},
		},
		{
			name: "one credential in the secrets file still drops the global token value",
			in: secrets.PVECredentialInput{Cluster: "lab", Refs: secrets.PVESecretRefs{Token: "proxops-token"},
				Store: store, Global: global, Env: map[string]string{secrets.EnvPVETokenValue: env[secrets.EnvPVETokenValue]}},
			want: want{user: "root@pam", tokenID: "global-id", token: sopsToken,
				apiID: "root@pam!global-id", apiSecret: sopsToken,
				sources: secrets.PVESources{User: "configuration", TokenID: "configuration", Token: src("proxops-token")}},
		},
		{
			name: "environment beats configuration; the token value wins over the pair",
			in:   secrets.PVECredentialInput{Cluster: "lab", Global: global, Env: env},
			want: want{user: "env@pam", tokenID: "global-id", token: "env-token-1b2c3d4e", tokenValue: "env@pam!envtok=env-value-9f8e7d",
				apiID: "env@pam!envtok", apiSecret: "env-value-9f8e7d",
				sources: secrets.PVESources{User: "environment PROXOPS_PVE_USER", TokenID: "configuration",
					Token: "environment PROXOPS_PVE_TOKEN", TokenValue: "environment PROXOPS_PVE_TOKEN_VALUE"}},
		},
		{
			name: "configuration alone, empty environment values ignored",
			in: secrets.PVECredentialInput{Cluster: "lab", Auth: secrets.AuthToken, Global: global,
				Env: map[string]string{secrets.EnvPVEUser: "", secrets.EnvPVETokenValue: ""}},
			want: want{user: "root@pam", tokenID: "global-id", token: "global-token-6f0e5d4c",
				tokenValue: "root@pam!shared=shared-token-0a9b8c7d", apiID: "root@pam!shared", apiSecret: "shared-token-0a9b8c7d",
				sources: secrets.PVESources{User: "configuration", TokenID: "configuration", Token: "configuration", TokenValue: "configuration"}},
		},
		{
			name: "a token id that is already user@realm!name is used as it is",
			in: secrets.PVECredentialInput{Cluster: "lab", Global: secrets.PVECredentials{
				User: secrets.New("root@pam"), TokenID: secrets.New("ops@pve!ci"), Token: secrets.New("tok-3c4d5e6f7a8b")}},
			want: want{user: "root@pam", tokenID: "ops@pve!ci", token: "tok-3c4d5e6f7a8b", apiID: "ops@pve!ci", apiSecret: "tok-3c4d5e6f7a8b",
				sources: secrets.PVESources{User: "configuration", TokenID: "configuration", Token: "configuration"}},
		},
		{
			name: "ticket auth takes user and password, never a token",
			in:   secrets.PVECredentialInput{Cluster: "lab", Auth: secrets.AuthTicket, Global: global, Env: env},
			want: want{user: "env@pam", password: "env-password-7a6b5c",
				sources: secrets.PVESources{User: "environment PROXOPS_PVE_USER", Password: "environment PROXOPS_PVE_PASSWORD"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := secrets.ResolvePVECredentials(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			id, secret, _ := a.APIToken()
			got := want{user: a.User.Reveal(), tokenID: a.TokenID.Reveal(), token: a.Token.Reveal(),
				tokenValue: a.TokenValue.Reveal(), password: a.Password.Reveal(),
				apiID: id.Reveal(), apiSecret: secret.Reveal(), sources: a.Sources}
			if d := cmp.Diff(tt.want, got, cmp.AllowUnexported(want{})); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			printed := fmt.Sprintf("%v %+v %#v", a, a, a)
			for _, v := range []string{got.token, got.tokenValue, got.password, got.apiSecret} {
				if v != "" && len(v) > 8 && strings.Contains(printed, v) {
					t.Errorf("printing the credentials shows %q: %s", v, printed)
				}
			}
		})
	}
}

func TestResolvePVECredentialsFailsClosed(t *testing.T) {
	store := decryptFixture(t, "missing-entry.sops.yaml")
	full := secrets.PVECredentials{User: secrets.New("root@pam"), TokenID: secrets.New("id"),
		Token: secrets.New("global-token-6f0e5d4c"), Password: secrets.New("global-password-5e4d3c")}
	tests := []struct {
		name  string
		in    secrets.PVECredentialInput
		class secrets.Class
		want  string
	}{
		{
			name: "referenced entry missing: no fallback to the configured token",
			in: secrets.PVECredentialInput{Cluster: "lab", Store: store, Global: full,
				Refs: secrets.PVESecretRefs{User: "proxops-user", Token: "proxops-token"}},
			class: secrets.ClassMissingEntry,
			want: labFile + ": pve.clusters.lab.secrets.pve.token: secrets.proxops-token: no such entry in the secrets file; " +
				"proxops fails closed",
		},
		{
			name: "referenced entry empty",
			in: secrets.PVECredentialInput{Cluster: "lab", Store: store, Global: full,
				Refs: secrets.PVESecretRefs{TokenID: "proxops-token-id"}},
			class: secrets.ClassMissingEntry,
			want: fmt.Sprintf("%s:%d:5: pve.clusters.lab.secrets.pve.token-id: secrets.proxops-token-id: the entry is empty; "+
				"proxops fails closed", labFile, lineOf(t, "missing-entry.sops.yaml", "proxops-token-id:")),
		},
		{
			name:  "references without a secrets file",
			in:    secrets.PVECredentialInput{Cluster: "lab", Global: full, Refs: secrets.PVESecretRefs{Token: "proxops-token"}},
			class: secrets.ClassMissingEntry,
			want: "pve.clusters.lab.secrets.pve.token: secrets.proxops-token: the cluster has no secrets-file to resolve it from; " +
				"proxops fails closed",
		},
		{
			name:  "token auth without a token id",
			in:    secrets.PVECredentialInput{Cluster: "lab", Global: secrets.PVECredentials{User: full.User, Token: full.Token}},
			class: secrets.ClassNoCredentials,
			want:  "pve.clusters.lab: no effective PVE user/token after credential resolution (missing pve.token-id); proxops fails closed",
		},
		{
			name:  "token auth with nothing",
			in:    secrets.PVECredentialInput{Cluster: "edge"},
			class: secrets.ClassNoCredentials,
			want: "pve.clusters.edge: no effective PVE user/token after credential resolution (missing pve.user, pve.token-id, " +
				"pve.token); proxops fails closed",
		},
		{
			name:  "token value without a user",
			in:    secrets.PVECredentialInput{Cluster: "lab", Env: map[string]string{secrets.EnvPVETokenValue: "a@pam!t=env-value-9f8e7d"}},
			class: secrets.ClassNoCredentials,
			want:  "pve.clusters.lab: no effective PVE user/token after credential resolution (missing pve.user); proxops fails closed",
		},
		{
			name: "a token value that is not user@realm!id=secret",
			in: secrets.PVECredentialInput{Cluster: "lab", Global: secrets.PVECredentials{User: full.User,
				TokenValue: secrets.New("just-a-secret-8e7f6a5b")}},
			class: secrets.ClassNoCredentials,
			want: "pve.clusters.lab: the token value from configuration is not of the form user@realm!tokenid=secret; " +
				"proxops fails closed",
		},
		{
			name: "ticket auth without a password",
			in: secrets.PVECredentialInput{Cluster: "lab", Auth: secrets.AuthTicket,
				Global: secrets.PVECredentials{User: full.User, Token: full.Token}},
			class: secrets.ClassNoCredentials,
			want:  "pve.clusters.lab: no effective PVE user/password after credential resolution (missing pve.password); proxops fails closed",
		},
		{
			name:  "unknown auth mode",
			in:    secrets.PVECredentialInput{Cluster: "lab", Auth: "kerberos", Global: full},
			class: secrets.ClassNoCredentials,
			want:  `pve.clusters.lab: pve.auth "kerberos" is neither token nor ticket`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := secrets.ResolvePVECredentials(tt.in)
			if err == nil {
				t.Fatalf("resolved to %+v", a)
			}
			if secrets.ClassOf(err) != tt.class {
				t.Errorf("class %v, want %v", secrets.ClassOf(err), tt.class)
			}
			if tt.class == secrets.ClassNoCredentials && !errors.Is(err, secrets.ErrNoCredentials) {
				t.Error("not ErrNoCredentials")
			}
			if err.Error() != tt.want {
				t.Errorf("message\n got %s\nwant %s", err, tt.want)
			}
			for _, v := range []string{"global-token-6f0e5d4c", "global-password-5e4d3c", "env-value-9f8e7d", "just-a-secret-8e7f6a5b"} {
				if strings.Contains(err.Error(), v) {
					t.Errorf("the error shows %q", v)
				}
			}
			if !a.User.IsEmpty() || !a.Token.IsEmpty() || !a.Password.IsEmpty() {
				t.Error("credentials came back with the error")
			}
		})
	}
}

func TestPVEEnvironmentTakesOnlyTheOverrides(t *testing.T) {
	env := map[string]string{
		"PROXOPS_PVE_USER": "u@pam", "PROXOPS_PVE_TOKEN": "", "PROXOPS_PVE_PASSWORD": "p",
		"PROXOPS_GIT_TOKEN": "g", "HOME": "/root",
	}
	got := secrets.PVEEnvironment(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if d := cmp.Diff(map[string]string{"PROXOPS_PVE_USER": "u@pam", "PROXOPS_PVE_PASSWORD": "p"}, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
