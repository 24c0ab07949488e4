// Package deploy checks the monitoring files under deploy/ with Prometheus' own parsers: the alert rules
// load as Prometheus loads a rule file, and every query of the Grafana dashboard is valid PromQL. It is a
// module of its own, outside the workspace, so that only this check depends on the Prometheus server's
// packages; run it with `make test` (or `cd test/deploy && GOWORK=off go test ./...`). That the queries name
// metrics ProxOps registers is checked in cmd/proxops against a running proxops up.
package deploy
