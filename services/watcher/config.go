package watcher

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Defaults of Config.
const (
	DefaultBranch         = "main"
	DefaultPollInterval   = 30 * time.Second
	DefaultDriftInterval  = 5 * time.Minute
	DefaultGitTimeout     = 2 * time.Minute
	DefaultRetryMin       = time.Second
	DefaultWebhookMaxBody = 1 << 20
	// DefaultUsername is the https user sent with a token when Config.Username is empty.
	DefaultUsername = "git"
)

// Config is the watcher's configuration. Exactly one of URL and Path names the repository.
type Config struct {
	// URL of a remote repository: https://host/path (http:// only without credentials, or with Insecure),
	// ssh://[user@]host[:port]/path or [user@]host:path. Credentials in the URL are used and stripped.
	URL string
	// Path of a local repository (its work tree or its git directory). Only its committed objects are read.
	Path string
	// Branch to follow; default main.
	Branch string
	// DataDir holds the watcher's bare mirror of a remote repository, at <DataDir>/git/<hash of the URL>.
	// Required with URL.
	DataDir string

	// Username for https; default "git" when Token is set.
	Username string
	// Token (or password) for https basic authentication.
	Token string
	// CAFile is a PEM bundle trusted for https in addition to the system roots.
	CAFile string
	// Insecure skips https certificate verification, and allows a token over plain http.
	Insecure bool

	// SSHKeyFile is the private key for ssh URLs (required with ssh).
	SSHKeyFile string
	// SSHKeyPassphrase decrypts SSHKeyFile when it is encrypted.
	SSHKeyPassphrase string
	// KnownHostsFile lists the accepted ssh host keys; default $SSH_KNOWN_HOSTS, else ~/.ssh/known_hosts and
	// /etc/ssh/ssh_known_hosts. Host keys are always checked.
	KnownHostsFile string

	// PollInterval between remote ref listings; default 30s.
	PollInterval time.Duration
	// DriftInterval between re-announcements of the current commit (reconcile.drift-interval); default 5m,
	// negative turns the drift schedule off.
	DriftInterval time.Duration
	// GitTimeout bounds one remote operation (listing, fetch); default 2m.
	GitTimeout time.Duration
	// RetryMin and RetryMax bound the backoff after a failed fetch or publish: the wait doubles from RetryMin
	// (default 1s) up to RetryMax (default PollInterval).
	RetryMin, RetryMax time.Duration

	// Listen is the address of the HTTP server for webhooks, /metrics and /healthz; empty for none.
	Listen string
	// MetricsListen is the address of a second HTTP server that serves only /metrics and /healthz, so the
	// metrics stay on loopback while Listen faces the git host; empty (or equal to Listen) for none.
	MetricsListen string
	// WebhookSecret is the shared secret of the push webhooks; empty turns the webhook endpoints off.
	WebhookSecret string
	// WebhookMaxBody caps a webhook body in bytes; default 1 MiB. Larger bodies get 413.
	WebhookMaxBody int64

	// RequestsOnly makes the watcher answer ReconcileRequests that name their own stored tree, and nothing
	// else: no announcement at start, no polling, no drift schedule, and a request without a tree is
	// refused. proxops diff and apply run the watcher this way, so the snapshot they stored is the one
	// announced.
	RequestsOnly bool
}

// withDefaults returns c with every unset field at its default.
func (c Config) withDefaults() Config {
	if c.Branch == "" {
		c.Branch = DefaultBranch
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.DriftInterval == 0 {
		c.DriftInterval = DefaultDriftInterval
	}
	if c.GitTimeout == 0 {
		c.GitTimeout = DefaultGitTimeout
	}
	if c.RetryMin == 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax == 0 {
		c.RetryMax = c.PollInterval
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = c.RetryMin
	}
	if c.WebhookMaxBody == 0 {
		c.WebhookMaxBody = DefaultWebhookMaxBody
	}
	return c
}

// Validate checks the configuration (with defaults applied) without touching the network or the disk.
// Its errors never carry credentials.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	switch {
	case c.URL == "" && c.Path == "":
		errs = append(errs, errors.New("repository: set a URL or a local path"))
	case c.URL != "" && c.Path != "":
		errs = append(errs, errors.New("repository: set a URL or a local path, not both"))
	case c.URL != "":
		loc, err := parseLocation(c.URL)
		if err != nil {
			errs = append(errs, err)
			break
		}
		if c.DataDir == "" {
			errs = append(errs, errors.New("data-dir: required for a remote repository (it holds the mirror)"))
		}
		switch loc.kind {
		case kindHTTP:
			if loc.scheme == "http" && !c.Insecure && (c.Token != "" || loc.password != "") {
				errs = append(errs, errors.New("url: refusing to send a token over plain http (use https, or set insecure)"))
			}
			if c.SSHKeyFile != "" {
				errs = append(errs, errors.New("ssh-key: given for an https url"))
			}
		case kindSSH:
			if c.SSHKeyFile == "" {
				errs = append(errs, errors.New("ssh-key: required for an ssh url"))
			}
			if c.Token != "" {
				errs = append(errs, errors.New("token: given for an ssh url (ssh uses the key file)"))
			}
			if c.CAFile != "" || c.Insecure {
				errs = append(errs, errors.New("ca-file/insecure: apply to https only"))
			}
		}
	}
	if !validBranch(c.Branch) {
		errs = append(errs, fmt.Errorf("branch %q: not a valid branch name", c.Branch))
	}
	if c.PollInterval < 0 {
		errs = append(errs, fmt.Errorf("poll-interval %s: must be positive", c.PollInterval))
	}
	if c.GitTimeout < 0 {
		errs = append(errs, fmt.Errorf("git-timeout %s: must be positive", c.GitTimeout))
	}
	if c.RetryMin < 0 {
		errs = append(errs, fmt.Errorf("retry-min %s: must be positive", c.RetryMin))
	}
	if c.WebhookMaxBody < 0 {
		errs = append(errs, fmt.Errorf("webhook max body %d: must be positive", c.WebhookMaxBody))
	}
	return errors.Join(errs...)
}

// Repo returns the repository identity used in events and logs: the URL without credentials, query or
// fragment, or the absolute local path.
func (c Config) Repo() (string, error) {
	if c.Path != "" {
		abs, err := filepath.Abs(c.Path)
		if err != nil {
			return "", fmt.Errorf("repository path: %w", err)
		}
		return abs, nil
	}
	loc, err := parseLocation(c.URL)
	if err != nil {
		return "", err
	}
	return loc.identity, nil
}

type locationKind int

const (
	kindHTTP locationKind = iota + 1
	kindSSH
)

// location is a parsed remote URL. identity and fetchURL never carry credentials.
type location struct {
	kind     locationKind
	scheme   string
	identity string
	// fetchURL is what go-git dials: the identity, with the ssh user kept for ssh.
	fetchURL string
	user     string
	password string
	host     string
	port     string
}

var scpLike = regexp.MustCompile(`^(?:([^@/:\s]+)@)?([^@/:\s]+):([^\s]+)$`)

// parseLocation reads a remote URL. Its errors never repeat the URL's userinfo.
func parseLocation(raw string) (location, error) {
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			return location{}, fmt.Errorf("url %q: cannot parse", stripUserinfo(raw))
		}
		loc := location{scheme: strings.ToLower(u.Scheme), host: u.Hostname(), port: u.Port()}
		switch loc.scheme {
		case "https", "http":
			loc.kind = kindHTTP
		case "ssh", "git+ssh", "ssh+git":
			loc.kind = kindSSH
			loc.scheme = "ssh"
		case "file":
			return location{}, errors.New("url: a file:// url is a local repository: give it as the path")
		default:
			return location{}, fmt.Errorf("url %q: scheme %q is not supported (https, http or ssh)", stripUserinfo(raw), u.Scheme)
		}
		if u.Host == "" || u.Path == "" || u.Path == "/" {
			return location{}, fmt.Errorf("url %q: needs a host and a repository path", stripUserinfo(raw))
		}
		if u.User != nil {
			loc.user = u.User.Username()
			loc.password, _ = u.User.Password()
		}
		clean := url.URL{Scheme: loc.scheme, Host: u.Host, Path: u.Path}
		loc.identity = clean.String()
		loc.fetchURL = loc.identity
		return loc, nil
	}
	if m := scpLike.FindStringSubmatch(raw); m != nil && !strings.HasPrefix(m[3], "//") {
		loc := location{kind: kindSSH, scheme: "ssh", user: m[1], host: m[2], port: "22"}
		loc.identity = m[2] + ":" + m[3]
		loc.fetchURL = loc.identity
		return loc, nil
	}
	return location{}, fmt.Errorf("url %q: not an https, http or ssh url (a local repository is given as the path)", stripUserinfo(raw))
}

var userinfoInURL = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@`)

// stripUserinfo removes the userinfo of every URL in s.
func stripUserinfo(s string) string {
	return userinfoInURL.ReplaceAllString(s, "$1")
}

var branchName = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)

// validBranch accepts the branch names git accepts, less the exotic characters no one uses on a deploy
// branch.
func validBranch(b string) bool {
	if !branchName.MatchString(b) || strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") ||
		strings.HasPrefix(b, "-") || strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, ".") ||
		strings.Contains(b, "..") || strings.Contains(b, "//") || strings.HasPrefix(b, "refs/") {
		return false
	}
	for _, part := range strings.Split(b, "/") {
		if strings.HasPrefix(part, ".") {
			return false
		}
	}
	return true
}
