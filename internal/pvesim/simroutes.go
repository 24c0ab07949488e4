package pvesim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The test-only routes under /_sim/: JSON in and out, no auth, outside /api2/json so no PVE client can
// reach them by accident. docs/simulator.md lists them.

const simPrefix = "/_sim/"

// GuestPatch changes a guest's simulated circumstances through /_sim/guests/{vmid}; nil fields stay.
type GuestPatch struct {
	// Lock sets the `lock:` property ("" clears it); with LockFor it is cleared after that long.
	Lock    *string  `json:"lock,omitempty"`
	LockFor Duration `json:"lockFor,omitempty"`
	// HA makes the guest an HA resource or not.
	HA *bool `json:"ha,omitempty"`
	// IgnoreACPI makes shutdowns of the guest time out.
	IgnoreACPI *bool `json:"ignoreACPI,omitempty"`
	// Running sets the power state by hand.
	Running *bool `json:"running,omitempty"`
}

// Settings are the simulator's run-time knobs, readable and settable through /_sim/settings.
type Settings struct {
	LockTimeouts  map[string]Duration `json:"lockTimeouts,omitempty"`
	ResourcesLag  *Duration           `json:"resourcesLag,omitempty"`
	HADelay       *Duration           `json:"haDelay,omitempty"`
	ShutdownWait  *Duration           `json:"shutdownWait,omitempty"`
	TaskDurations map[string]Duration `json:"taskDurations,omitempty"`
}

func (s *Sim) serveSim(w http.ResponseWriter, r *http.Request) {
	route := strings.Trim(strings.TrimPrefix(r.URL.Path, simPrefix), "/")
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
	}
	fail := func(status int, format string, a ...any) {
		reply(status, map[string]string{"error": fmt.Sprintf(format, a...)})
	}
	decode := func(v any) bool {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			fail(400, "read body: %v", err)
			return false
		}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			fail(400, "decode body: %v", err)
			return false
		}
		return true
	}
	switch {
	case route == "faults" && r.Method == http.MethodGet:
		reply(200, s.CurrentFaults())
	case route == "faults" && r.Method == http.MethodPut:
		var f Faults
		if !decode(&f) {
			return
		}
		if err := s.SetFaults(f); err != nil {
			fail(400, "%v", err)
			return
		}
		reply(200, s.CurrentFaults())
	case route == "faults" && r.Method == http.MethodDelete:
		s.ClearFaults()
		reply(200, s.CurrentFaults())
	case route == "requests" && r.Method == http.MethodGet:
		reply(200, s.Requests())
	case route == "requests" && r.Method == http.MethodDelete:
		s.ResetLog()
		reply(200, map[string]bool{"ok": true})
	case route == "counters" && r.Method == http.MethodGet:
		reply(200, s.Counts())
	case route == "state" && r.Method == http.MethodGet:
		d, err := s.Dump()
		if err != nil {
			fail(500, "%v", err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(d)
	case route == "reset" && r.Method == http.MethodPost:
		s.Reset()
		reply(200, map[string]bool{"ok": true})
	case route == "mirrors" && r.Method == http.MethodGet:
		reply(200, s.Mirrors())
	case route == "mirrors" && r.Method == http.MethodPut:
		var m map[string]string
		if !decode(&m) {
			return
		}
		for u, p := range m {
			s.SetMirror(u, p)
		}
		reply(200, s.Mirrors())
	case route == "settings" && r.Method == http.MethodGet:
		reply(200, s.CurrentSettings())
	case route == "settings" && r.Method == http.MethodPut:
		var st Settings
		if !decode(&st) {
			return
		}
		s.ApplySettings(st)
		reply(200, s.CurrentSettings())
	case strings.HasPrefix(route, "guests/") && r.Method == http.MethodPost:
		vmid, err := strconv.Atoi(strings.TrimPrefix(route, "guests/"))
		if err != nil {
			fail(400, "bad vmid in %q", route)
			return
		}
		var p GuestPatch
		if !decode(&p) {
			return
		}
		if err := s.PatchGuest(vmid, p); err != nil {
			fail(404, "%v", err)
			return
		}
		reply(200, map[string]bool{"ok": true})
	default:
		fail(404, "no such simulator route: %s %s", r.Method, r.URL.Path)
	}
}

// Reset clears the request log and counters and restarts the fault sequence (the configuration stays).
func (s *Sim) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
	s.counters = map[string]int{}
	s.faults.reqN = 0
	s.taskSeq = 0
}

// PatchGuest applies a GuestPatch.
func (s *Sim) PatchGuest(vmid int, p GuestPatch) error {
	if !s.Exists(vmid) {
		return fmt.Errorf("guest %d does not exist", vmid)
	}
	if p.Lock != nil {
		var err error
		if p.LockFor > 0 && *p.Lock != "" {
			err = s.LockFor(vmid, *p.Lock, time.Duration(p.LockFor))
		} else {
			err = s.SetLock(vmid, *p.Lock)
		}
		if err != nil {
			return err
		}
	}
	if p.HA != nil {
		if err := s.SetHA(vmid, *p.HA); err != nil {
			return err
		}
	}
	if p.IgnoreACPI != nil {
		if err := s.SetIgnoreACPI(vmid, *p.IgnoreACPI); err != nil {
			return err
		}
	}
	if p.Running != nil {
		if err := s.SetRunning(vmid, *p.Running); err != nil {
			return err
		}
	}
	return nil
}

// SetHA makes a guest an HA resource (its requested state follows its power state) or removes it and
// its sid from the rules.
func (s *Sim) SetHA(vmid int, managed bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.guests[vmid]
	if !ok {
		return fmt.Errorf("set ha: guest %d does not exist", vmid)
	}
	s.setHAManaged(g, managed)
	return nil
}

// SetIgnoreACPI makes a guest ignore (or honour) shutdown requests.
func (s *Sim) SetIgnoreACPI(vmid int, ignore bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.guests[vmid]
	if !ok {
		return fmt.Errorf("set ignoreACPI: guest %d does not exist", vmid)
	}
	g.ignoreACPI = ignore
	return nil
}

// SetMirror serves url (which is not on loopback) from a local file in download-url; an empty path
// removes the mapping.
func (s *Sim) SetMirror(url, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if path == "" {
		delete(s.mirrors, url)
		return
	}
	s.mirrors[url] = path
}

// Mirrors returns a copy of the mirror map.
func (s *Sim) Mirrors() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.mirrors {
		out[k] = v
	}
	return out
}

// CurrentSettings returns the run-time knobs.
func (s *Sim) CurrentSettings() Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Settings{LockTimeouts: map[string]Duration{}, TaskDurations: map[string]Duration{}}
	for k, v := range s.lockTimeouts {
		st.LockTimeouts[k] = Duration(v)
	}
	for k, v := range s.durations {
		st.TaskDurations[k] = Duration(v)
	}
	lag, ha, sw := Duration(s.resourcesLag), Duration(s.haDelay), Duration(s.shutdownWait)
	st.ResourcesLag, st.HADelay, st.ShutdownWait = &lag, &ha, &sw
	return st
}

// ApplySettings changes the run-time knobs that are set in st.
func (s *Sim) ApplySettings(st Settings) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range st.LockTimeouts {
		s.lockTimeouts[k] = time.Duration(v)
	}
	for k, v := range st.TaskDurations {
		s.durations[k] = time.Duration(v)
	}
	if st.ResourcesLag != nil {
		s.resourcesLag = time.Duration(*st.ResourcesLag)
	}
	if st.HADelay != nil {
		s.haDelay = time.Duration(*st.HADelay)
	}
	if st.ShutdownWait != nil {
		s.shutdownWait = time.Duration(*st.ShutdownWait)
	}
}
