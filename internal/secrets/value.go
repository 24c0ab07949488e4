package secrets

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Redacted is what every printing, marshalling and logging path of a Value shows instead of the value.
const Redacted = "<redacted>"

// Value holds one decrypted secret (a token, a password, an SSH public-key line). It never shows its content:
// fmt with any verb, errors built from it, JSON, text, YAML and slog all render Redacted. Reveal is the only
// way to read the plaintext, so every place that does is easy to find and review.
//
// The plaintext is captured by a closure, which reflection cannot look into: even fmt's printing of a struct
// holding a Value in an unexported field (where fmt cannot call the methods above), go-cmp's reports and
// other reflection-based dumpers show at most a function address. Compare Values with Equal (go-cmp does);
// reflect.DeepEqual only knows two copies of one Value to be equal. The zero Value is empty.
type Value struct {
	box *box
}

type box struct {
	reveal func() string
}

// New wraps a plaintext that did not come from a secrets file (an environment variable, a flag, a YAML value)
// so it is handled like a decrypted one.
func New(plaintext string) Value {
	if plaintext == "" {
		return Value{}
	}
	return Value{box: &box{reveal: func() string { return plaintext }}}
}

// Reveal returns the plaintext. Call it only where the value leaves the process towards its one legitimate
// consumer (the PVE API request, the cloud-init write), never to log, print or serialise it.
func (v Value) Reveal() string {
	if v.box == nil {
		return ""
	}
	return v.box.reveal()
}

// IsEmpty reports whether the value is empty. It says nothing else about the content.
func (v Value) IsEmpty() bool { return v.Reveal() == "" }

// Equal reports whether two values hold the same plaintext, in time independent of where they differ.
func (v Value) Equal(o Value) bool {
	a, b := v.Reveal(), o.Reveal()
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// String implements fmt.Stringer.
func (v Value) String() string { return Redacted }

// GoString implements fmt.GoStringer (the %#v verb).
func (v Value) GoString() string { return Redacted }

// Format implements fmt.Formatter so every verb and flag (%v %+v %#v %s %q %x %X %d ...) prints the
// redaction; %q prints it quoted.
func (v Value) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		_, _ = f.Write([]byte(strconv.Quote(Redacted)))
		return
	}
	_, _ = f.Write([]byte(Redacted))
}

// MarshalJSON implements json.Marshaler.
func (v Value) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(Redacted)), nil }

// MarshalText implements encoding.TextMarshaler.
func (v Value) MarshalText() ([]byte, error) { return []byte(Redacted), nil }

// MarshalYAML implements yaml.Marshaler.
func (v Value) MarshalYAML() (any, error) { return Redacted, nil }

// LogValue implements slog.LogValuer.
func (v Value) LogValue() slog.Value { return slog.StringValue(Redacted) }

// UnmarshalYAML implements yaml.Unmarshaler so configuration types can hold a Value directly (for example a
// global pve.token). Only a scalar is accepted; the error names the position, never the content.
func (v *Value) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d column %d: expected a single value, found a %s", n.Line, n.Column, kindName(n.Kind))
	}
	if n.Tag == "!!null" {
		*v = Value{}
		return nil
	}
	*v = New(n.Value)
	return nil
}

// Compile-time guards: the interfaces that keep a Value redacted.
var (
	_ fmt.Stringer   = Value{}
	_ fmt.GoStringer = Value{}
	_ fmt.Formatter  = Value{}
	_ slog.LogValuer = Value{}
	_ yaml.Marshaler = Value{}
)
