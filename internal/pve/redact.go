package pve

import (
	"fmt"
	"log/slog"
	"strings"
)

// redacted stands for a credential in every printed or logged form of a Config.
const redacted = "<redacted>"

// configFields is Config without its methods, for printing a redacted copy.
type configFields Config

// redacted returns the configuration with its token secret and password replaced.
func (c Config) redacted() configFields {
	r := configFields(c)
	if r.TokenSecret != "" {
		r.TokenSecret = redacted
	}
	if r.Password != "" {
		r.Password = redacted
	}
	return r
}

// String prints the configuration with its token secret and password redacted.
func (c Config) String() string { return fmt.Sprintf("%+v", c.redacted()) }

// GoString implements fmt.GoStringer (the %#v verb); credentials are redacted.
func (c Config) GoString() string {
	return strings.Replace(fmt.Sprintf("%#v", c.redacted()), "pve.configFields{", "pve.Config{", 1)
}

// Format implements fmt.Formatter, so no verb or flag prints a credential.
func (c Config) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		_, _ = fmt.Fprint(f, c.GoString())
	case verb == 'v' && f.Flag('+'):
		_, _ = fmt.Fprintf(f, "%+v", c.redacted())
	default:
		_, _ = fmt.Fprintf(f, "%v", c.redacted())
	}
}

// LogValue implements slog.LogValuer: the endpoint and the principal, the credentials redacted.
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("base_url", c.BaseURL)}
	if c.TokenID != "" || c.TokenSecret != "" {
		attrs = append(attrs, slog.String("token_id", c.TokenID), slog.String("token_secret", redactedIfSet(c.TokenSecret)))
	}
	if c.User != "" || c.Password != "" {
		attrs = append(attrs, slog.String("user", c.User), slog.String("password", redactedIfSet(c.Password)))
	}
	if c.CAFile != "" {
		attrs = append(attrs, slog.String("ca_file", c.CAFile))
	}
	if c.Insecure {
		attrs = append(attrs, slog.Bool("insecure", true))
	}
	return slog.GroupValue(attrs...)
}

func redactedIfSet(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}
