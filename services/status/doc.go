// Package status aggregates plans, results and gaps into one deterministic report per cluster.
package status
