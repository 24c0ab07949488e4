package httpserver_test

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/httpserver"
)

// constructor is the one file allowed to build an http.Server.
const constructor = "internal/httpserver/httpserver.go"

// unbounded lists, as file:line: what, every place under root that builds or runs an HTTP server without
// going through the constructor: an http.Server literal, new(http.Server), a variable of type http.Server,
// the package-level http.ListenAndServe, ListenAndServeTLS, Serve and ServeTLS (servers without any
// timeout), and httptest servers outside tests. Test files, testdata and generated code are not read.
func unbounded(t *testing.T, root string, skip func(rel string) bool) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || skip(rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || rel == constructor {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		httpName, testName := "", ""
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			name := p[strings.LastIndex(p, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			switch p {
			case "net/http":
				httpName = name
			case "net/http/httptest":
				testName = name
			}
		}
		is := func(e ast.Expr, pkg string, names ...string) bool {
			sel, ok := e.(*ast.SelectorExpr)
			if !ok || pkg == "" {
				return false
			}
			id, ok := sel.X.(*ast.Ident)
			return ok && id.Name == pkg && slices.Contains(names, sel.Sel.Name)
		}
		report := func(n ast.Node, what string) {
			out = append(out, fmt.Sprintf("%s:%d: %s", rel, fset.Position(n.Pos()).Line, what))
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if is(n.Type, httpName, "Server") {
					report(n, "http.Server literal")
				}
			case *ast.ValueSpec:
				if is(n.Type, httpName, "Server") {
					report(n, "variable of type http.Server")
				}
			case *ast.CallExpr:
				switch {
				case is(n.Fun, httpName, "ListenAndServe", "ListenAndServeTLS", "Serve", "ServeTLS"):
					report(n, "http."+n.Fun.(*ast.SelectorExpr).Sel.Name+" serves without timeouts")
				case is(n.Fun, testName, "NewServer", "NewTLSServer", "NewUnstartedServer"):
					report(n, "httptest server outside a test")
				case len(n.Args) == 1 && isIdent(n.Fun, "new") && is(n.Args[0], httpName, "Server"):
					report(n, "new(http.Server)")
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// Every HTTP server of the module, services included, is built by httpserver.New, so none runs without
// read, write and idle timeouts.
func TestEveryHTTPServerIsBuiltWithLimits(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	skip := func(rel string) bool {
		return rel == "internal/gen" || filepath.Base(rel) == "testdata" || rel == "tools"
	}
	if got := unbounded(t, root, skip); len(got) > 0 {
		t.Errorf("HTTP servers built without httpserver.New (give them its limits):\n%s", strings.Join(got, "\n"))
	}
}

// The scan finds every way of building a server without the constructor, whatever the import is called.
func TestUnboundedServersAreFound(t *testing.T) {
	got := unbounded(t, filepath.Join("testdata", "unbounded"), func(string) bool { return false })
	want := []string{
		"servers.go:9: http.Server literal",
		"servers.go:10: new(http.Server)",
		"servers.go:11: http.ListenAndServe serves without timeouts",
		"servers.go:12: httptest server outside a test",
		"servers.go:13: variable of type http.Server",
	}
	if !slices.Equal(got, want) {
		t.Errorf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNewSetsEveryLimit(t *testing.T) {
	srv := httpserver.New(http.NotFoundHandler(), httpserver.Limits{Idle: time.Second})
	if srv.ReadHeaderTimeout != httpserver.DefaultReadHeaderTimeout || srv.ReadTimeout != httpserver.DefaultReadTimeout ||
		srv.WriteTimeout != httpserver.DefaultWriteTimeout || srv.IdleTimeout != time.Second ||
		srv.MaxHeaderBytes != httpserver.DefaultMaxHeaderBytes {
		t.Errorf("limits: read header %s, read %s, write %s, idle %s, max header bytes %d", srv.ReadHeaderTimeout,
			srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
}

// serve runs a server with the limits on a loopback port until the test ends.
func serve(t *testing.T, l httpserver.Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpserver.New(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), l)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// waitClosed blocks until the server closes the connection (a read ends in EOF) and returns how long that
// took; it fails the test when the connection is still open after limit.
func waitClosed(t *testing.T, conn net.Conn, r io.Reader, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := conn.SetReadDeadline(start.Add(limit)); err != nil {
		t.Fatal(err)
	}
	n, err := r.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("the server kept the connection open for %s", limit)
	case n > 0 || !errors.Is(err, io.EOF):
		t.Fatalf("read from the idle connection: %d bytes, %v; want the server to close it", n, err)
	}
	return time.Since(start)
}

// A keep-alive connection left idle after a request is closed by the server once the idle timeout has
// passed, not kept for the client's convenience.
func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	const idle = 200 * time.Millisecond
	addr := serve(t, httpserver.Limits{Idle: idle})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: proxops\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil || string(body) != "ok" || res.Close {
		t.Fatalf("response: %q, %v, close %v; want a kept-alive ok", body, err, res.Close)
	}
	// The idle timer starts when the response is written, just before it is read here.
	if took := waitClosed(t, conn, br, 10*time.Second); took < idle/2 {
		t.Errorf("the idle connection was closed after %s, before the idle timeout of %s", took, idle)
	}
}

// A client that opens a connection and never finishes its request's headers is cut off.
func TestSlowRequestHeadersAreCutOff(t *testing.T) {
	addr := serve(t, httpserver.Limits{ReadHeader: 200 * time.Millisecond})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: proxops\r\n"); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, conn, conn, 10*time.Second)
}
