// Command proxops is the operator's tool and the single-host deployment of ProxOps: it validates, diffs,
// applies and adopts manifest repositories, shows status, runs every service in one process and runs the
// PVE simulator.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Set at link time by make build (-X main.version=... -X main.commit=...).
var (
	version = ""
	commit  = ""
)

// exitError carries an exit code chosen by a command (for example diff --exit-code).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err == nil {
		return
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		if ee.err == nil {
			os.Exit(code)
		}
	}
	fmt.Fprintf(os.Stderr, "error: %v\n", err)
	os.Exit(code)
}
