package pve

import (
	"fmt"
	"io"
	"net/http"
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
	return res, nil
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
