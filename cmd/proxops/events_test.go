package main

import (
	"bufio"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// eventLine is one line of proxops events -o json.
type eventLine struct {
	Time      time.Time       `json:"time"`
	Stream    string          `json:"stream"`
	Seq       uint64          `json:"seq"`
	Subject   string          `json:"subject"`
	Type      string          `json:"type"`
	ContentID string          `json:"content_id"`
	Cluster   string          `json:"cluster"`
	Kind      string          `json:"kind"`
	Text      string          `json:"text"`
	Message   json.RawMessage `json:"message"`
}

// runSpecific are the fields of a message that differ from run to run by design: ids unique per run, wall
// clock times, durations, the executor replica, PVE task ids (they name a pid and a start time), a status report's timing and bookkeeping.
var runSpecific = map[string]bool{"run_id": true, "at": true, "elapsed_ms": true, "executor": true,
	"finished_at": true, "timing": true, "tracking": true, "revision": true, "upid": true, "last_success": true}

func dropRunSpecific(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, sub := range x {
			if runSpecific[k] {
				delete(x, k)
				continue
			}
			x[k] = dropRunSpecific(sub)
		}
	case []any:
		for i := range x {
			x[i] = dropRunSpecific(x[i])
		}
	}
	return v
}

// parseEvents parses proxops events -o json: every line is an object with a time, a stream sequence, a
// type and a content id.
func parseEvents(t *testing.T, out string) []eventLine {
	t.Helper()
	var lines []eventLine
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var l eventLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON line: %v\n%s", err, sc.Text())
		}
		if l.Time.IsZero() || l.Seq == 0 || l.Type == "" || !strings.HasPrefix(l.ContentID, "sha256:") || l.Kind == "" {
			t.Fatalf("incomplete event line: %s", sc.Text())
		}
		lines = append(lines, l)
	}
	return lines
}

// deterministic is an event line without what differs between runs by design (times, sequences, run ids,
// and so the content ids), the repository's temporary path replaced.
func deterministic(t *testing.T, l eventLine, repoPath string) string {
	t.Helper()
	var msg any
	if err := json.Unmarshal([]byte(strings.ReplaceAll(string(l.Message), repoPath, "<repo>")), &msg); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(map[string]any{"stream": l.Stream, "subject": l.Subject, "type": l.Type,
		"cluster": l.Cluster, "kind": l.Kind, "text": strings.ReplaceAll(l.Text, repoPath, "<repo>"), "message": dropRunSpecific(msg)})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// convergingDemoEvents runs proxops up on the demo from scratch against a simulator at addr, follows its
// events from the start while it converges, and then reads them again without --follow. It returns the
// simulator's URL and the deterministic part of every event line.
func convergingDemoEvents(t *testing.T, addr string) (string, []string) {
	e := newDemoEnvAt(t, addr, func(s *pvesim.Spec) { s.Clock = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) })
	u := e.startUp()
	upAddr := u.addr()

	// A follower started before the cluster converged sees it converge live.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	followed := &testkit.SyncBuffer{}
	done := make(chan error, 1)
	go func() {
		cmd := newRootCommand()
		cmd.SetOut(followed)
		cmd.SetErr(followed)
		cmd.SetArgs([]string{"events", "--follow", "--cluster", "demo", "--data-dir", e.data})
		done <- cmd.ExecuteContext(ctx)
	}()
	waitConverged(t, u, upAddr, "demo", e.head())
	testkit.WaitUntil(t, "the follower's converged status", nil, followed, func() bool {
		return strings.Contains(followed.String(), " demo status converged")
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("events --follow: %v\n%s", err, followed)
	}
	for _, kind := range []string{" - repo.changed ", " demo plan.planned ", " demo result.succeeded ", " demo plan.finished "} {
		if !strings.Contains(followed.String(), kind) {
			t.Errorf("events --follow printed no%s line:\n%s", kind, followed)
		}
	}

	out := e.mustRunPlain(0, "events", "-o", "json", "--data-dir", e.data)
	lines := parseEvents(t, out)
	var kinds, det []string
	for i, l := range lines {
		if i > 0 && l.Time.Before(lines[i-1].Time) {
			t.Errorf("events out of store order: %s before %s", lines[i-1].Time, l.Time)
		}
		kinds = append(kinds, l.Kind)
		det = append(det, deterministic(t, l, e.repo))
	}
	for _, want := range []string{"repo.changed", "plan.planned", "result.started", "result.succeeded", "plan.finished", "status"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("no %s event in:\n%s", want, out)
		}
	}
	if slices.Contains(kinds, "result.progress") {
		t.Errorf("task heartbeats printed without --progress:\n%s", out)
	}
	return e.srv.URL, det
}

// proxops events prints the events of a converging demo, live with --follow and from the start of the
// streams without; two runs from scratch print the same events, byte for byte in their deterministic
// fields (operations on different nodes run concurrently, so the lines are compared as a set).
func TestEventsOfAConvergingDemoAreTheSameInTwoRuns(t *testing.T) {
	var url string
	var first, second []string
	t.Run("first", func(t *testing.T) { url, first = convergingDemoEvents(t, "127.0.0.1:0") })
	if t.Failed() {
		return
	}
	t.Run("second", func(t *testing.T) { _, second = convergingDemoEvents(t, strings.TrimPrefix(url, "http://")) })
	if t.Failed() {
		return
	}
	slices.Sort(first)
	slices.Sort(second)
	if len(first) != len(second) {
		t.Fatalf("%d events in the first run, %d in the second:\n%s\n---\n%s", len(first), len(second),
			strings.Join(first, "\n"), strings.Join(second, "\n"))
	}
	for i := range first {
		if first[i] != second[i] {
			t.Errorf("events differ:\n%s\n%s", first[i], second[i])
		}
	}
}
