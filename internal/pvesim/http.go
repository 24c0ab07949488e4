package pvesim

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/pvesim/schema"
)

// HTTP handling: routing, parameter extraction (pve-http-server AnyEvent.pm extract_params), the
// envelope (Formatter/Standard.pm), auth (AnyEvent.pm auth_handler, AccessControl.pm) and the request log.

// apiError is an error answered with a status code (PVE::Exception).
type apiError struct {
	status int
	msg    string
	errors map[string]string
}

func (e *apiError) Error() string { return e.msg }

// paramErr is raise_param_exc: 400 "Parameter verification failed." with per-parameter errors.
func paramErr(errs map[string]string) *apiError {
	return &apiError{status: 400, msg: "Parameter verification failed.\n", errors: errs}
}

// permErr is raise_perm_exc: 403 "Permission check failed (<what>)".
func permErr(what string) *apiError {
	msg := "Permission check failed"
	if what != "" {
		msg += " (" + what + ")"
	}
	return &apiError{status: 403, msg: msg + "\n"}
}

// dieErr is a plain die in handler code: HTTP 500 with the message.
func dieErr(format string, a ...any) *apiError {
	return &apiError{status: 500, msg: fmt.Sprintf(format, a...) + "\n"}
}

// call is one API request being handled.
type call struct {
	method   string
	path     string // relative to /api2/json
	template string
	schema   *schema.Method
	params   map[string]value
	user     string // authenticated principal: user@realm or user@realm!token
	isToken  bool
	total    int    // envelope "total" when non-zero
	local    string // the node whose API daemon serves the request
	upload   []byte // the file part of an upload
}

func (c *call) str(k string) string { return c.params[k].s }

func (c *call) has(k string) bool { _, ok := c.params[k]; return ok }

func (c *call) vmid() int { n, _ := strconv.Atoi(c.str("vmid")); return n }

func (c *call) isRoot() bool { return c.user == "root@pam" }

// Hook inspects each API request before the simulator handles it (after auth, before validation).
// Returning a non-nil Fault answers the request with it instead; a Fault with only Delay set delays the
// request and lets it through.
type Hook func(RequestInfo) *Fault

// RequestInfo describes a request to hooks.
type RequestInfo struct {
	Method   string
	Path     string // relative to /api2/json, e.g. /nodes/pve1/qemu
	Template string // the schema path, e.g. /nodes/{node}/qemu
	Params   map[string]string
	User     string
}

// Fault is an injected answer: status and message (and optional parameter errors), after Delay.
type Fault struct {
	Status  int
	Message string
	Errors  map[string]string
	Delay   time.Duration
}

// Use adds a request hook; hooks run in the order added.
func (s *Sim) Use(h Hook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = append(s.hooks, h)
}

// RequestLogEntry is one request as the simulator saw it.
type RequestLogEntry struct {
	Time     time.Time         `json:"time"`
	Method   string            `json:"method"`
	Path     string            `json:"path"`
	Template string            `json:"template,omitempty"`
	Params   map[string]string `json:"params,omitempty"`
	User     string            `json:"user,omitempty"`
	Status   int               `json:"status"`
	UPID     string            `json:"upid,omitempty"`
}

// secretParams are redacted in the request log: passwords, cloud-init secrets and SSH keys, token values.
var secretParams = map[string]bool{"password": true, "cipassword": true, "sshkeys": true, "ssh-public-keys": true,
	"new-password": true, "otp": true, "tfa-challenge": true, "value": true, "secret": true, "token": true}

// ServeHTTP serves /api2/json, and the test-only routes under /_sim/ (docs/simulator.md).
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, simPrefix) {
		s.serveSim(w, r)
		return
	}
	s.serveAs(w, r, "")
}

// NodeHandler returns the API as served by one node's own pveproxy. It matters only where PVE does not
// proxy a request to the node named in the path (uploads). The Sim itself serves as its first node.
func (s *Sim) NodeHandler(node string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, simPrefix) {
			s.serveSim(w, r)
			return
		}
		s.serveAs(w, r, node)
	})
}

func (s *Sim) serveAs(w http.ResponseWriter, r *http.Request, local string) {
	if local == "" {
		local = s.nodes[0].name
	}
	s.gate.enter()
	status, body, reason, hdr := s.serve(r, local)
	s.gate.leave()
	writeResponse(w, status, reason, body, hdr)
}

// Handler returns the simulator as an http.Handler.
func (s *Sim) Handler() http.Handler { return s }

const apiPrefix = "/api2/json"

func (s *Sim) serve(r *http.Request, local string) (int, []byte, string, http.Header) {
	x := &exchange{s: s, r: r, entry: RequestLogEntry{Time: time.Now(), Method: r.Method}, hdr: http.Header{}}
	pathParams, e := x.resolve(local)
	if e == nil {
		e = x.authenticate()
	}
	if e == nil {
		e = x.readParams(pathParams)
	}
	if e == nil {
		e = x.injected()
	}
	if e != nil {
		return x.finish(e.status, nil, e, 0)
	}
	data, e := x.dispatch()
	if e != nil {
		return x.finish(e.status, nil, e, 0)
	}
	return x.finish(200, data, nil, x.c.total)
}

// exchange is one request on its way through the simulator: the log entry it leaves, the headers of its
// answer, and the call a handler gets. Each step of serve returns the API error that ends the request, or
// nil to go on.
type exchange struct {
	s     *Sim
	r     *http.Request
	entry RequestLogEntry
	hdr   http.Header
	c     *call
}

// finish writes the answer's envelope and logs the request.
func (x *exchange) finish(status int, data any, e *apiError, total int) (int, []byte, string, http.Header) {
	body, reason := envelope(status, data, e, total)
	x.entry.Status = status
	if str, ok := data.(string); ok && strings.HasPrefix(str, "UPID:") {
		x.entry.UPID = str
	}
	s := x.s
	s.mu.Lock()
	s.log = append(s.log, x.entry)
	if x.entry.Template != "" {
		s.counters[x.entry.Method+" "+x.entry.Template]++
	}
	s.mu.Unlock()
	return status, body, reason, x.hdr
}

// resolve finds the API method the path and HTTP method name (HTTPServer.pm's find_handler: "Method '$method
// $path' not implemented" when there is none) and returns the path's parameters.
func (x *exchange) resolve(local string) (map[string]string, *apiError) {
	r := x.r
	raw := r.URL.EscapedPath()
	if !strings.HasPrefix(raw, "/api2/") || (!strings.HasPrefix(raw, apiPrefix+"/") && raw != apiPrefix) {
		x.entry.Path = raw
		return nil, &apiError{status: 501, msg: "no such uri"}
	}
	segs, ok := splitPath(strings.TrimPrefix(raw, apiPrefix))
	x.entry.Path = "/" + strings.Join(segs, "/")
	if !ok {
		return nil, &apiError{status: 400, msg: "invalid path"}
	}
	template, pathParams := x.s.route(segs)
	var m *schema.Method
	if template != "" {
		m = x.s.api.Method(template, r.Method)
	}
	if m == nil {
		return nil, &apiError{status: 501, msg: fmt.Sprintf("Method '%s %s' not implemented", r.Method, x.entry.Path)}
	}
	x.entry.Template = template
	x.c = &call{method: r.Method, path: x.entry.Path, template: template, schema: m, local: local}
	return pathParams, nil
}

// isUpload reports whether the request is a storage upload (multipart, authenticated by its own rules).
func (x *exchange) isUpload() bool {
	return x.c.template == "/nodes/{node}/storage/{storage}/upload" && x.r.Method == http.MethodPost
}

// authenticate checks the ticket or API token. The ticket endpoint needs none (PVE::HTTPServer
// auth_handler), but a token header sent to it is still seen, and the endpoint does not allow tokens
// (rest_handler: raise_perm_exc); nor does any method whose schema says so.
func (x *exchange) authenticate() *apiError {
	s, r, c := x.s, x.r, x.c
	if c.template == "/access/ticket" && r.Method == http.MethodPost {
		_, c.isToken = authCredentials(r)
	} else {
		user, isToken, aerr := s.authenticate(r, x.isUpload())
		if aerr != nil {
			if s.authDelay > 0 {
				time.Sleep(s.authDelay)
			}
			return aerr
		}
		c.user, c.isToken = user, isToken
		x.entry.User = user
	}
	if c.isToken && !c.schema.TokensAllowed() {
		return permErr(fmt.Sprintf("URI '%s' not available with API token, need proper ticket.\n", x.entry.Path))
	}
	return nil
}

// readParams reads the query and body parameters (or an upload's parts) and logs them redacted.
func (x *exchange) readParams(pathParams map[string]string) *apiError {
	var params map[string]value
	var perr *apiError
	if x.isUpload() {
		params, x.c.upload, perr = extractUpload(x.r, pathParams)
	} else {
		params, perr = extractParams(x.r, pathParams)
	}
	x.entry.Params = redact(params)
	if perr != nil {
		return perr
	}
	x.c.params = params
	return nil
}

// injected applies what a test or spec injects: a request fault of the spec, then the hooks in order (a
// delay, and an answer in place of the handler's).
func (x *exchange) injected() *apiError {
	s, r, c := x.s, x.r, x.c
	s.mu.Lock()
	delay, fault := s.requestFault(r.Method, c.template, c.params)
	hooks := append([]Hook(nil), s.hooks...)
	s.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	if fault != nil {
		return fault
	}
	if len(hooks) == 0 {
		return nil
	}
	info := RequestInfo{Method: r.Method, Path: x.entry.Path, Template: c.template, Params: plain(c.params), User: c.user}
	for _, h := range hooks {
		f := h(info)
		if f == nil {
			continue
		}
		if f.Delay > 0 {
			time.Sleep(f.Delay)
		}
		if f.Status != 0 {
			msg := f.Message
			if !strings.HasSuffix(msg, "\n") {
				msg += "\n"
			}
			return &apiError{status: f.Status, msg: msg, errors: f.Errors}
		}
	}
	return nil
}

// dispatch checks the parameters against the method's schema and runs its handler under the simulator's
// lock. A request for an unknown node fails as PVE's proxy does (PVE::Cluster::remote_node_ip). Only an
// *apiError returned as such sets the status: one wrapped in an "unable to create ..." message stays a 500
// carrying the whole message.
func (x *exchange) dispatch() (any, *apiError) {
	s, r, c := x.s, x.r, x.c
	kind := ""
	if strings.HasPrefix(c.template, "/nodes/{node}/qemu") {
		kind = "qemu"
	} else if strings.HasPrefix(c.template, "/nodes/{node}/lxc") {
		kind = "lxc"
	}
	if errs := validateParams(c.schema, kind, c.params); len(errs) > 0 {
		return nil, paramErr(errs)
	}
	h := handlers[r.Method+" "+c.template]
	if h == nil {
		return nil, &apiError{status: 501, msg: fmt.Sprintf("Method '%s %s' not implemented", r.Method, x.entry.Path)}
	}
	s.mu.Lock()
	if n := c.str("node"); n != "" && s.node(n) == nil && strings.HasPrefix(c.template, "/nodes/{node}") {
		s.mu.Unlock()
		return nil, dieErr("hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", n, n)
	}
	data, err := h(s, c)
	s.mu.Unlock()
	if err != nil {
		ae, ok := err.(*apiError) //nolint:errorlint // the top-level type is the handler contract, see above
		if !ok {
			ae = &apiError{status: 500, msg: err.Error()}
		}
		if ae.status == 401 && s.authDelay > 0 {
			time.Sleep(s.authDelay)
		}
		return nil, ae
	}
	if setCookie, ok := data.(ticketResult); ok {
		data = map[string]any(setCookie)
	}
	return data, nil
}

type ticketResult map[string]any

func plain(p map[string]value) map[string]string {
	out := map[string]string{}
	for k, v := range p {
		out[k] = v.s
	}
	return out
}

func redact(p map[string]value) map[string]string {
	if len(p) == 0 {
		return nil
	}
	out := plain(p)
	for k := range out {
		if secretParams[k] {
			out[k] = "**********"
		}
	}
	return out
}

// splitPath splits an escaped path into unescaped segments (an empty path is the root).
func splitPath(rel string) ([]string, bool) {
	rel = strings.Trim(rel, "/")
	if rel == "" {
		return nil, true
	}
	var out []string
	for _, seg := range strings.Split(rel, "/") {
		if seg == "" {
			continue
		}
		u, err := url.PathUnescape(seg)
		if err != nil {
			return nil, false
		}
		out = append(out, u)
	}
	return out, true
}

// route finds the schema path template matching the segments and the placeholder values.
func (s *Sim) route(segs []string) (string, map[string]string) {
	for _, rt := range s.routes {
		if len(rt.segs) != len(segs) || !rt.matches(segs) {
			continue
		}
		params := map[string]string{}
		for i, ts := range rt.segs {
			if name, ok := templateParam(ts); ok {
				params[name] = segs[i]
			}
		}
		return rt.template, params
	}
	return "", nil
}

// apiRoute is a path template of the schema split into its segments once, when the simulator is built:
// splitting every template for every request was a quarter of the simulator's time per request.
type apiRoute struct {
	template string
	segs     []string
}

// apiRoutes splits the path templates, keeping their order (the first that matches a path wins).
func apiRoutes(paths []string) []apiRoute {
	out := make([]apiRoute, 0, len(paths))
	for _, tpl := range paths {
		out = append(out, apiRoute{template: tpl, segs: strings.Split(strings.Trim(tpl, "/"), "/")})
	}
	return out
}

// matches reports whether a path of as many segments fits the template: each literal segment is equal.
func (rt apiRoute) matches(segs []string) bool {
	for i, ts := range rt.segs {
		if _, ok := templateParam(ts); !ok && ts != segs[i] {
			return false
		}
	}
	return true
}

// templateParam is the name of a template segment that is a parameter ({node}).
func templateParam(ts string) (string, bool) {
	if strings.HasPrefix(ts, "{") && strings.HasSuffix(ts, "}") {
		return ts[1 : len(ts)-1], true
	}
	return "", false
}

// extractParams merges body, query and path parameters as AnyEvent.pm extract_params does.
func extractParams(r *http.Request, pathParams map[string]string) (map[string]value, *apiError) {
	params := map[string]value{}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody { // a request without a body (most reads) has nothing to read
		var err error
		if body, err = io.ReadAll(io.LimitReader(r.Body, 64<<20)); err != nil {
			return nil, &apiError{status: 400, msg: "unable to read request body\n"}
		}
	}
	if len(bytes.TrimSpace(body)) > 0 && (r.Method == http.MethodGet || r.Method == http.MethodDelete) {
		return nil, &apiError{status: 501, msg: fmt.Sprintf("Unexpected content for method '%s'\n", r.Method)}
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if len(body) > 0 {
		if ct == "application/json" {
			var obj map[string]json.RawMessage
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.UseNumber()
			if err := dec.Decode(&obj); err != nil {
				return nil, &apiError{status: 400, msg: fmt.Sprintf("malformed JSON string: %v\n", err)}
			}
			for k, raw := range obj {
				params[k] = jsonValue(raw)
			}
		} else {
			vals, err := url.ParseQuery(string(body))
			if err != nil {
				return nil, &apiError{status: 400, msg: "unable to parse request body\n"}
			}
			for k, vs := range vals {
				params[k] = value{s: strings.Join(vs, "\x00")}
			}
		}
	}
	for k, vs := range r.URL.Query() {
		params[k] = value{s: strings.Join(vs, "\x00")}
	}
	for k, v := range pathParams {
		if old, ok := params[k]; ok && old.s != v {
			return nil, paramErr(map[string]string{k: "duplicate parameter (already defined in URI) with conflicting values!"})
		}
		params[k] = value{s: v}
	}
	for k := range params {
		if k == "_dc" { // ExtJS cache buster, dropped by the server
			delete(params, k)
		}
	}
	return params, nil
}

func jsonValue(raw json.RawMessage) value {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return value{}
	}
	switch t[0] {
	case '"':
		var s string
		_ = json.Unmarshal(t, &s)
		return value{s: s}
	case 't':
		return value{s: "1", kind: "bool"}
	case 'f':
		return value{s: "0", kind: "bool"}
	case 'n':
		return value{s: ""}
	case '[':
		return value{s: string(t), kind: "ARRAY"}
	case '{':
		return value{s: string(t), kind: "HASH"}
	}
	return value{s: string(t)}
}

// answerEnvelope is PVE's answer object; its members are in the order of their names, as PVE writes them.
type answerEnvelope struct {
	Data    any               `json:"data"`
	Errors  map[string]string `json:"errors,omitempty"`
	Message string            `json:"message,omitempty"`
	Total   int               `json:"total,omitempty"`
}

// envelope renders {"data":…} or the error form, and the reason phrase (the message's first line).
func envelope(status int, data any, e *apiError, total int) ([]byte, string) {
	out := answerEnvelope{Data: data}
	reason := http.StatusText(status)
	if e != nil {
		out.Data = nil
		msg := e.msg
		if msg == "" {
			msg = http.StatusText(status)
		}
		out.Message = msg
		out.Errors = e.errors
		reason = strings.SplitN(msg, "\n", 2)[0]
	} else if total > 0 {
		out.Total = total
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(out)
	return bytes.TrimRight(buf.Bytes(), "\n"), reason
}

// writeResponse writes the answer. Errors carry PVE's reason phrase: when the connection can be hijacked
// (HTTP/1.x) the status line is written by hand, since net/http always uses the standard phrase.
func writeResponse(w http.ResponseWriter, status int, reason string, body []byte, hdr http.Header) {
	for k, vs := range hdr {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	reason = safeReason(reason)
	if status >= 400 && reason != http.StatusText(status) {
		if hj, ok := w.(http.Hijacker); ok {
			conn, rw, err := hj.Hijack()
			if err == nil {
				defer conn.Close()
				writeRaw(rw, status, reason, w.Header(), body)
				return
			}
		}
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeRaw(rw *bufio.ReadWriter, status int, reason string, h http.Header, body []byte) {
	fmt.Fprintf(rw, "HTTP/1.1 %d %s\r\n", status, reason)
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			fmt.Fprintf(rw, "%s: %s\r\n", k, v)
		}
	}
	fmt.Fprintf(rw, "Date: %s\r\n", time.Now().UTC().Format(http.TimeFormat))
	fmt.Fprintf(rw, "Content-Length: %d\r\nConnection: close\r\n\r\n", len(body))
	_, _ = rw.Write(body)
	_ = rw.Flush()
}

// --- authentication ---

// authCredentials finds a request's ticket or API token as pve-http-server does: the PVEAuthCookie
// cookie first, then "PVEAuthCookie=" in the Authorization header, and only without a ticket the
// PVEAPIToken value of the Authorization header (hasToken reports that one was sent).
func authCredentials(r *http.Request) (ticket string, hasToken bool) {
	if c, err := r.Cookie("PVEAuthCookie"); err == nil && c.Value != "" {
		return c.Value, false
	}
	authz := r.Header.Get("Authorization")
	if strings.HasPrefix(authz, "PVEAuthCookie=") {
		if t := strings.TrimPrefix(authz, "PVEAuthCookie="); t != "" {
			return t, false
		}
	}
	_, hasToken = tokenHeader(authz)
	return "", hasToken
}

// authenticate checks a ticket (cookie PVEAuthCookie, CSRFPreventionToken header on writes) or, without
// a ticket, an API token (Authorization: PVEAPIToken=user@realm!id=secret; no CSRF check).
// A ticket upload skips the CSRF check (pve-http-server AnyEvent.pm: file uploads cannot carry the header
// from the web UI's form post).
func (s *Sim) authenticate(r *http.Request, upload bool) (string, bool, *apiError) {
	if r.Context().Value(adminRequest{}) != nil {
		return "root@pam", false, nil
	}
	ticket, hasToken := authCredentials(r)
	if hasToken {
		raw, _ := tokenHeader(r.Header.Get("Authorization"))
		val, err := url.PathUnescape(strings.TrimSpace(raw))
		if err != nil {
			val = raw
		}
		i := strings.LastIndex(val, "=")
		if i < 0 {
			return "", false, &apiError{status: 401, msg: "Authentication failed!\n"}
		}
		id, secret := val[:i], val[i+1:]
		s.mu.Lock()
		want, ok := s.tokens[id]
		s.mu.Unlock()
		if !ok || !hmac.Equal([]byte(want), []byte(secret)) {
			return "", false, &apiError{status: 401, msg: "Authentication failed!\n"}
		}
		return id, true, nil
	}
	if ticket == "" {
		return "", false, &apiError{status: 401, msg: "No ticket\n"}
	}
	if u, err := url.PathUnescape(ticket); err == nil { // uri_unescape: "+" stays "+"
		ticket = u
	}
	user, ok := s.verifyTicket(ticket)
	if !ok {
		return "", false, &apiError{status: 401, msg: "No ticket\n"}
	}
	if r.Method != http.MethodGet && !upload {
		if !s.verifyCSRF(r.Header.Get("CSRFPreventionToken"), user) {
			return "", false, &apiError{status: 401, msg: "Permission denied - invalid csrf token\n"}
		}
	}
	return user, false, nil
}

const ticketLifetime = 2 * time.Hour

func (s *Sim) sign(data string) string {
	mac := hmac.New(sha256.New, s.ticketKey)
	mac.Write([]byte(data))
	return base64.RawStdEncoding.EncodeToString(mac.Sum(nil))
}

// makeTicket builds "PVE:<user>:<8 hex ts>::<sig>" (pve-common Ticket.pm; the signature here is an
// HMAC, not RSA) and the CSRF token "<8 HEX ts>:<hmac>".
func (s *Sim) makeTicket(user string, now time.Time) (string, string) {
	ts := fmt.Sprintf("%08X", now.Unix())
	data := "PVE:" + url.PathEscape(user) + ":" + ts
	ticket := data + "::" + s.sign(data)
	csrf := ts + ":" + s.sign("csrf:"+ts+":"+user)
	return ticket, csrf
}

func (s *Sim) verifyTicket(ticket string) (string, bool) {
	i := strings.Index(ticket, "::")
	if i < 0 {
		return "", false
	}
	data, sig := ticket[:i], ticket[i+2:]
	if !hmac.Equal([]byte(s.sign(data)), []byte(sig)) {
		return "", false
	}
	parts := strings.Split(data, ":")
	if len(parts) != 3 || parts[0] != "PVE" {
		return "", false
	}
	ts, err := strconv.ParseInt(parts[2], 16, 64)
	if err != nil || time.Since(time.Unix(ts, 0)) > ticketLifetime {
		return "", false
	}
	user, err := url.PathUnescape(parts[1])
	if err != nil {
		return "", false
	}
	return user, true
}

func (s *Sim) verifyCSRF(token, user string) bool {
	i := strings.Index(token, ":")
	if i < 0 {
		return false
	}
	ts := token[:i]
	t, err := strconv.ParseInt(ts, 16, 64)
	if err != nil || time.Since(time.Unix(t, 0)) > ticketLifetime {
		return false
	}
	return hmac.Equal([]byte(s.sign("csrf:"+ts+":"+user)), []byte(token[i+1:]))
}

// handleTicket is POST /access/ticket (pve-access-control API2/AccessControl.pm create_ticket).
func (s *Sim) handleTicket(c *call) (any, error) {
	user := c.str("username")
	if realm := c.str("realm"); realm != "" && !strings.Contains(user, "@") {
		user += "@" + realm
	}
	pw := c.str("password")
	ok := false
	if want, found := s.users[user]; found && hmac.Equal([]byte(want), []byte(pw)) {
		ok = true
	} else if u, valid := s.verifyTicket(pw); valid && u == user {
		ok = true // ticket renewal
	}
	if !ok {
		return nil, &apiError{status: 401, msg: "authentication failure\n"}
	}
	ticket, csrf := s.makeTicket(user, time.Now())
	return map[string]any{
		"username": user, "ticket": ticket, "CSRFPreventionToken": csrf, "clustername": s.clusterName,
		"cap": map[string]any{"vms": map[string]int{"VM.Allocate": 1}, "storage": map[string]int{"Datastore.Allocate": 1}},
	}, nil
}
