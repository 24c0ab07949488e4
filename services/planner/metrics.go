package planner

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	events         *prometheus.CounterVec
	plans          *prometheus.CounterVec
	runs           *prometheus.CounterVec
	dispatched     prometheus.Counter
	results        *prometheus.CounterVec
	snapshots      *prometheus.CounterVec
	driving        prometheus.Gauge
	takeovers      prometheus.Counter
	planSeconds    prometheus.Histogram
	observeSeconds prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "proxops_planner_events_total",
			Help: "Repository events handled, by kind (apply, dry_run, tree_mismatch; skipped: a cluster's apply event skipped while its permanent rejection waits for a change)."}, []string{"kind"}),
		plans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "proxops_planner_plans_total",
			Help: "Plans computed, by result (planned, no_drift, held, rejected reason)."}, []string{"result"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "proxops_planner_runs_total",
			Help: "Runs finished, by outcome (succeeded, failed, superseded, not-applied)."}, []string{"outcome"}),
		dispatched: prometheus.NewCounter(prometheus.CounterOpts{Name: "proxops_planner_operations_dispatched_total",
			Help: "Operations published to their node's work queue."}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "proxops_planner_operation_results_total",
			Help: "Final operation results taken into runs, by status."}, []string{"status"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "proxops_planner_snapshots_total",
			Help: "Safety snapshots, by event: taken, rolled_back (after a failed protected change, or by an operator's proxops rollback), pruned (deleted by retention, before a template conversion or before a move of local disks)."}, []string{"event"}),
		driving: prometheus.NewGauge(prometheus.GaugeOpts{Name: "proxops_planner_clusters_driving",
			Help: "Clusters whose lease this planner holds."}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "proxops_planner_takeovers_total",
			Help: "Open runs reloaded from the streams and carried on (after a planner stopped or died)."}),
		planSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "proxops_planner_plan_seconds",
			Help: "Time to compute one cluster's plan, observe included.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		observeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "proxops_planner_observe_seconds",
			Help: "Time to observe every node of a cluster.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.events, m.plans, m.runs, m.dispatched, m.results, m.snapshots, m.driving, m.takeovers,
		m.planSeconds, m.observeSeconds} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if errors.As(err, &already) {
				continue
			}
			return nil, err
		}
	}
	return m, nil
}
