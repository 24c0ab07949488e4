package secrets

import (
	"errors"
	"fmt"
	"strings"
)

// The environment variables that override the configured PVE credentials (applied when non-empty).
const (
	EnvPVEUser       = "PROXOPS_PVE_USER"
	EnvPVEToken      = "PROXOPS_PVE_TOKEN"
	EnvPVETokenValue = "PROXOPS_PVE_TOKEN_VALUE"
	EnvPVEPassword   = "PROXOPS_PVE_PASSWORD"
)

// PVEEnvironment collects the PROXOPS_PVE_* variables through lookup (os.LookupEnv in a command's main) for
// PVECredentialInput.Env.
func PVEEnvironment(lookup func(string) (string, bool)) map[string]string {
	env := map[string]string{}
	for _, name := range []string{EnvPVEUser, EnvPVEToken, EnvPVETokenValue, EnvPVEPassword} {
		if v, ok := lookup(name); ok && v != "" {
			env[name] = v
		}
	}
	return env
}

// AuthMode is how ProxOps authenticates to PVE.
type AuthMode string

const (
	// AuthToken uses an API token: user plus token id and secret, or a composed token value.
	AuthToken AuthMode = "token"
	// AuthTicket logs in with user and password for a ticket.
	AuthTicket AuthMode = "ticket"
)

// PVESecretRefs names the entries under a secrets file's secrets: block that hold a cluster's PVE
// credentials: the cluster config's secrets.pve block. An empty name means "not taken from the file".
type PVESecretRefs struct {
	User     string
	TokenID  string
	Token    string
	Password string
}

// any reports whether any credential is taken from the secrets file.
func (r PVESecretRefs) any() bool {
	return r.User != "" || r.TokenID != "" || r.Token != "" || r.Password != ""
}

// PVECredentials are the global PVE credentials from proxops.yaml and command flags (flags already applied
// over YAML by the caller).
type PVECredentials struct {
	User    Value
	TokenID Value
	Token   Value
	// TokenValue is the composed user@realm!tokenid=secret; it wins over the pair.
	TokenValue Value
	Password   Value
}

// PVECredentialInput is everything that decides one cluster's PVE credentials.
type PVECredentialInput struct {
	// Cluster is the cluster's name (pve.clusters.<name>).
	Cluster string
	// Auth is pve.auth; empty means token.
	Auth AuthMode
	// Refs is the cluster's secrets.pve block.
	Refs PVESecretRefs
	// Store is the cluster's decrypted secrets file; nil when it has none.
	Store *Store
	// Global holds the YAML and flag values.
	Global PVECredentials
	// Env holds the PROXOPS_PVE_* variables (see PVEEnvironment); only non-empty values count.
	Env map[string]string
}

// PVEAuth is a cluster's effective PVE credentials. Only the fields its Mode uses are set.
type PVEAuth struct {
	Mode       AuthMode
	User       Value
	TokenID    Value
	Token      Value
	TokenValue Value
	Password   Value
	// Sources says where each credential came from, for logs: "secrets.<name> in <file>", "environment
	// <VAR>" or "configuration"; empty when unset.
	Sources PVESources
}

// PVESources records where each effective credential came from; it holds no secret.
type PVESources struct {
	User, TokenID, Token, TokenValue, Password string
}

// APIToken returns the full token id (user@realm!tokenid) and the token secret for the PVEAPIToken
// header, from TokenValue when set, else from User, TokenID (a bare name, or already user@realm!name) and
// Token. ok is false outside token mode.
func (a PVEAuth) APIToken() (id, secret Value, ok bool) {
	if a.Mode != AuthToken {
		return Value{}, Value{}, false
	}
	if !a.TokenValue.IsEmpty() {
		tv := a.TokenValue.Reveal()
		i := strings.LastIndexByte(tv, '=')
		return New(tv[:i]), New(tv[i+1:]), true
	}
	tid := a.TokenID.Reveal()
	if !strings.Contains(tid, "!") {
		tid = a.User.Reveal() + "!" + tid
	}
	return New(tid), a.Token, true
}

// ResolvePVECredentials applies the predecessor's precedence for one cluster and fails closed:
//
//   - each credential comes from the secrets file when the cluster's secrets.pve block names an entry for it
//     (a named entry that is missing or empty is an error, never a fallback), else from its PROXOPS_PVE_*
//     variable when set, else from the global configuration;
//   - a cluster with any credential in its secrets file ignores the global token value (YAML, flag and
//     PROXOPS_PVE_TOKEN_VALUE), so a shared token can never reach a cluster meant to use its own;
//   - token auth needs a user and either a token value or a token id and token; ticket auth needs a user and a
//     password. Otherwise the error (class ClassNoCredentials) names what is missing.
//
// It reads nothing but its input.
func ResolvePVECredentials(in PVECredentialInput) (PVEAuth, error) {
	field := "pve.clusters." + in.Cluster
	mode := in.Auth
	if mode == "" {
		mode = AuthToken
	}
	if mode != AuthToken && mode != AuthTicket {
		return PVEAuth{}, &Error{Class: ClassNoCredentials, Field: field,
			Message: fmt.Sprintf("pve.auth %s is neither token nor ticket", quoteInput(string(mode)))}
	}

	var errs []error
	pick := func(key, ref, envName string, global Value) (Value, string) {
		if ref != "" {
			v, err := in.Store.Secret(ref)
			if err != nil {
				errs = append(errs, WithField(err, field+".secrets.pve."+key))
				return Value{}, ""
			}
			return v, "secrets." + ref + " in " + in.Store.File()
		}
		if envName != "" && in.Env[envName] != "" {
			return New(in.Env[envName]), "environment " + envName
		}
		if !global.IsEmpty() {
			return global, "configuration"
		}
		return Value{}, ""
	}

	a := PVEAuth{Mode: mode}
	a.User, a.Sources.User = pick("user", in.Refs.User, EnvPVEUser, in.Global.User)
	switch mode {
	case AuthToken:
		a.TokenID, a.Sources.TokenID = pick("token-id", in.Refs.TokenID, "", in.Global.TokenID)
		a.Token, a.Sources.Token = pick("token", in.Refs.Token, EnvPVEToken, in.Global.Token)
		if !in.Refs.any() {
			a.TokenValue, a.Sources.TokenValue = pick("token-value", "", EnvPVETokenValue, in.Global.TokenValue)
		}
	case AuthTicket:
		a.Password, a.Sources.Password = pick("password", in.Refs.Password, EnvPVEPassword, in.Global.Password)
	}
	if len(errs) > 0 {
		return PVEAuth{}, errors.Join(errs...)
	}

	var missing []string
	if a.User.IsEmpty() {
		missing = append(missing, "pve.user")
	}
	what := "user/token"
	switch mode {
	case AuthToken:
		if !a.TokenValue.IsEmpty() {
			if tv := a.TokenValue.Reveal(); !validTokenValue(tv) {
				return PVEAuth{}, &Error{Class: ClassNoCredentials, Field: field, Message: fmt.Sprintf(
					"the token value from %s is not of the form user@realm!tokenid=secret; proxops fails closed",
					a.Sources.TokenValue)}
			}
			break
		}
		if a.TokenID.IsEmpty() {
			missing = append(missing, "pve.token-id")
		}
		if a.Token.IsEmpty() {
			missing = append(missing, "pve.token")
		}
	case AuthTicket:
		what = "user/password"
		if a.Password.IsEmpty() {
			missing = append(missing, "pve.password")
		}
	}
	if len(missing) > 0 {
		return PVEAuth{}, &Error{Class: ClassNoCredentials, Field: field, Message: fmt.Sprintf(
			"no effective PVE %s after credential resolution (missing %s); proxops fails closed",
			what, strings.Join(missing, ", "))}
	}
	return a, nil
}

// validTokenValue reports whether s has the form user@realm!tokenid=secret.
func validTokenValue(s string) bool {
	i := strings.LastIndexByte(s, '=')
	if i <= 0 || i == len(s)-1 {
		return false
	}
	id := s[:i]
	at, bang := strings.IndexByte(id, '@'), strings.IndexByte(id, '!')
	return at > 0 && bang > at+1 && bang < len(id)-1
}
