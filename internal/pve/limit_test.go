package pve_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

// hugeNodeList answers GET /nodes with a body of size bytes, written as it goes (never held in memory),
// announcing its length or not; every other request reaches the simulator.
func hugeNodeList(size int64, announce bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || r.URL.Path != "/api2/json/nodes" {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			if announce {
				w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
			}
			head, tail := `{"data":[`, `]}`
			if _, err := w.Write([]byte(head)); err != nil {
				return
			}
			chunk := []byte(strings.Repeat(" ", 32<<10))
			for left := size - int64(len(head)+len(tail)); left > 0; left -= int64(len(chunk)) {
				if _, err := w.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
					return // the client stopped reading
				}
			}
			_, _ = w.Write([]byte(tail))
		})
	}
}

// An answer larger than the cap on PVE response bodies is a terminal error that names the request and the
// cap, whether or not its length was announced; the body is not read past the cap.
func TestResponseBodiesLargerThanTheCapAreRefused(t *testing.T) {
	const maxBody = 64 << 10
	for _, announce := range []bool{false, true} {
		t.Run("announced="+strconv.FormatBool(announce), func(t *testing.T) {
			c := newSimHandler(t, pvesim.DefaultSpec(), hugeNodeList(256<<20, announce))
			cfg := c.config()
			cfg.MaxResponseBytes = maxBody
			cl := c.clientWith(t, cfg)
			_, err := cl.Nodes(testContext(t))
			var tooLarge *pve.ResponseTooLargeError
			if !errors.As(err, &tooLarge) {
				t.Fatalf("listing nodes from a 256 MiB answer: %v; want the body cap's error", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "GET /api2/json/nodes") || !strings.Contains(msg, "64 KiB cap") {
				t.Errorf("error %q does not name the request and the cap", msg)
			}
			if class := pve.ClassOf(err); class != plan.ErrorTerminal {
				t.Errorf("class %s, want terminal", class)
			}
		})
	}
}

// An answer within the cap is read whole: a body of exactly the cap is accepted.
func TestResponseBodyOfExactlyTheCapIsRead(t *testing.T) {
	const size = 64 << 10
	c := newSimHandler(t, pvesim.DefaultSpec(), hugeNodeList(size, false))
	cfg := c.config()
	cfg.MaxResponseBytes = size
	nodes, err := c.clientWith(t, cfg).Nodes(testContext(t))
	if err != nil || len(nodes) != 0 {
		t.Fatalf("nodes %v, %v; want an empty list read whole", nodes, err)
	}
}

// A request whose answer starts but never ends is bounded by the request timeout too: the read of the body
// fails after it as a retryable failure naming the request and the timeout, not after the caller's deadline.
func TestAnAnswerThatStopsHalfwayFailsAfterTheRequestTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	release := make(chan struct{})
	stall := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/api2/json/nodes" {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"data":[`))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
	}
	c := newSimHandler(t, pvesim.DefaultSpec(), stall)
	t.Cleanup(func() { close(release) })
	cfg := c.config()
	cfg.RequestTimeout, cfg.ReadAttempts = timeout, 1
	cl := c.clientWith(t, cfg)
	start := time.Now()
	_, err := cl.Nodes(testContext(t))
	if waited := time.Since(start); err == nil || waited > 20*timeout {
		t.Fatalf("listing nodes from an answer that stops: %v after %s", err, waited)
	}
	if msg := err.Error(); !strings.Contains(msg, "/nodes") || !strings.Contains(msg, "no answer from PVE within 300ms (request timeout)") {
		t.Errorf("error %q does not name the request and its timeout", msg)
	}
	if class := pve.ClassOf(err); class != plan.ErrorRetryable {
		t.Errorf("class %s, want retryable", class)
	}
}
