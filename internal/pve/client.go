// Package pve is ProxOps' adapter to the Proxmox VE API: it observes a node (guests with every raw config
// key, storages, storage content) and applies one plan.Operation at a time, classifying every failure
// (retryable, conflict, terminal) at this boundary.
//
// It talks to PVE through the raw calls of github.com/luthermonson/go-proxmox (Get, Post, Put, Delete, Req)
// and decodes every answer itself (numbers as strings, missing fields and unknown keys are tolerated); the
// library's typed structs are never used because they drop unknown keys and fail on real values. Two
// library clients share one transport: reads retry transient failures, writes never do, so a POST that
// timed out is never re-sent blindly (a retried create or clone could run twice). Non-idempotent requests
// (create, clone, download, delete) go through a Journal the caller provides, so a crashed executor's
// successor can find the task and re-attach instead of submitting again.
package pve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/proxops/proxops/internal/clock"
	"github.com/proxops/proxops/internal/defaults"
	"github.com/proxops/proxops/internal/plan"
)

// MinVersion is the oldest PVE release the adapter accepts (async resize, download-url, message bodies).
const MinVersion = "8.0"

// Config is how to reach one PVE cluster.
type Config struct {
	// BaseURL is https://host:8006 (a trailing /api2/json is accepted).
	BaseURL string
	// TokenID (user@realm!name) and TokenSecret select API-token auth, the default.
	TokenID     string
	TokenSecret string
	// User and Password select ticket auth when no token is given.
	User     string
	Password string
	// CAFile is a PEM bundle that signs the cluster's certificate (read here; an unreadable or empty file
	// is an error). Without it the system roots are used.
	CAFile string
	// Insecure disables certificate verification; only a cluster config saying insecure: true sets it.
	Insecure bool
	// RequestTimeout bounds each HTTP request (default 30s).
	RequestTimeout time.Duration
	// ReadAttempts is how often a read is tried on transient failures (default 4: three retries, as the
	// predecessor did); writes are sent once.
	ReadAttempts int
	// ReadBackoff is the first retry window of reads (default 200ms).
	ReadBackoff time.Duration
	// ObserveConcurrency bounds the parallel per-guest reads of an observe (default 8).
	ObserveConcurrency int
	// TaskPollMin and TaskPollMax bound the backoff between task status polls (default 250ms, 5s).
	TaskPollMin time.Duration
	TaskPollMax time.Duration
	// TaskTimeout bounds one task wait (default 30m, reconcile.task-timeout).
	TaskTimeout time.Duration
	// Metrics receives request and task measurements (optional).
	Metrics Metrics
	// Transport replaces the HTTP transport (tests); TLS settings are then the caller's.
	Transport http.RoundTripper
	// MaxResponseBytes caps the body of every answer (default DefaultMaxResponseBytes, 64 MiB): a larger
	// one is a terminal error naming the request, and is never read whole.
	MaxResponseBytes int64
}

// Metrics receives the adapter's measurements; the executor feeds them to Prometheus.
type Metrics interface {
	// Request is one HTTP request: method, the API path template (/nodes/{node}/qemu/{vmid}/config), the
	// status code ("error" for transport failures) and its duration.
	Request(method, path, status string, d time.Duration)
	// Task is one finished task wait: task type, result (ok, failed, error) and duration.
	Task(taskType, result string, d time.Duration)
}

// Client is a connection to one PVE cluster. It is safe for concurrent use.
type Client struct {
	cfg       Config
	log       *slog.Logger
	read      *proxmox.Client
	write     *proxmox.Client
	principal string
	version   string

	ticketMu   sync.Mutex // serialises ticket creation
	ticket     string
	csrf       string
	ticketTime time.Time
}

// New connects to PVE: it builds the clients, logs in when ticket auth is used, reads the PVE version and
// refuses releases older than MinVersion.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Client, error) {
	defaults.Logger(&log)
	cfg = cfg.withDefaults()
	base, err := normaliseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: log}
	switch {
	case cfg.TokenID != "" || cfg.TokenSecret != "":
		if !strings.Contains(cfg.TokenID, "!") || !strings.Contains(cfg.TokenID, "@") || cfg.TokenSecret == "" {
			return nil, errors.New("pve credentials: an API token needs an id user@realm!name and a secret")
		}
		c.principal = cfg.TokenID
	case cfg.User != "" && cfg.Password != "":
		c.principal = cfg.User
	default:
		return nil, errors.New("pve credentials: need an API token (user@realm!name and secret) or a user and password")
	}
	rt := cfg.Transport
	if rt == nil {
		tr, err := newTransport(cfg)
		if err != nil {
			return nil, err
		}
		rt = tr
	}
	rt = capTransport{next: rt, max: cfg.MaxResponseBytes}
	opts := func(retry bool) []proxmox.Option {
		o := []proxmox.Option{
			// No http.Client.Timeout: with a transport of its own, net/http would start a goroutine and a
			// timer per request to enforce it. Each request's context carries RequestTimeout instead (withTimeout).
			proxmox.WithHTTPClient(&http.Client{Transport: rt}),
			proxmox.WithUserAgent("proxops"),
			proxmox.WithRequestInterceptor(c.authenticate),
		}
		if cfg.TokenID != "" {
			o = append(o, proxmox.WithAPIToken(cfg.TokenID, cfg.TokenSecret))
		}
		if retry && cfg.ReadAttempts > 1 {
			o = append(o, proxmox.WithRetry(proxmox.WithRetryMax(cfg.ReadAttempts),
				proxmox.WithRetryBackoff(cfg.ReadBackoff, 10*cfg.ReadBackoff),
				proxmox.WithRetryCondition(retryableRead)))
		}
		return o
	}
	c.read = proxmox.NewClient(base, opts(true)...)
	c.write = proxmox.NewClient(base, opts(false)...)
	if cfg.TokenID == "" {
		if err := c.login(ctx, ""); err != nil {
			return nil, err
		}
	}
	if err := c.checkVersion(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (cfg Config) withDefaults() Config {
	defaults.Positive(&cfg.RequestTimeout, 30*time.Second)
	defaults.Positive(&cfg.ReadAttempts, 4)
	defaults.Positive(&cfg.ReadBackoff, 200*time.Millisecond)
	defaults.Positive(&cfg.ObserveConcurrency, 8)
	defaults.Positive(&cfg.TaskPollMin, 250*time.Millisecond)
	if cfg.TaskPollMax < cfg.TaskPollMin {
		cfg.TaskPollMax = max(5*time.Second, cfg.TaskPollMin)
	}
	defaults.Positive(&cfg.TaskTimeout, 30*time.Minute)
	defaults.Positive(&cfg.MaxResponseBytes, DefaultMaxResponseBytes)
	return cfg
}

// normaliseBaseURL checks an http(s) URL and returns it ending in /api2/json.
func normaliseBaseURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("pve base url %q: want http(s)://host[:port]", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("pve base url %q: must not carry credentials, a query or a fragment", raw)
	}
	p := strings.TrimSuffix(u.Path, "/")
	p = strings.TrimSuffix(p, "/api2/json")
	u.Path = p + "/api2/json"
	return u.String(), nil
}

// SameEndpoint reports whether two base URLs name the same PVE API endpoint (scheme, host, port, path).
func SameEndpoint(a, b string) bool {
	na, errA := normaliseBaseURL(a)
	nb, errB := normaliseBaseURL(b)
	if errA != nil || errB != nil {
		return false
	}
	ua, _ := url.Parse(na)
	ub, _ := url.Parse(nb)
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if u.Scheme == "https" {
			return "443"
		}
		return "80"
	}
	return ua.Scheme == ub.Scheme && strings.EqualFold(ua.Hostname(), ub.Hostname()) && port(ua) == port(ub) &&
		ua.Path == ub.Path
}

// newTransport builds the HTTP transport: TLS verified against the system roots or the CA file, never
// through an environment proxy.
func newTransport(cfg Config) (*http.Transport, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("pve ca file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("pve ca file %s: no PEM certificate in it", cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	if cfg.Insecure {
		tc.InsecureSkipVerify = true //nolint:gosec // only when the cluster config says insecure: true
	}
	return &http.Transport{
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
	}, nil
}

// retryableRead decides which read answers the read client retries: transport errors, 429, 502-504 and
// PVE's proxy failures (595, 596, 599). A 500 is PVE's answer to a semantic error and is not retried here.
func retryableRead(res *http.Response, err error) bool {
	if err != nil {
		return true
	}
	switch res.StatusCode {
	case 429, 502, 503, 504, 595, 596, 599:
		return true
	}
	return false
}

// Principal is the PVE identity the adapter acts as (user@realm!token or user@realm): tasks it starts
// carry it in their UPID.
func (c *Client) Principal() string { return c.principal }

// Version is the pve-manager version read at connection.
func (c *Client) Version() string { return c.version }

func (c *Client) checkVersion(ctx context.Context) error {
	raw, err := c.get(ctx, "/version", nil, nil)
	if err != nil {
		return fmt.Errorf("read pve version: %w", err)
	}
	o, err := raw.object()
	if err != nil {
		return fmt.Errorf("read pve version: %w", err)
	}
	v := o.str("version")
	rel := o.str("release")
	if rel == "" {
		rel = v
	}
	major, minor, ok := majorMinor(rel)
	if !ok {
		return fmt.Errorf("read pve version: cannot parse %q", rel)
	}
	c.version = v
	if v == "" {
		c.version = rel
	}
	wantMajor, wantMinor, _ := majorMinor(MinVersion)
	if major < wantMajor || major == wantMajor && minor < wantMinor {
		return fmt.Errorf("pve %s is not supported: ProxOps needs PVE %s or newer", c.version, MinVersion)
	}
	c.log.Info("connected to pve", "pve_version", c.version, "principal", c.principal)
	return nil
}

func majorMinor(s string) (int, int, bool) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	maj, err1 := strconv.Atoi(parts[0])
	minor := strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	mnr, err2 := strconv.Atoi(minor)
	return maj, mnr, err1 == nil && err2 == nil
}

// ticketLifetime is how long a ticket is used before it is renewed (PVE accepts it for 2 h).
const ticketLifetime = time.Hour

// authenticate adds the ticket cookie and CSRF token to a request (ticket auth only; tokens are added by
// the library).
func (c *Client) authenticate(r *http.Request) error {
	if c.cfg.TokenID != "" || strings.HasSuffix(r.URL.Path, "/access/ticket") {
		return nil
	}
	c.ticketMu.Lock()
	ticket, csrf := c.ticket, c.csrf
	c.ticketMu.Unlock()
	r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: ticket})
	if r.Method != http.MethodGet {
		r.Header.Set("CSRFPreventionToken", csrf)
	}
	return nil
}

// login creates a ticket. It is serialised: concurrent requests that found the ticket stale wait for one
// login (PVE answers concurrent first logins badly). stale is the ticket the caller saw rejected ("" to
// force); when another goroutine has already replaced it, nothing is done.
func (c *Client) login(ctx context.Context, stale string) error {
	c.ticketMu.Lock()
	defer c.ticketMu.Unlock()
	if c.ticket != "" && c.ticket != stale && time.Since(c.ticketTime) < ticketLifetime {
		return nil
	}
	var raw json.RawMessage
	body := map[string]string{"username": c.cfg.User, "password": c.cfg.Password}
	start := time.Now()
	rctx, cancel := c.withTimeout(ctx)
	err := c.write.Post(rctx, "/access/ticket", body, &raw)
	cancel()
	c.observe(http.MethodPost, "/access/ticket", err, start)
	if err != nil {
		return fmt.Errorf("pve login as %s: %w", c.cfg.User, err)
	}
	o, err := decodeObject(raw)
	if err != nil {
		return fmt.Errorf("pve login: %w", err)
	}
	if o.str("ticket") == "" {
		return errors.New("pve login: the answer carries no ticket")
	}
	c.ticket, c.csrf, c.ticketTime = o.str("ticket"), o.str("CSRFPreventionToken"), time.Now()
	return nil
}

func (c *Client) currentTicket() (string, time.Time) {
	c.ticketMu.Lock()
	defer c.ticketMu.Unlock()
	return c.ticket, c.ticketTime
}

// request sends one API request. tmpl is the schema path with {placeholders} filled from args in order
// (each path-escaped); it also names the request in metrics. It returns the data of PVE's answer undecoded,
// for a caller that decodes it into its own types.
func (c *Client) request(ctx context.Context, write bool, method, tmpl string, args []string, query url.Values,
	body map[string]string) (json.RawMessage, error) {
	r, err := c.send(ctx, write, (*answer).undecoded, method, tmpl, args, query, body)
	return r.raw, err
}

// send is request, with the answer's data read by read: undecoded, or decoded as generic values.
func (c *Client) send(ctx context.Context, write bool, read func(*answer) (reply, error), method, tmpl string,
	args []string, query url.Values, body map[string]string) (reply, error) {
	p, err := fillPath(tmpl, args)
	if err != nil {
		return reply{}, err
	}
	if len(query) > 0 {
		p += "?" + query.Encode()
	}
	cl := c.read
	if write {
		cl = c.write
	}
	readTries := 0
	for attempt := 0; ; attempt++ {
		var ticket string
		if c.cfg.TokenID == "" {
			var issued time.Time
			ticket, issued = c.currentTicket()
			if time.Since(issued) > ticketLifetime {
				if err := c.login(ctx, ticket); err != nil {
					return reply{}, err
				}
			}
		}
		var rep reply
		var data []byte
		if body != nil {
			if data, err = json.Marshal(body); err != nil {
				return reply{}, fmt.Errorf("encode %s %s: %w", method, tmpl, err)
			}
		}
		start := time.Now()
		ans := answers.Get().(*answer)
		ans.body.Reset()
		rctx, cancel := c.withTimeout(keeping(ctx, ans))
		err := cl.Req(rctx, method, p, data, nil)
		cancel()
		if err == nil {
			rep, err = read(ans)
		}
		if ans.body.Cap() <= 1<<20 {
			answers.Put(ans) // a large buffer (a big listing) is left to the collector rather than kept
		}
		c.observe(method, tmpl, err, start)
		if err != nil && ctx.Err() == nil && isTimeout(err) {
			// The request's own timeout, not the caller's deadline: say which request went unanswered.
			err = &Error{Class: plan.ErrorRetryable, Err: fmt.Errorf("%s %s: no answer from PVE within %s (request timeout): %w",
				method, p, c.cfg.RequestTimeout, err)}
		}
		// A 401 means the request was not executed: renew the ticket once and send it again.
		if err != nil && c.cfg.TokenID == "" && statusOf(err) == http.StatusUnauthorized && attempt == 0 {
			if lerr := c.login(ctx, ticket); lerr != nil {
				return reply{}, lerr
			}
			continue
		}
		// A read answered 500 without one of PVE's semantic answers (a missing config, no such task) is
		// transient: pmxcfs busy, a node briefly out of quorum, a crashed worker. Reads have no effect, so
		// they are tried again here; once the attempts are spent the failure is retryable, never terminal.
		if err != nil && !write && transientRead(err) {
			readTries++
			if readTries < c.cfg.ReadAttempts {
				if werr := clock.Sleep(ctx, c.cfg.ReadBackoff<<min(readTries-1, 5)); werr != nil {
					return reply{}, err
				}
				continue
			}
			return rep, &Error{Class: plan.ErrorRetryable, Status: statusOf(err), Err: namedRead(method, p, err)}
		}
		if err != nil && !write {
			err = namedRead(method, p, err)
		}
		return rep, err
	}
}

// withTimeout bounds one request, its in-place retries by the read client and the reading of its answer
// included, by RequestTimeout.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.RequestTimeout)
}

// namedRead names the request a failed read was, unless its text does already (transport errors carry the
// URL): "GET /nodes/pve1/qemu: not authorized to access endpoint: 401 Authentication failed!".
func namedRead(method, path string, err error) error {
	var e *Error
	if errors.As(err, &e) || strings.Contains(err.Error(), path) {
		return err
	}
	return fmt.Errorf("%s %s: %w", method, path, err)
}

// semanticReadTexts are the 500 answers of reads that are facts, not failures: the object is not there.
var semanticReadTexts = []string{"does not exist", "no such", "not found", "not available", "not configured",
	"unable to parse", "Parameter verification failed"}

// transientRead reports whether a failed read answered 500 with something other than a semantic answer.
func transientRead(err error) bool {
	if statusOf(err) != http.StatusInternalServerError {
		return false
	}
	msg := messageOf(err)
	for _, t := range semanticReadTexts {
		if strings.Contains(msg, t) {
			return false
		}
	}
	return true
}

// isTimeout reports whether a request failed because it took too long.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func (c *Client) observe(method, tmpl string, err error, start time.Time) {
	if c.cfg.Metrics == nil {
		return
	}
	status := "200"
	if err != nil {
		if s := statusOf(err); s != 0 {
			status = strconv.Itoa(s)
		} else {
			status = "error"
		}
	}
	c.cfg.Metrics.Request(method, tmpl, status, time.Since(start))
}

// get reads: the answer's data decoded as generic values.
func (c *Client) get(ctx context.Context, tmpl string, args []string, query url.Values) (reply, error) {
	return c.send(ctx, false, (*answer).decoded, http.MethodGet, tmpl, args, query, nil)
}

// getRaw reads: the answer's data undecoded, for a caller that decodes it into its own types.
func (c *Client) getRaw(ctx context.Context, tmpl string, args []string, query url.Values) (json.RawMessage, error) {
	return c.request(ctx, false, http.MethodGet, tmpl, args, query, nil)
}

// fillPath replaces the {placeholders} of tmpl with the escaped args.
func fillPath(tmpl string, args []string) (string, error) {
	var b strings.Builder
	i := 0
	for rest := tmpl; rest != ""; {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			b.WriteString(rest)
			break
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return "", fmt.Errorf("path template %q: unclosed placeholder", tmpl)
		}
		if i >= len(args) {
			return "", fmt.Errorf("path template %q: too few arguments", tmpl)
		}
		if args[i] == "" {
			return "", fmt.Errorf("path template %q: empty argument %d", tmpl, i+1)
		}
		b.WriteString(rest[:open])
		b.WriteString(url.PathEscape(args[i]))
		i++
		rest = rest[open+end+1:]
	}
	if i != len(args) {
		return "", fmt.Errorf("path template %q: too many arguments", tmpl)
	}
	return b.String(), nil
}
