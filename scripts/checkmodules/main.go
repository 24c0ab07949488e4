// Command checkmodules fails when a service module's go.mod requires a module that the service's production
// code (its packages without their tests) does not build with: a module only its tests bring in, or another
// service. Each service is a module of its own so that only the watcher pulls go-git and only the executor the
// PVE client; a test that imports another service or a heavy library belongs under test/, in the root module.
//
// go mod tidy also keeps modules that only other platforms build with (go-winio for Windows, say); comparing
// the packages of one build with and without the tests leaves those out, as both builds share them.
//
// Run it from the repository root: go run ./scripts/checkmodules (make check-modules). It reads go.mod files
// and asks `go list` about packages already in the module cache; it needs no network.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// testOnly are the modules a service's own tests may add to its go.mod: small test libraries with no
// dependencies of their own.
var testOnly = []string{"github.com/google/go-cmp"}

func main() {
	dirs, err := filepath.Glob(filepath.Join("services", "*", "go.mod"))
	if err != nil || len(dirs) == 0 {
		fmt.Fprintln(os.Stderr, "checkmodules: no services/*/go.mod; run it from the repository root")
		os.Exit(2)
	}
	failed := false
	for _, gomod := range dirs {
		extra, err := check(filepath.Dir(gomod))
		if err != nil {
			fmt.Fprintf(os.Stderr, "checkmodules: %s: %v\n", gomod, err)
			os.Exit(2)
		}
		for _, m := range extra {
			fmt.Printf("%s: the service's tests need %s, which its production code does not import; "+
				"move those tests to test/ and run go mod tidy\n", filepath.Dir(gomod), m)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// check returns the modules the service in dir needs for its tests alone (whether its go.mod lists them yet or
// not), and the services its go.mod requires that its production code does not import.
func check(dir string) ([]string, error) {
	required, err := requires(filepath.Join(dir, "go.mod"))
	if err != nil {
		return nil, err
	}
	production, err := modules(dir, false)
	if err != nil {
		return nil, err
	}
	withTests, err := modules(dir, true)
	if err != nil {
		return nil, err
	}
	var extra []string
	for m := range withTests {
		if !production[m] && !slices.Contains(testOnly, m) {
			extra = append(extra, m)
		}
	}
	for _, m := range required {
		if strings.HasPrefix(m, servicePrefix) && !production[m] && !slices.Contains(extra, m) {
			extra = append(extra, m)
		}
	}
	slices.Sort(extra)
	return extra, nil
}

// servicePrefix starts the module path of every service.
const servicePrefix = "github.com/proxops/proxops/services/"

// requires lists the module paths a go.mod requires, direct and indirect.
func requires(gomod string) ([]string, error) {
	out, err := run("", "go", "mod", "edit", "-json", gomod)
	if err != nil {
		return nil, err
	}
	var f struct {
		Require []struct{ Path string }
	}
	if err := json.Unmarshal(out, &f); err != nil {
		return nil, fmt.Errorf("read %s: %w", gomod, err)
	}
	paths := make([]string, 0, len(f.Require))
	for _, r := range f.Require {
		paths = append(paths, r.Path)
	}
	return paths, nil
}

// modules are the modules that provide a package the module's packages (and, with tests, their tests) import,
// directly or not. It is asked in the workspace (go.work), which builds every module with what the checkout
// already downloaded for `go build work`.
func modules(dir string, tests bool) (map[string]bool, error) {
	args := []string{"list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}"}
	if tests {
		args = append(args, "-test")
	}
	out, err := run(dir, "go", append(args, "./...")...)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := strings.TrimSpace(sc.Text()); m != "" {
			used[m] = true
		}
	}
	return used, sc.Err()
}

func run(dir, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return nil, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return out, nil
}
