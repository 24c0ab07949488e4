package pve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// DefaultMaxResponseBytes caps the body of one PVE answer (64 MiB): the largest answers, a node's guest list
// or a storage's content on a big cluster, are a few MiB; anything near the cap is not PVE talking.
const DefaultMaxResponseBytes = 64 << 20

// ResponseTooLargeError is a PVE answer whose body passed the cap: the request is named, the rest of the
// body is never read.
type ResponseTooLargeError struct {
	Method, Path string
	Cap          int64
}

func (e *ResponseTooLargeError) Error() string {
	return fmt.Sprintf("%s %s: the answer's body is larger than the %s cap on PVE responses", e.Method, e.Path, byteSize(e.Cap))
}

// byteSize writes a cap as MiB or KiB when it is a whole number of them.
func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// capTransport gives every response a body that fails once more than max bytes were read from it.
type capTransport struct {
	next http.RoundTripper
	max  int64
}

func (t capTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(r)
	if err != nil || res.Body == nil {
		return res, err
	}
	tooLarge := &ResponseTooLargeError{Method: r.Method, Path: r.URL.Path, Cap: t.max}
	if res.ContentLength > t.max {
		// Announced too large: not a byte of it is read.
		_ = res.Body.Close()
		res.Body = errBody{tooLarge}
		return res, nil
	}
	res.Body = &cappedBody{body: res.Body, left: t.max, tooLarge: tooLarge}
	if a, ok := r.Context().Value(answerKey{}).(*answer); ok && res.StatusCode >= 200 && res.StatusCode <= 299 {
		// A successful answer is read here, whole, for the request to decode; the library is handed an
		// empty body, or one that fails as reading this one did. (A failed answer becomes the library's
		// *proxmox.APIError, and a retried one is drained and followed by another.)
		a.body.Reset()
		_, err := a.body.ReadFrom(res.Body)
		_ = res.Body.Close()
		res.Body = http.NoBody
		if err != nil {
			res.Body = errBody{err}
		}
	}
	return res, nil
}

// answer is the body of one successful PVE answer, read by the transport, so that the request decodes PVE's
// {"data": …} envelope once itself instead of having the library copy and decode it and encode the data for
// ProxOps to decode again.
type answer struct{ body bytes.Buffer }

type answerKey struct{}

var answers = sync.Pool{New: func() any { return new(answer) }}

// keeping returns a context whose requests keep their successful answer in a (one request at a time).
func keeping(ctx context.Context, a *answer) context.Context {
	return context.WithValue(ctx, answerKey{}, a)
}

// data returns the data member of the answer's envelope (null as nil) or, when there is none, the whole
// answer: what the library's own decoding into a json.RawMessage gives, with its errors. (A struct would
// match "Data" too: the envelope is read as a map, whose keys match exactly, as the library's do.)
func (a *answer) data() (json.RawMessage, error) {
	b := a.body.Bytes()
	var env map[string]json.RawMessage
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, err
	}
	d, ok := env["data"]
	switch {
	case !ok && !isNull(b):
		return bytes.Clone(b), nil
	case !ok, isNull(d):
		return nil, nil
	}
	return d, nil
}

// undecoded is the answer's data as it came, for a caller that decodes it into its own types.
func (a *answer) undecoded() (reply, error) {
	raw, err := a.data()
	return reply{raw: raw}, err
}

// decoded is the answer's data as generic values (numbers as json.Number), in one pass over the body, when
// the answer is one JSON object; anything else takes the undecoded way, with its errors.
func (a *answer) decoded() (reply, error) {
	if v, ok := a.value(); ok {
		return reply{v: v, decoded: true}, nil
	}
	return a.undecoded()
}

// value decodes the answer once, numbers as json.Number: the data member (nil for null) or, when there is
// none, the whole object. ok is false unless the body is one JSON object and nothing after it but white
// space, where data succeeds too.
func (a *answer) value() (any, bool) {
	b := a.body.Bytes()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var env map[string]any
	if err := dec.Decode(&env); err != nil || env == nil {
		return nil, false
	}
	for _, c := range b[dec.InputOffset():] {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return nil, false
		}
	}
	if d, ok := env["data"]; ok {
		return d, true
	}
	return env, true
}

// cappedBody reads at most left bytes, then fails with tooLarge if more follows.
type cappedBody struct {
	body     io.ReadCloser
	left     int64
	tooLarge error
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more than the cap tells a body of exactly the cap from a larger one.
		var one [1]byte
		n, err := b.body.Read(one[:])
		if n > 0 {
			return 0, b.tooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.body.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.body.Close() }

// errBody is a body whose every read fails.
type errBody struct{ err error }

func (b errBody) Read([]byte) (int, error) { return 0, b.err }
func (errBody) Close() error               { return nil }
