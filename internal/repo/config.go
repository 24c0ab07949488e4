package repo

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/yamldecode"
)

// Config is the process-wide configuration (proxops.yaml), with built-in defaults for every key not set.
type Config struct {
	Log       LogConfig       `yaml:"log"`
	PVE       PVEConfig       `yaml:"pve"`
	Git       GitConfig       `yaml:"git"`
	Reconcile ReconcileConfig `yaml:"reconcile"`
	Executor  ExecutorConfig  `yaml:"executor"`
	Webhook   WebhookConfig   `yaml:"webhook"`
	NATS      NATSConfig      `yaml:"nats"`
	// Notifications says who is told of failed runs, rejected and held plans, corrected drift, security
	// warnings and recoveries.
	Notifications NotificationsConfig `yaml:"notifications"`
	// Listen is the HTTP address of /healthz, /metrics and /status.
	Listen string `yaml:"listen"`
	// DataDir holds caches and local state; ~ is expanded by the command that uses it.
	DataDir string `yaml:"data-dir"`

	// File is the file the configuration was read from ("" for defaults only).
	File string `yaml:"-"`
	// Positions holds the position of every key that was set, by dotted path; a key absent here kept its
	// default.
	Positions yamldecode.Positions `yaml:"-"`
}

// LogConfig is the log section.
type LogConfig struct {
	// Level is debug, info, warn (or warning) or error.
	Level string `yaml:"level"`
}

// PVEConfig is the pve section: bootstrap credentials and, in a standalone configuration, the clusters.
type PVEConfig struct {
	// Auth is token or ticket.
	Auth       string `yaml:"auth"`
	User       string `yaml:"user,omitempty"`
	TokenID    string `yaml:"token-id,omitempty"`
	Token      string `yaml:"token,omitempty"`
	TokenValue string `yaml:"token-value,omitempty"`
	Password   string `yaml:"password,omitempty"`
	CAFile     string `yaml:"ca-file,omitempty"`
	// Clusters declared inline, by name. Iterate with ClusterNames for a stable order.
	Clusters map[string]*ClusterConfig `yaml:"clusters,omitempty"`
}

// GitConfig is the git section.
type GitConfig struct {
	URL    string `yaml:"url,omitempty"`
	Branch string `yaml:"branch"`
	Token  string `yaml:"token,omitempty"`
	// Path is a local work tree; "." means the nearest .git ancestor of the configuration file.
	Path string `yaml:"path,omitempty"`
}

// ReconcileConfig is the reconcile section.
type ReconcileConfig struct {
	PollInterval time.Duration `yaml:"poll-interval"`
	TaskTimeout  time.Duration `yaml:"task-timeout"`
	// PruneBudget caps deletions per plan and cluster; 0 means unlimited.
	PruneBudget   int           `yaml:"prune-budget"`
	DriftInterval time.Duration `yaml:"drift-interval"`
	// Restart is auto (restart a guest to apply pending changes) or never.
	Restart         string        `yaml:"restart"`
	ShutdownTimeout time.Duration `yaml:"shutdown-timeout"`
	// LockWait is how long an operation waits on a guest locked by a long PVE job.
	LockWait time.Duration `yaml:"lock-wait"`
	// Migrate is how a guest whose spec.node changes moves: online, offline or never.
	Migrate string `yaml:"migrate"`
	// MaxMigrations is how many guests of a cluster one plan may move before it waits for confirmation.
	MaxMigrations int `yaml:"max-migrations"`
	// MigrationConcurrency is how many migrations of a cluster run at once.
	MigrationConcurrency int `yaml:"migration-concurrency"`
	// Snapshots is when to take a safety snapshot before a change: disruptive, always or never.
	Snapshots string `yaml:"snapshots"`
	// Rollback is what a failed protected change does: on-failure (roll back to the snapshot) or never.
	Rollback string `yaml:"rollback"`
	// SnapshotRetention is how long ProxOps keeps its snapshot of a guest after a later plan converged it;
	// SnapshotKeep caps its snapshots per guest.
	SnapshotRetention time.Duration `yaml:"snapshot-retention"`
	SnapshotKeep      int           `yaml:"snapshot-keep"`
}

// ExecutorConfig is the executor section.
type ExecutorConfig struct {
	// Concurrency is the number of operations run at once per node.
	Concurrency int `yaml:"concurrency"`
	// StorageConcurrency is the number of clones or downloads run at once per storage.
	StorageConcurrency int `yaml:"storage-concurrency"`
}

// WebhookConfig is the webhook section.
type WebhookConfig struct {
	Listen string `yaml:"listen,omitempty"`
	// SecretEnv names the environment variable holding the shared secret.
	SecretEnv string `yaml:"secret-env,omitempty"`
}

// NATSConfig is the nats section.
type NATSConfig struct {
	URL   string `yaml:"url,omitempty"`
	Creds string `yaml:"creds,omitempty"`
}

// NotificationsConfig is the notifications section.
type NotificationsConfig struct {
	// SecretsFile is a SOPS file holding the providers' secrets (URLs with tokens, passwords, signing
	// keys); a relative path is relative to the configuration file's directory.
	SecretsFile string `yaml:"secrets-file,omitempty"`
	// ExternalURL is where people reach the status page (http(s)://host[:port][/path]); messages link it.
	ExternalURL string `yaml:"external-url,omitempty"`
	// Providers are the destinations, each with its own filters.
	Providers []NotificationProvider `yaml:"providers,omitempty"`
	// Overrides say, per cluster, which providers and events apply to it.
	Overrides map[string]*NotificationOverride `yaml:"overrides,omitempty"`
}

// NotificationProvider is one destination of notifications.
type NotificationProvider struct {
	// Name identifies the provider in metrics, logs and overrides.
	Name string `yaml:"name"`
	// Type is webhook, slack, mattermost, matrix, ntfy, gotify, discord, teams, smtp or alertmanager.
	Type string `yaml:"type"`
	// URL is the endpoint (for smtp: smtp://host:port); URLRef names a secret holding it instead, for
	// URLs that carry a token (Slack, Discord, Teams).
	URL    string `yaml:"url,omitempty"`
	URLRef string `yaml:"url-ref,omitempty"`
	// TokenRef names the secret of the provider's credential: the webhook's HMAC key, the Matrix access
	// token, the Gotify application token, the ntfy or Alertmanager bearer token, the SMTP password.
	TokenRef string `yaml:"token-ref,omitempty"`
	// Username is the SMTP user.
	Username string `yaml:"username,omitempty"`
	// Room is the Matrix room id.
	Room string `yaml:"room,omitempty"`
	// From and To are the e-mail sender and recipients.
	From string   `yaml:"from,omitempty"`
	To   []string `yaml:"to,omitempty"`
	// Clusters and Events filter what the provider receives; empty means all.
	Clusters []string `yaml:"clusters,omitempty"`
	Events   []string `yaml:"events,omitempty"`
	// RateLimit bounds the messages sent to the provider per minute (0: no limit); what exceeds it is
	// dropped and counted.
	RateLimit int `yaml:"rate-limit,omitempty"`
}

// NotificationOverride is a cluster's notifications.overrides.<name> entry.
type NotificationOverride struct {
	// Providers, when set, are the only providers the cluster's notifications go to.
	Providers []string `yaml:"providers,omitempty"`
	// Events, when set, are the only events notified for the cluster.
	Events []string `yaml:"events,omitempty"`
	// Mute silences the cluster.
	Mute bool `yaml:"mute,omitempty"`
}

// Notification events.
const (
	NotifyRunFailed       = "run-failed"
	NotifyPlanRejected    = "plan-rejected"
	NotifyPlanHeld        = "plan-held"
	NotifyDriftCorrected  = "drift-corrected"
	NotifySecurityWarning = "security-warning"
	NotifyRecovered       = "recovered"
)

// NotificationEvents lists every notification event in a fixed order.
var NotificationEvents = []string{NotifyRunFailed, NotifyPlanRejected, NotifyPlanHeld, NotifyDriftCorrected, NotifySecurityWarning, NotifyRecovered}

// NotificationTypes lists every provider type.
var NotificationTypes = []string{"webhook", "slack", "mattermost", "matrix", "ntfy", "gotify", "discord", "teams", "smtp", "alertmanager"}

// ClusterConfig is one PVE cluster: pve.clusters.<name>.
type ClusterConfig struct {
	// Name is the key of the entry.
	Name string `yaml:"-"`
	// BaseURL is the API endpoint, http(s)://host[:port].
	BaseURL string `yaml:"base-url"`
	// Nodes is the allowlist; empty allows every node.
	Nodes []string `yaml:"nodes,omitempty"`
	// SecretsFile is a SOPS file; a relative path is relative to the configuration file's directory.
	SecretsFile string          `yaml:"secrets-file,omitempty"`
	Secrets     *ClusterSecrets `yaml:"secrets,omitempty"`
	// Insecure skips TLS verification.
	Insecure *bool `yaml:"insecure,omitempty"`
	// InsecureHTTP accepts an http:// base-url to a host that is not a loopback address: the API token then
	// travels in clear text, and every plan says so.
	InsecureHTTP *bool `yaml:"insecure-http,omitempty"`
	// CAFile is a PEM CA bundle for this cluster's endpoint.
	CAFile string `yaml:"ca-file,omitempty"`
	// Suspend stops planning and applying for this cluster.
	Suspend *bool `yaml:"suspend,omitempty"`
	// PruneBudget overrides reconcile.prune-budget for this cluster.
	PruneBudget *int `yaml:"prune-budget,omitempty"`
	// Snapshots overrides reconcile.snapshots for this cluster.
	Snapshots string `yaml:"snapshots,omitempty"`
	// Firewall is the cluster's own (datacenter) firewall, managed only with manage-cluster: true.
	Firewall *ClusterFirewall `yaml:"firewall,omitempty"`

	// File is the file that declares the entry; Pos the position of its key; Positions those of every key
	// of that file (paths start at pve.clusters.<name>).
	File      string               `yaml:"-"`
	Pos       yamldecode.Pos       `yaml:"-"`
	Positions yamldecode.Positions `yaml:"-"`
}

// ClusterSecrets names the keys of the SOPS document's secrets map that hold credentials.
type ClusterSecrets struct {
	PVE PVESecretRefs `yaml:"pve"`
	Git GitSecretRefs `yaml:"git"`
}

// PVESecretRefs names the SOPS keys of the PVE credentials.
type PVESecretRefs struct {
	User     string `yaml:"user,omitempty"`
	TokenID  string `yaml:"token-id,omitempty"`
	Token    string `yaml:"token,omitempty"`
	Password string `yaml:"password,omitempty"`
}

// GitSecretRefs names the SOPS key of the git token.
type GitSecretRefs struct {
	Token string `yaml:"token,omitempty"`
}

// DefaultConfig returns the built-in defaults.
func DefaultConfig() *Config {
	return &Config{
		Log: LogConfig{Level: "info"},
		PVE: PVEConfig{Auth: "token"},
		Git: GitConfig{Branch: "main"},
		Reconcile: ReconcileConfig{
			PollInterval:    30 * time.Second,
			TaskTimeout:     30 * time.Minute,
			PruneBudget:     3,
			DriftInterval:   5 * time.Minute,
			Restart:         "auto",
			ShutdownTimeout: 60 * time.Second,
			LockWait:        2 * time.Hour,

			Migrate:              "online",
			MaxMigrations:        5,
			MigrationConcurrency: 2,
			Snapshots:            "disruptive",
			Rollback:             "never",
			SnapshotRetention:    24 * time.Hour,
			SnapshotKeep:         3,
		},
		Executor:  ExecutorConfig{Concurrency: 4, StorageConcurrency: 1},
		Listen:    "127.0.0.1:9494",
		DataDir:   "~/.local/share/proxops",
		Positions: yamldecode.Positions{},
	}
}

// ClusterNames returns the names of the inline clusters, sorted.
func (c *Config) ClusterNames() []string {
	names := make([]string, 0, len(c.PVE.Clusters))
	for n := range c.PVE.Clusters {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// PruneBudget is a cluster's effective prune budget (0 = unlimited).
func (c *Config) PruneBudget(cl *ClusterConfig) int {
	if cl != nil && cl.PruneBudget != nil {
		return *cl.PruneBudget
	}
	return c.Reconcile.PruneBudget
}

// SecretsPath is the slash-separated path of the cluster's SOPS file: relative paths are joined to the
// directory of the file that declares the cluster. It is "" when there is none.
func (c *ClusterConfig) SecretsPath() string {
	if c.SecretsFile == "" || path.IsAbs(c.SecretsFile) || strings.HasPrefix(c.SecretsFile, "~") {
		return c.SecretsFile
	}
	return path.Join(path.Dir(c.File), c.SecretsFile)
}

// HasSecretRefs reports whether any credential is taken from the SOPS file.
func (c *ClusterConfig) HasSecretRefs() bool {
	s := c.Secrets
	return s != nil && (s.PVE.User != "" || s.PVE.TokenID != "" || s.PVE.Token != "" || s.PVE.Password != "" || s.Git.Token != "")
}

var (
	clusterNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	nodeNameRE    = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$`)
	envNameRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ValidClusterName reports whether a name can name a cluster (and its clusters/<name> directory).
func ValidClusterName(name string) bool {
	return len(name) <= 64 && clusterNameRE.MatchString(name)
}

// ParseConfigFile reads a standalone configuration file: a process configuration with inline pve.clusters,
// or a cluster-local file. Every key is checked, process-wide and per cluster.
func ParseConfigFile(file string, data []byte) (*Config, diag.List) {
	cfg, diags := decodeConfig(file, data)
	diags = append(diags, validateProcess(cfg)...)
	for _, name := range cfg.ClusterNames() {
		diags = append(diags, validateCluster(cfg.PVE.Clusters[name])...)
	}
	return cfg, diags
}

// decodeConfig decodes a configuration file over the defaults, without checking values.
func decodeConfig(file string, data []byte) (*Config, diag.List) {
	cfg := DefaultConfig()
	cfg.File = file
	root, diags := oneDocument(file, data, "a configuration file")
	if root == nil {
		return cfg, diags
	}
	d := yamldecode.NewDecoder(file)
	d.Positions[""] = yamldecode.Of(root)
	if root.Kind != yaml.MappingNode {
		d.Errorf(yamldecode.Of(root), "", "expected a mapping of configuration keys, got %s", yamldecode.Shape(root))
		return cfg, append(diags, d.Diags...)
	}
	d.Decode(root, "", cfg)
	for _, name := range cfg.ClusterNames() {
		cl := cfg.PVE.Clusters[name]
		if cl == nil {
			cl = &ClusterConfig{}
			cfg.PVE.Clusters[name] = cl
		}
		cl.Name, cl.File = name, file
		cl.Pos = d.Positions.Lookup("pve.clusters." + name)
		cl.Positions = d.Positions
	}
	cfg.Positions = d.Positions
	return cfg, append(diags, d.Diags...)
}

// configChecker positions diagnostics about a configuration file.
type configChecker struct {
	file  string
	pos   yamldecode.Positions
	diags diag.List
}

func (c *configChecker) errorf(field, format string, args ...any) {
	c.add(diag.Error, field, fmt.Sprintf(format, args...))
}

func (c *configChecker) warnf(field, format string, args ...any) {
	c.add(diag.Warning, field, fmt.Sprintf(format, args...))
}

func (c *configChecker) add(sev diag.Severity, field, msg string) {
	p := c.pos.Lookup(field)
	if p.Line == 0 {
		p = yamldecode.Pos{Line: 1, Column: 1}
	}
	c.diags = append(c.diags, diag.Diagnostic{Severity: sev, File: c.file, Line: p.Line, Column: p.Column, Field: field, Message: msg})
}

func (c *configChecker) enum(field, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		c.errorf(field, "invalid value %s (want %s)", diag.Excerpt(v), strings.Join(allowed, "|"))
	}
}

func (c *configChecker) positive(field string, d time.Duration) {
	if d <= 0 {
		c.errorf(field, "must be greater than zero")
	}
}

func (c *configChecker) listen(field, v string) {
	if _, _, err := net.SplitHostPort(v); err != nil {
		c.errorf(field, "invalid address %s (want host:port, e.g. 127.0.0.1:9494)", diag.Excerpt(v))
	}
}

// validateProcess checks the process-wide keys.
func validateProcess(cfg *Config) diag.List {
	c := &configChecker{file: cfg.File, pos: cfg.Positions}
	c.enum("log.level", cfg.Log.Level, "debug", "info", "warn", "warning", "error")
	c.enum("pve.auth", cfg.PVE.Auth, "token", "ticket")
	if cfg.PVE.Auth == "token" && cfg.PVE.Password != "" {
		c.errorf("pve.password", "must be empty with pve.auth: token (a password is for ticket authentication)")
	}
	if cfg.Git.URL != "" && cfg.Git.Path != "" {
		c.errorf("git.path", "git.url and git.path cannot both be set")
	}
	if cfg.Git.URL != "" {
		if u, err := url.Parse(cfg.Git.URL); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			c.errorf("git.url", "invalid URL %s (want https://host/path)", diag.Excerpt(cfg.Git.URL))
		} else if u.User != nil {
			c.errorf("git.url", "must not carry credentials; use git.token or PROXOPS_GIT_TOKEN")
		}
	}
	if cfg.Git.Branch == "" {
		c.errorf("git.branch", "must not be empty")
	}
	r := cfg.Reconcile
	c.positive("reconcile.poll-interval", r.PollInterval)
	c.positive("reconcile.task-timeout", r.TaskTimeout)
	c.positive("reconcile.drift-interval", r.DriftInterval)
	c.positive("reconcile.shutdown-timeout", r.ShutdownTimeout)
	c.positive("reconcile.lock-wait", r.LockWait)
	if r.PruneBudget < 0 {
		c.errorf("reconcile.prune-budget", "must not be negative (0 means unlimited)")
	}
	c.enum("reconcile.restart", r.Restart, "auto", "never")
	c.enum("reconcile.migrate", r.Migrate, "online", "offline", "never")
	if r.MaxMigrations < 0 {
		c.errorf("reconcile.max-migrations", "must not be negative (0 means no limit)")
	}
	if r.MigrationConcurrency < 1 {
		c.errorf("reconcile.migration-concurrency", "must be at least 1")
	}
	c.enum("reconcile.snapshots", r.Snapshots, "disruptive", "always", "never")
	c.enum("reconcile.rollback", r.Rollback, "on-failure", "never")
	c.positive("reconcile.snapshot-retention", r.SnapshotRetention)
	if r.SnapshotKeep < 1 {
		c.errorf("reconcile.snapshot-keep", "must be at least 1")
	}
	if cfg.Executor.Concurrency < 1 {
		c.errorf("executor.concurrency", "must be at least 1")
	}
	if cfg.Executor.StorageConcurrency < 1 {
		c.errorf("executor.storage-concurrency", "must be at least 1")
	}
	c.listen("listen", cfg.Listen)
	if cfg.Webhook.Listen != "" {
		c.listen("webhook.listen", cfg.Webhook.Listen)
	}
	if cfg.Webhook.SecretEnv != "" && !envNameRE.MatchString(cfg.Webhook.SecretEnv) {
		c.errorf("webhook.secret-env", "invalid environment variable name %s", diag.Excerpt(cfg.Webhook.SecretEnv))
	}
	if cfg.Webhook.Listen != "" && cfg.Webhook.SecretEnv == "" {
		c.errorf("webhook.secret-env", "required when webhook.listen is set: unsigned webhooks are refused")
	}
	if cfg.NATS.URL != "" {
		for _, s := range strings.Split(cfg.NATS.URL, ",") {
			if u, err := url.Parse(strings.TrimSpace(s)); err != nil || u.Scheme == "" || u.Host == "" {
				c.errorf("nats.url", "invalid server URL %s (want nats://host:port)", diag.Excerpt(strings.TrimSpace(s)))
			}
		}
	}
	if cfg.DataDir == "" {
		c.errorf("data-dir", "must not be empty")
	}
	validateNotifications(c, cfg.Notifications)
	return c.diags
}

// validateNotifications checks the notifications section.
func validateNotifications(c *configChecker, n NotificationsConfig) {
	if n.ExternalURL != "" {
		if u, err := url.Parse(n.ExternalURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			c.errorf("notifications.external-url", "invalid URL %s (want http(s)://host[:port][/path])", diag.Excerpt(n.ExternalURL))
		}
	}
	names := map[string]bool{}
	needsSecrets := false
	for i, p := range n.Providers {
		at := yamldecode.Index("notifications.providers", i)
		switch {
		case p.Name == "":
			c.errorf(at+".name", "required")
		case !clusterNameRE.MatchString(p.Name):
			c.errorf(at+".name", "invalid name %s (lower-case letters, digits and hyphens)", diag.Excerpt(p.Name))
		case names[p.Name]:
			c.errorf(at+".name", "provider %s is declared twice", p.Name)
		}
		names[p.Name] = true
		c.enum(at+".type", p.Type, NotificationTypes...)
		switch {
		case p.URL == "" && p.URLRef == "":
			c.errorf(at+".url", "required (or url-ref naming a secret that holds it)")
		case p.URL != "" && p.URLRef != "":
			c.errorf(at+".url-ref", "url and url-ref cannot both be set")
		case p.URL != "":
			want := []string{"http", "https"}
			if p.Type == "smtp" {
				want = []string{"smtp", "smtps"}
			}
			if u, err := url.Parse(p.URL); err != nil || !slices.Contains(want, u.Scheme) || u.Host == "" {
				c.errorf(at+".url", "invalid URL %s (want %s://host...)", diag.Excerpt(p.URL), strings.Join(want, " or "))
			} else if u.User != nil {
				c.errorf(at+".url", "must not carry credentials; name a secret with token-ref")
			}
		}
		needsSecrets = needsSecrets || p.URLRef != "" || p.TokenRef != ""
		if p.Type == "matrix" && (p.Room == "" || p.TokenRef == "") {
			c.errorf(at+".room", "matrix needs room and token-ref (the access token)")
		}
		if p.Type == "gotify" && p.TokenRef == "" {
			c.errorf(at+".token-ref", "gotify needs token-ref (the application token)")
		}
		if p.Type == "smtp" && (p.From == "" || len(p.To) == 0) {
			c.errorf(at+".to", "smtp needs from and to")
		}
		for j, ev := range p.Events {
			if !slices.Contains(NotificationEvents, ev) {
				c.errorf(yamldecode.Index(at+".events", j), "unknown event %s (want %s)", diag.Excerpt(ev), strings.Join(NotificationEvents, "|"))
			}
		}
		for j, cl := range p.Clusters {
			if !ValidClusterName(cl) {
				c.errorf(yamldecode.Index(at+".clusters", j), "invalid cluster name %s", diag.Excerpt(cl))
			}
		}
		if p.RateLimit < 0 {
			c.errorf(at+".rate-limit", "must not be negative (0 means no limit)")
		}
	}
	if needsSecrets && n.SecretsFile == "" {
		c.errorf("notifications.secrets-file", "required: providers name secrets (url-ref, token-ref)")
	}
	for _, cl := range slices.Sorted(maps.Keys(n.Overrides)) {
		o := n.Overrides[cl]
		at := "notifications.overrides." + cl
		if !ValidClusterName(cl) {
			c.errorf(at, "invalid cluster name %s", diag.Excerpt(cl))
		}
		if o == nil {
			continue
		}
		for j, p := range o.Providers {
			if !names[p] {
				c.errorf(yamldecode.Index(at+".providers", j), "no provider named %s", diag.Excerpt(p))
			}
		}
		for j, ev := range o.Events {
			if !slices.Contains(NotificationEvents, ev) {
				c.errorf(yamldecode.Index(at+".events", j), "unknown event %s (want %s)", diag.Excerpt(ev), strings.Join(NotificationEvents, "|"))
			}
		}
	}
}

// ClearTextWarning is the warning of a cluster whose base-url is http:// to a host that is not a loopback
// address, accepted by insecure-http: true; validate and every plan of the cluster carry it.
const ClearTextWarning = "http:// sends the API token in clear text (insecure-http: true)"

// ClearText reports whether the cluster's API is reached over plain http:// to a host that is not a
// loopback address (which only insecure-http: true accepts).
func (cl *ClusterConfig) ClearText() bool {
	u, err := url.Parse(cl.BaseURL)
	return err == nil && u.Scheme == "http" && u.Hostname() != "" && !IsLoopbackHost(u.Hostname())
}

// IsLoopbackHost reports whether a URL's host name is localhost or a loopback address (127.0.0.0/8, ::1).
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// validPort reports whether a URL's port is absent or a number from 1 to 65535.
func validPort(port string) bool {
	if port == "" {
		return true
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == port
}

// validateCluster checks one pve.clusters entry on its own (uniqueness across clusters is checked by Load).
func validateCluster(cl *ClusterConfig) diag.List {
	p := "pve.clusters." + cl.Name
	positions := cl.Positions
	if positions == nil {
		positions = yamldecode.Positions{p: cl.Pos}
	}
	c := &configChecker{file: cl.File, pos: positions}
	if !ValidClusterName(cl.Name) {
		c.errorf(p, "invalid cluster name %s (lower-case letters, digits and hyphens, at most 64)", diag.Excerpt(cl.Name))
	}
	insecureHTTP := cl.InsecureHTTP != nil && *cl.InsecureHTTP
	switch u, err := url.Parse(cl.BaseURL); {
	case cl.BaseURL == "":
		c.errorf(p+".base-url", "required (the PVE API endpoint, e.g. https://pve.example.com:8006)")
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Hostname() == "":
		c.errorf(p+".base-url", "invalid URL %s (want http(s)://host[:port])", diag.Excerpt(cl.BaseURL))
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil || u.Fragment != "":
		c.errorf(p+".base-url", "must be just http(s)://host[:port], without a path, query or credentials")
	case !validPort(u.Port()):
		c.errorf(p+".base-url", "invalid port %s (want 1 to 65535)", diag.Excerpt(u.Port()))
	case u.Scheme == "http" && !IsLoopbackHost(u.Hostname()) && !insecureHTTP:
		c.errorf(p+".base-url", "http:// sends the API token in clear text: use https://, or set insecure-http: true to accept that")
	case u.Scheme == "http" && !IsLoopbackHost(u.Hostname()):
		c.warnf(p+".base-url", "%s", ClearTextWarning)
	case insecureHTTP && u.Scheme == "https":
		c.warnf(p+".insecure-http", "is not used: base-url is https://")
	}
	seen := map[string]bool{}
	for i, n := range cl.Nodes {
		np := yamldecode.Index(p+".nodes", i)
		switch {
		case n == "":
			c.errorf(np, "must not be empty")
		case len(n) > 64 || !nodeNameRE.MatchString(n):
			c.errorf(np, "invalid node name %s", diag.Excerpt(n))
		case seen[n]:
			c.errorf(np, "node %s is listed twice", n)
		}
		seen[n] = true
	}
	if cl.HasSecretRefs() && cl.SecretsFile == "" {
		c.errorf(p+".secrets", "names SOPS keys but secrets-file is not set")
	}
	if cl.PruneBudget != nil && *cl.PruneBudget < 0 {
		c.errorf(p+".prune-budget", "must not be negative (0 means unlimited)")
	}
	if cl.Snapshots != "" {
		c.enum(p+".snapshots", cl.Snapshots, "disruptive", "always", "never")
	}
	if cl.Insecure != nil && *cl.Insecure && cl.CAFile != "" {
		c.warnf(p+".ca-file", "is not used: insecure: true skips certificate verification")
	}
	validateClusterFirewall(c, p+".firewall", cl.Firewall)
	return c.diags
}
