package watcher

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Webhook providers, the path suffix of their endpoint and the provider label of the metrics.
const (
	ProviderGitHub = "github"
	ProviderGitea  = "gitea"
	ProviderGitLab = "gitlab"
)

// WebhookPath is the path of a provider's webhook endpoint. Forgejo uses the Gitea endpoint (also served as
// /webhook/forgejo).
func WebhookPath(provider string) string { return "/webhook/" + provider }

// pushEvent is what the watcher needs from a push payload.
type pushEvent struct {
	Ref   string
	After string
	// Deleted is a push that removed the ref.
	Deleted bool
}

var errNotPush = errors.New("not a push event")

// parseGitHubPush reads a GitHub push payload (JSON).
func parseGitHubPush(body []byte) (pushEvent, error) {
	var p struct {
		Ref     string `json:"ref"`
		After   string `json:"after"`
		Deleted bool   `json:"deleted"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return pushEvent{}, fmt.Errorf("github push payload: %w", err)
	}
	return checkPush("github", p.Ref, p.After, p.Deleted)
}

// parseGiteaPush reads a Gitea or Forgejo push payload.
func parseGiteaPush(body []byte) (pushEvent, error) {
	var p struct {
		Ref   string `json:"ref"`
		After string `json:"after"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return pushEvent{}, fmt.Errorf("gitea push payload: %w", err)
	}
	return checkPush("gitea", p.Ref, p.After, false)
}

// parseGitLabPush reads a GitLab push hook payload.
func parseGitLabPush(body []byte) (pushEvent, error) {
	var p struct {
		ObjectKind string `json:"object_kind"`
		Ref        string `json:"ref"`
		After      string `json:"after"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return pushEvent{}, fmt.Errorf("gitlab push payload: %w", err)
	}
	if p.ObjectKind != "push" {
		return pushEvent{}, fmt.Errorf("gitlab payload of kind %q: %w", p.ObjectKind, errNotPush)
	}
	return checkPush("gitlab", p.Ref, p.After, false)
}

func checkPush(provider, ref, after string, deleted bool) (pushEvent, error) {
	if !strings.HasPrefix(ref, "refs/") || len(ref) > 1024 {
		return pushEvent{}, fmt.Errorf("%s push payload: ref %q: not a full ref name", provider, truncate(ref, 80))
	}
	if !isObjectID(after) {
		return pushEvent{}, fmt.Errorf("%s push payload: after %q: not a commit id", provider, truncate(after, 80))
	}
	if strings.Trim(after, "0") == "" {
		deleted = true
	}
	return pushEvent{Ref: ref, After: strings.ToLower(after), Deleted: deleted}, nil
}

// isObjectID accepts a hex SHA-1 or SHA-256 object id.
func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// verifyHMAC checks a hex HMAC-SHA256 of body in constant time.
func verifyHMAC(secret string, body []byte, sigHex string) bool {
	got, err := hex.DecodeString(strings.TrimSpace(sigHex))
	if err != nil || len(got) != sha256.Size {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hmac.Equal(mac.Sum(nil), got)
}

// verifyToken compares a shared token in constant time, its length included.
func verifyToken(secret, token string) bool {
	a := sha256.Sum256([]byte(secret))
	b := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1 && token != ""
}

// webhookProvider is one provider's view of a request: whether it is signed by the secret, what event it is,
// and its push payload.
type webhookProvider struct {
	name   string
	verify func(secret string, r *http.Request, body []byte) bool
	// event returns the request's event type and whether it is a push.
	event func(r *http.Request) (string, bool)
	parse func(r *http.Request, body []byte) (pushEvent, error)
}

var providers = map[string]webhookProvider{
	ProviderGitHub: {
		name: ProviderGitHub,
		verify: func(secret string, r *http.Request, body []byte) bool {
			sig, ok := strings.CutPrefix(r.Header.Get("X-Hub-Signature-256"), "sha256=")
			return ok && verifyHMAC(secret, body, sig)
		},
		event: func(r *http.Request) (string, bool) {
			e := r.Header.Get("X-GitHub-Event")
			return e, e == "push"
		},
		parse: func(r *http.Request, body []byte) (pushEvent, error) {
			if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "application/x-www-form-urlencoded" {
				form, err := url.ParseQuery(string(body))
				if err != nil {
					return pushEvent{}, fmt.Errorf("github push payload: form: %w", err)
				}
				body = []byte(form.Get("payload"))
			}
			return parseGitHubPush(body)
		},
	},
	ProviderGitea: {
		name: ProviderGitea,
		verify: func(secret string, r *http.Request, body []byte) bool {
			sig := r.Header.Get("X-Gitea-Signature")
			if sig == "" {
				sig = r.Header.Get("X-Forgejo-Signature")
			}
			return sig != "" && verifyHMAC(secret, body, sig)
		},
		event: func(r *http.Request) (string, bool) {
			e := r.Header.Get("X-Gitea-Event")
			if e == "" {
				e = r.Header.Get("X-Forgejo-Event")
			}
			return e, e == "push"
		},
		parse: func(_ *http.Request, body []byte) (pushEvent, error) { return parseGiteaPush(body) },
	},
	ProviderGitLab: {
		name: ProviderGitLab,
		verify: func(secret string, r *http.Request, _ []byte) bool {
			return verifyToken(secret, r.Header.Get("X-Gitlab-Token"))
		},
		event: func(r *http.Request) (string, bool) {
			e := r.Header.Get("X-Gitlab-Event")
			return e, e == "Push Hook"
		},
		parse: func(_ *http.Request, body []byte) (pushEvent, error) { return parseGitLabPush(body) },
	},
}

// webhookHandler serves one provider's endpoint. A verified push to the watched branch that was not seen
// before wakes the sync loop (202); everything else triggers nothing.
func (w *Watcher) webhookHandler(p webhookProvider) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		result, code, msg := w.serveWebhook(p, rw, r)
		w.m.webhook(p.name, result)
		level := slog.LevelDebug
		if code == http.StatusUnauthorized || code >= 500 || code == http.StatusRequestEntityTooLarge {
			level = slog.LevelWarn
		} else if code == http.StatusAccepted {
			level = slog.LevelInfo
		}
		w.log.Log(r.Context(), level, "webhook", "provider", p.name, "result", result, "status", code,
			"remote_addr", r.RemoteAddr, "detail", msg)
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		rw.WriteHeader(code)
		_, _ = io.WriteString(rw, msg+"\n")
	})
}

func (w *Watcher) serveWebhook(p webhookProvider, rw http.ResponseWriter, r *http.Request) (result string, code int, msg string) {
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		return webhookMethodNotAllowed, http.StatusMethodNotAllowed, "only POST"
	}
	limit := w.cfg.WebhookMaxBody
	if r.ContentLength > limit {
		return webhookTooLarge, http.StatusRequestEntityTooLarge, "body too large"
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return webhookTooLarge, http.StatusRequestEntityTooLarge, "body too large"
		}
		return webhookBadPayload, http.StatusBadRequest, "cannot read body"
	}
	if !p.verify(w.cfg.WebhookSecret, r, body) {
		return webhookUnauthorized, http.StatusUnauthorized, "signature missing or invalid"
	}
	event, isPush := p.event(r)
	if !isPush {
		if event == "ping" {
			return webhookIgnored, http.StatusOK, "pong"
		}
		return webhookIgnored, http.StatusOK, "event ignored: not a push"
	}
	push, err := p.parse(r, body)
	if errors.Is(err, errNotPush) {
		return webhookIgnored, http.StatusOK, "event ignored: not a push"
	}
	if err != nil {
		return webhookBadPayload, http.StatusBadRequest, err.Error()
	}
	if push.Ref != w.branchRef.String() {
		return webhookIgnored, http.StatusOK, "push to " + push.Ref + " ignored: watching " + w.branchRef.String()
	}
	if push.Deleted {
		return webhookIgnored, http.StatusOK, "branch deletion ignored: the last good tree is kept"
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	seen, _ := json.Marshal(struct {
		Provider string    `json:"provider"`
		At       time.Time `json:"at"`
	}{p.name, time.Now().UTC()})
	created, err := w.deps.KV.Create(ctx, w.pushKey(push.After), seen)
	if err != nil {
		w.log.Warn("webhook: cannot record the delivery", "provider", p.name, "err", w.red.error(err))
		return webhookError, http.StatusServiceUnavailable, "cannot record the delivery; retry later"
	}
	if !created {
		return webhookReplayed, http.StatusOK, "commit " + push.After + " already delivered: ignored"
	}
	w.wake()
	return webhookAccepted, http.StatusAccepted, "fetching " + push.After
}
