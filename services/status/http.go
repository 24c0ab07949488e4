package status

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/report"
)

func (s *service) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.servePage)
	mux.HandleFunc("GET /status", s.serveStatus)
	mux.HandleFunc("GET /status/{cluster}", s.serveCluster)
	mux.HandleFunc("GET /healthz", s.serveHealth)
	mux.HandleFunc("GET /readyz", s.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))
	return mux
}

// statusResponse is /status: the rendered document plus how far the service has read each stream.
type statusResponse struct {
	render.StatusDocument
	// Sequences is the last sequence read per stream: a client that published a message knows the service
	// has folded it once the stream's entry reaches its sequence.
	Sequences map[string]uint64 `json:"sequences"`
}

func (s *service) serveStatus(w http.ResponseWriter, _ *http.Request) {
	snap := s.snap.Load()
	doc := render.NewStatusDocument(render.StatusView{ProcessStart: s.start, Clusters: snap.statuses, Sources: snap.sources})
	writeJSON(w, http.StatusOK, statusResponse{StatusDocument: doc, Sequences: snap.processed})
}

func (s *service) serveCluster(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("cluster")
	for _, st := range s.snap.Load().statuses {
		if st.Cluster == name {
			writeJSON(w, http.StatusOK, render.NewClusterDocument(st))
			return
		}
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"error": "no status for cluster " + name})
}

// health is the /healthz verdict.
type health struct {
	OK       bool     `json:"ok"`
	Since    string   `json:"since,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Clusters []string `json:"clusters,omitempty"`
	// Repos are the repositories that cannot be read (reason stale).
	Repos []string `json:"repos,omitempty"`
}

// Health reasons.
const (
	reasonNotReady = "not_ready"
	reasonStale    = "stale"
	reasonFailed   = "failed"
)

// judge decides /healthz: not ready until the service has caught up and a cluster has been reconciled;
// stale when a watcher's last look at its repository failed (the desired state may be behind git) or a
// cluster's planner has not answered within StaleAfter; failed when a cluster's last run
// failed or its plan was rejected.
func judge(snap *snapshot, now time.Time, staleAfter time.Duration) health {
	if !snap.ready {
		return health{Reason: reasonNotReady}
	}
	var stale, failed []string
	reconciled := 0
	for _, st := range snap.statuses {
		if st.Counters.Plans == 0 && st.Counters.Rejections == 0 {
			continue
		}
		reconciled++
		last := st.Timing.LastPlanAt
		if st.Phase == report.PhasePlanning && st.Timing.LastTriggerAt.After(last) {
			// Waiting on a plan: stale once the wait itself is too long.
			last = st.Timing.LastTriggerAt
		}
		if !last.IsZero() && now.Sub(last) > staleAfter {
			stale = append(stale, st.Cluster)
		}
		if st.Phase == report.PhaseFailed || st.Phase == report.PhaseRejected {
			failed = append(failed, st.Cluster)
		}
	}
	var repos []string
	for _, h := range snap.sources {
		if h.Stale {
			repos = append(repos, h.Repo)
		}
	}
	switch {
	case reconciled == 0:
		return health{Reason: reasonNotReady}
	case len(repos) > 0 || len(stale) > 0:
		return health{Reason: reasonStale, Clusters: stale, Repos: repos}
	case len(stale) > 0:
		return health{Reason: reasonStale, Clusters: stale}
	case len(failed) > 0:
		return health{Reason: reasonFailed, Clusters: failed}
	}
	return health{OK: true}
}

func (s *service) serveHealth(w http.ResponseWriter, _ *http.Request) {
	h := judge(s.snap.Load(), s.cfg.Now(), s.cfg.StaleAfter)
	if h.OK {
		h.Since = s.start.UTC().Format(time.RFC3339)
		writeJSON(w, http.StatusOK, h)
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, h)
}

func (s *service) serveReady(w http.ResponseWriter, _ *http.Request) {
	if s.snap.Load().ready {
		writeJSON(w, http.StatusOK, map[string]bool{"ready": true})
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]bool{"ready": false})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}
