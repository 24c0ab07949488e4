package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/proxops/proxops/internal/httpserver"
	"github.com/proxops/proxops/services/notifier"
)

func init() { register(newNotificationsCommand) }

func newNotificationsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "notifications",
		Short: "Tools for the notifications section of proxops.yaml",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newNotificationsListenCommand())
	return cmd
}

func newNotificationsListenCommand() *cobra.Command {
	var (
		listen    string
		secretEnv string
	)
	cmd := &cobra.Command{
		Use:   "listen",
		Short: "Receive generic webhook notifications on loopback and print them",
		Long: `listen is a generic webhook receiver for trying notifications out: it listens on a loopback address,
prints "listening on http://ADDR/" and then every notification it receives (event, delivery id, whether its
signature verifies, and the text), answering 200. A delivery id it has seen already is printed as a
duplicate. With --secret-env VAR it checks X-Proxops-Signature against the key in that variable and answers
401 to a request whose signature does not verify. Point a provider of type webhook at it:

  notifications:
    providers:
      - {name: try, type: webhook, url: http://127.0.0.1:9595/}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var key []byte
			if secretEnv != "" {
				if key = []byte(os.Getenv(secretEnv)); len(key) == 0 {
					return fmt.Errorf("--secret-env %s: the variable is empty", secretEnv)
				}
			}
			return runNotificationsListen(cmd.Context(), cmd.OutOrStdout(), listen, key)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9595", "loopback address to listen on (port 0: any free port)")
	cmd.Flags().StringVar(&secretEnv, "secret-env", "", "environment variable holding the signing key")
	return cmd
}

func runNotificationsListen(ctx context.Context, w io.Writer, listen string, key []byte) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--listen %s: only a loopback address is allowed", listen)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	srv := httpserver.New(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		signature := "unsigned"
		if sig := r.Header.Get(notifier.HeaderSignature); sig != "" {
			signature = "signed"
		}
		if key != nil {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get(notifier.HeaderSignature)), []byte(notifier.Sign(key, body))) != 1 {
				http.Error(rw, "signature does not verify", http.StatusUnauthorized)
				mu.Lock()
				fmt.Fprintf(w, "refused a request whose signature does not verify\n")
				mu.Unlock()
				return
			}
			signature = "signature verified"
		}
		var n notifier.Notification
		if err := json.Unmarshal(body, &n); err != nil {
			http.Error(rw, "not a ProxOps notification", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		dup := ""
		if seen[n.ID] {
			dup = ", duplicate"
		}
		seen[n.ID] = true
		fmt.Fprintf(w, "notification %s for cluster %s (delivery %s, %s%s):\n  %s\n", n.Event, n.Cluster, n.ID, signature, dup,
			strings.ReplaceAll(n.Text(), "\n", "\n  "))
	}), httpserver.Limits{})
	fmt.Fprintf(w, "listening on http://%s/\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}
