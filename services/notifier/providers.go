package notifier

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/smtp"
	"net/url"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
)

// Headers of every HTTP delivery.
const (
	// HeaderDelivery carries the delivery id (the same on every retry and redelivery).
	HeaderDelivery = "X-Proxops-Delivery"
	// HeaderEvent carries the event name.
	HeaderEvent = "X-Proxops-Event"
	// HeaderSignature carries, on a generic webhook with a key, "sha256=" and the hex HMAC-SHA256 of the
	// body under the key.
	HeaderSignature = "X-Proxops-Signature"
)

// provider is one configured destination with its secrets resolved.
type provider struct {
	cfg   repo.NotificationProvider
	url   string
	token secrets.Value
}

// permanentError is a refusal that retrying cannot fix (a 4xx other than 408 and 429, a bad address).
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Sign is the generic webhook's signature of body under key: "sha256=" and the hex HMAC-SHA256. Receivers
// compute it over the raw body and compare in constant time.
func Sign(key, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// send delivers n once.
func (p *provider) send(ctx context.Context, client *http.Client, n Notification) error {
	if p.cfg.Type == "smtp" {
		return p.sendMail(ctx, n)
	}
	method, target, body, header, err := p.request(n)
	if err != nil {
		return permanentError{err}
	}
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		// Not err itself: it quotes the URL, token included.
		return permanentError{fmt.Errorf("%s %s: the provider's url is not a valid URL", method, redactURL(target))}
	}
	req.Header = header
	req.Header.Set(HeaderDelivery, n.ID)
	req.Header.Set(HeaderEvent, n.Event)
	req.Header.Set("User-Agent", "proxops-notifier")
	res, err := client.Do(req)
	if err != nil {
		// The transport's error quotes the whole URL, and a chat webhook's token is its path.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			return fmt.Errorf("%s %s: %w", method, redactURL(target), ue.Err)
		}
		return err
	}
	defer func() { _ = res.Body.Close() }()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return nil
	}
	err = fmt.Errorf("%s %s: %s: %s", method, redactURL(target), res.Status, strings.TrimSpace(string(msg)))
	if res.StatusCode >= 400 && res.StatusCode < 500 && res.StatusCode != http.StatusRequestTimeout && res.StatusCode != http.StatusTooManyRequests {
		return permanentError{err}
	}
	return err
}

// redactURL keeps the scheme and host of a URL for logs and errors, never its path, user or query: Slack,
// Mattermost, Discord and Teams webhooks carry their token in the path, others in the query.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(invalid url)"
	}
	out := u.Scheme + "://" + u.Host
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		out += "/…"
	}
	return out
}

func jsonHeader() http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return h
}

// request renders the provider's HTTP request for n.
func (p *provider) request(n Notification) (method, target string, body []byte, header http.Header, err error) {
	text := n.Text()
	header = jsonHeader()
	marshal := func(v any) []byte {
		data, merr := json.Marshal(v)
		if merr != nil {
			err = merr
		}
		return data
	}
	switch p.cfg.Type {
	case "webhook":
		body = marshal(n)
		if !p.token.IsEmpty() {
			header.Set(HeaderSignature, Sign([]byte(p.token.Reveal()), body))
		}
		return http.MethodPost, p.url, body, header, err
	case "slack", "mattermost":
		return http.MethodPost, p.url, marshal(map[string]string{"text": text}), header, err
	case "discord":
		// Discord refuses content above 2000 characters.
		return http.MethodPost, p.url, marshal(map[string]string{"content": truncate(text, 2000)}), header, err
	case "teams":
		card := map[string]any{
			"type": "message",
			"attachments": []any{map[string]any{
				"contentType": "application/vnd.microsoft.card.adaptive",
				"content": map[string]any{
					"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
					"type":    "AdaptiveCard", "version": "1.4",
					"body": []any{
						map[string]any{"type": "TextBlock", "text": n.Title, "weight": "Bolder", "wrap": true},
						map[string]any{"type": "TextBlock", "text": strings.Join(prefixed("- ", n.Details), "\n"), "wrap": true},
					},
					"actions": teamsActions(n.URL),
				},
			}},
		}
		return http.MethodPost, p.url, marshal(card), header, err
	case "matrix":
		// The delivery id is the transaction id: Matrix itself drops a repeated transaction.
		target = strings.TrimSuffix(p.url, "/") + "/_matrix/client/v3/rooms/" + url.PathEscape(p.cfg.Room) +
			"/send/m.room.message/" + url.PathEscape(n.ID)
		header.Set("Authorization", "Bearer "+p.token.Reveal())
		return http.MethodPut, target, marshal(map[string]string{"msgtype": "m.text", "body": text}), header, err
	case "ntfy":
		header = http.Header{}
		header.Set("Content-Type", "text/plain; charset=utf-8")
		header.Set("Title", n.Title)
		header.Set("Tags", "proxops,"+n.Event)
		header.Set("Priority", map[string]string{"critical": "5", "warning": "4", "info": "3"}[n.Severity])
		if n.URL != "" {
			header.Set("Click", n.URL)
		}
		if !p.token.IsEmpty() {
			header.Set("Authorization", "Bearer "+p.token.Reveal())
		}
		return http.MethodPost, p.url, []byte(strings.Join(n.Details, "\n")), header, nil
	case "gotify":
		target = strings.TrimSuffix(p.url, "/") + "/message"
		header.Set("X-Gotify-Key", p.token.Reveal())
		prio := map[string]int{"critical": 8, "warning": 5, "info": 2}[n.Severity]
		return http.MethodPost, target, marshal(map[string]any{"title": n.Title, "message": text, "priority": prio}), header, err
	case "alertmanager":
		target = strings.TrimSuffix(p.url, "/") + "/api/v2/alerts"
		if !p.token.IsEmpty() {
			header.Set("Authorization", "Bearer "+p.token.Reveal())
		}
		alert := map[string]any{
			"labels": map[string]string{"alertname": "ProxOps" + camel(n.Event), "cluster": n.Cluster, "event": n.Event,
				"severity": n.Severity, "source": "proxops"},
			"annotations": map[string]string{"summary": n.Title, "description": strings.Join(n.Details, "\n"),
				"delivery_id": n.ID, "commit": n.Commit},
			"startsAt": n.At.UTC().Format(time.RFC3339),
			// A notification is an event, not a condition that lasts: it resolves by itself.
			"endsAt": n.At.Add(time.Hour).UTC().Format(time.RFC3339),
		}
		if n.URL != "" {
			alert["generatorURL"] = n.URL
		}
		return http.MethodPost, target, marshal([]any{alert}), header, err
	}
	return "", "", nil, nil, fmt.Errorf("unknown provider type %q", p.cfg.Type)
}

func teamsActions(link string) []any {
	if link == "" {
		return []any{}
	}
	return []any{map[string]any{"type": "Action.OpenUrl", "title": "Status", "url": link}}
}

func camel(event string) string {
	var b strings.Builder
	for _, part := range strings.Split(event, "-") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// sendMail delivers n as an e-mail over SMTP (smtp://host:port; STARTTLS when the server offers it,
// PLAIN authentication when a user is set).
func (p *provider) sendMail(ctx context.Context, n Notification) error {
	u, err := url.Parse(p.url)
	if err != nil {
		return permanentError{errors.New("the provider's smtp url is not a valid URL")}
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "25")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	c, err := smtp.NewClient(conn, u.Hostname())
	if err != nil {
		_ = conn.Close()
		return err
	}
	defer func() { _ = c.Close() }()
	if ok, _ := c.Extension("STARTTLS"); ok {
		if err := c.StartTLS(nil); err != nil {
			return err
		}
	}
	if p.cfg.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", p.cfg.Username, p.token.Reveal(), u.Hostname())); err != nil {
			return permanentError{err}
		}
	}
	if err := c.Mail(p.cfg.From); err != nil {
		return err
	}
	for _, to := range p.cfg.To {
		if err := c.Rcpt(to); err != nil {
			return err
		}
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	var msg bytes.Buffer
	fmt.Fprintf(&msg, "From: %s\r\nTo: %s\r\nSubject: %s\r\nDate: %s\r\nMessage-ID: <%s@proxops>\r\n%s: %s\r\n%s: %s\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n",
		p.cfg.From, strings.Join(p.cfg.To, ", "), headerSafe(n.Title), n.At.UTC().Format(time.RFC1123Z), headerSafe(n.ID),
		HeaderDelivery, headerSafe(n.ID), HeaderEvent, n.Event)
	for _, line := range strings.Split(n.Text(), "\n") {
		if strings.HasPrefix(line, ".") {
			line = "." + line
		}
		msg.WriteString(line + "\r\n")
	}
	if _, err := w.Write(msg.Bytes()); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}

func headerSafe(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

// isPermanent reports whether retrying err is pointless.
func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}
