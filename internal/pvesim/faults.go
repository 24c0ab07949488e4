package pvesim

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fault injection. Every decision is a pure function of the fault seed and a sequence number (the n-th
// request reaching the fault stage, the n-th task started), so the same seed and the same request
// sequence give the same faults.

// Faults configures deterministic fault injection. The zero value injects nothing.
type Faults struct {
	// Seed drives every fault decision (0 is a valid seed).
	Seed int64 `yaml:"seed" json:"seed"`
	// Latency delays every API request; Jitter adds a uniform random extra in [0, Jitter).
	Latency Duration `yaml:"latency" json:"latency"`
	Jitter  Duration `yaml:"jitter" json:"jitter"`
	// Errors answer a share of matching requests with an error instead of handling them.
	Errors []ErrorFault `yaml:"errors" json:"errors"`
	// LockTimeoutRate answers this share of guest writes (any non-GET under /nodes/{node}/qemu or
	// /nodes/{node}/lxc) with PVE's 500 "can't lock file '…' - got timeout", without waiting.
	LockTimeoutRate float64 `yaml:"lockTimeoutRate" json:"lockTimeoutRate"`
	// TaskFailureRate ends this share of tasks (of TaskTypes, or all when empty) with an error
	// exitstatus (TaskFailureMessage, default "injected task failure"); their work is not done.
	TaskFailureRate    float64  `yaml:"taskFailureRate" json:"taskFailureRate"`
	TaskFailureMessage string   `yaml:"taskFailureMessage" json:"taskFailureMessage"`
	TaskTypes          []string `yaml:"taskTypes" json:"taskTypes"`
	// TaskWarningRate ends this share of the tasks that succeed (of TaskTypes, or all when empty) with
	// exitstatus "WARNINGS: 1" and a "WARN: " line in their log, as PVE does for a task that logged a
	// warning: their work is done, and clients must count them as successes.
	TaskWarningRate float64 `yaml:"taskWarningRate" json:"taskWarningRate"`
	// MaxConcurrent limits the API requests served at once, as pveproxy/pvedaemon's small worker pools
	// do; excess requests queue. 0 means no limit.
	MaxConcurrent int `yaml:"maxConcurrent" json:"maxConcurrent"`
	// LongLocks set a guest's `lock:` property for a while, as a backup does, when the faults are set.
	LongLocks []LongLock `yaml:"longLocks" json:"longLocks"`
}

// ErrorFault answers a share of matching requests with an error.
type ErrorFault struct {
	// Method is GET, POST, PUT or DELETE; empty matches any.
	Method string `yaml:"method" json:"method"`
	// Path is a schema path template (/nodes/{node}/qemu/{vmid}/config); a trailing * matches a prefix;
	// empty matches any.
	Path string `yaml:"path" json:"path"`
	// Rate is the share of matching requests that fail, 0..1.
	Rate float64 `yaml:"rate" json:"rate"`
	// Status is the HTTP status (default 500); Message the error text (default "injected fault").
	Status  int    `yaml:"status" json:"status"`
	Message string `yaml:"message" json:"message"`
}

// LongLock sets `lock: <Lock>` on a guest After a delay and clears it For a while later.
type LongLock struct {
	VMID  int      `yaml:"vmid" json:"vmid"`
	Lock  string   `yaml:"lock" json:"lock"`
	After Duration `yaml:"after" json:"after"`
	For   Duration `yaml:"for" json:"for"`
}

type faultState struct {
	cfg  Faults
	reqN uint64
}

// gate is the worker limit: at most limit requests are served at once, the rest wait in arrival order
// of wake-ups.
type gate struct {
	mu      sync.Mutex
	cond    *sync.Cond
	limit   int
	serving int
	queued  int
}

func (g *gate) enter() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queued++
	for g.limit > 0 && g.serving >= g.limit {
		g.cond.Wait()
	}
	g.queued--
	g.serving++
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.serving--
	g.cond.Broadcast()
}

func (g *gate) setLimit(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limit = n
	g.cond.Broadcast()
}

// Load reports how many API requests are being served and how many wait for a free worker.
func (s *Sim) Load() (serving, queued int) {
	s.gate.mu.Lock()
	defer s.gate.mu.Unlock()
	return s.gate.serving, s.gate.queued
}

func validateFaults(f Faults) error {
	rate := func(name string, r float64) error {
		if r < 0 || r > 1 {
			return fmt.Errorf("%s %v: want a share between 0 and 1", name, r)
		}
		return nil
	}
	if err := rate("lockTimeoutRate", f.LockTimeoutRate); err != nil {
		return err
	}
	if err := rate("taskFailureRate", f.TaskFailureRate); err != nil {
		return err
	}
	if err := rate("taskWarningRate", f.TaskWarningRate); err != nil {
		return err
	}
	for i, e := range f.Errors {
		if err := rate(fmt.Sprintf("errors[%d].rate", i), e.Rate); err != nil {
			return err
		}
		switch e.Method {
		case "", "GET", "POST", "PUT", "DELETE":
		default:
			return fmt.Errorf("errors[%d].method %q: want GET, POST, PUT, DELETE or empty", i, e.Method)
		}
		if e.Status != 0 && (e.Status < 400 || e.Status > 599) {
			return fmt.Errorf("errors[%d].status %d: want 400..599", i, e.Status)
		}
	}
	if f.MaxConcurrent < 0 || f.Latency < 0 || f.Jitter < 0 {
		return fmt.Errorf("maxConcurrent, latency and jitter must not be negative")
	}
	for i, l := range f.LongLocks {
		if l.Lock == "" || l.VMID == 0 {
			return fmt.Errorf("longLocks[%d]: want vmid and lock", i)
		}
	}
	return nil
}

// SetFaults replaces the fault configuration and restarts the fault sequence (the request and the task
// sequence numbers); long locks are scheduled.
func (s *Sim) SetFaults(f Faults) error {
	if err := validateFaults(f); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f.Errors = append([]ErrorFault(nil), f.Errors...)
	f.TaskTypes = append([]string(nil), f.TaskTypes...)
	f.LongLocks = append([]LongLock(nil), f.LongLocks...)
	s.faults = faultState{cfg: f}
	s.taskSeq = 0 // task faults follow the task sequence, which restarts with the request sequence
	s.gate.setLimit(f.MaxConcurrent)
	for _, l := range f.LongLocks {
		l := l
		s.timer(time.Duration(l.After), func() {
			g, ok := s.guests[l.VMID]
			if !ok {
				return
			}
			g.conf()["lock"] = l.Lock
			g.write()
			s.timer(time.Duration(l.For), func() {
				if g, ok := s.guests[l.VMID]; ok && g.conf()["lock"] == l.Lock {
					delete(g.conf(), "lock")
					g.write()
				}
			})
		})
	}
	return nil
}

// CurrentFaults returns the fault configuration in force.
func (s *Sim) CurrentFaults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults.cfg
}

// ClearFaults turns fault injection off.
func (s *Sim) ClearFaults() { _ = s.SetFaults(Faults{}) }

// splitmix64 is a fast, well-mixed hash of a 64-bit value.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// unitRand is a uniform number in [0,1) determined by the seed, a sequence number and a salt.
func unitRand(seed int64, n, salt uint64) float64 {
	x := splitmix64(uint64(seed) ^ splitmix64(n) ^ splitmix64(salt*0x2545f4914f6cdd1d+1))
	return float64(x>>11) / (1 << 53)
}

func matchTemplate(pattern, template string) bool {
	if pattern == "" || pattern == "*" {
		return true
	}
	if strings.HasSuffix(pattern, "*") {
		return strings.HasPrefix(template, strings.TrimSuffix(pattern, "*"))
	}
	return pattern == template
}

// requestFault decides the injected delay and answer of one request. The caller holds s.mu.
func (s *Sim) requestFault(method, template string, params map[string]value) (time.Duration, *apiError) {
	cfg := s.faults.cfg
	n := s.faults.reqN
	s.faults.reqN++
	delay := time.Duration(cfg.Latency)
	if cfg.Jitter > 0 {
		delay += time.Duration(unitRand(cfg.Seed, n, 1) * float64(cfg.Jitter))
	}
	for i, e := range cfg.Errors {
		if e.Rate <= 0 || (e.Method != "" && e.Method != method) || !matchTemplate(e.Path, template) {
			continue
		}
		if unitRand(cfg.Seed, n, uint64(100+i)) < e.Rate {
			status := e.Status
			if status == 0 {
				status = http.StatusInternalServerError
			}
			msg := e.Message
			if msg == "" {
				msg = "injected fault"
			}
			return delay, &apiError{status: status, msg: strings.TrimSuffix(msg, "\n") + "\n"}
		}
	}
	if cfg.LockTimeoutRate > 0 && method != http.MethodGet {
		kind := ""
		switch {
		case strings.HasPrefix(template, "/nodes/{node}/qemu"):
			kind = "qemu"
		case strings.HasPrefix(template, "/nodes/{node}/lxc"):
			kind = "lxc"
		}
		if vmid := atoiDef(params["vmid"].s, 0); kind != "" && vmid > 0 && unitRand(cfg.Seed, n, 2) < cfg.LockTimeoutRate {
			return delay, dieErr("%s", lockTimeoutErr(lockFilePath(kind, vmid)))
		}
	}
	return delay, nil
}

// injectedTaskFailure decides whether the seq-th task fails by injection.
func (s *Sim) injectedTaskFailure(seq uint64, typ string) error {
	s.mu.Lock()
	cfg := s.faults.cfg
	s.mu.Unlock()
	if cfg.TaskFailureRate <= 0 || !cfg.taskTypeMatches(typ) {
		return nil
	}
	if unitRand(cfg.Seed, seq, 3) < cfg.TaskFailureRate {
		msg := cfg.TaskFailureMessage
		if msg == "" {
			msg = "injected task failure"
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}

// taskTypeMatches says whether the task faults apply to a task type: every type when TaskTypes is empty.
func (f Faults) taskTypeMatches(typ string) bool {
	return len(f.TaskTypes) == 0 || slices.Contains(f.TaskTypes, typ)
}

// injectedTaskWarning decides whether the seq-th task, if it succeeds, ends with warnings.
func (s *Sim) injectedTaskWarning(seq uint64, typ string) bool {
	s.mu.Lock()
	cfg := s.faults.cfg
	s.mu.Unlock()
	return cfg.TaskWarningRate > 0 && cfg.taskTypeMatches(typ) && unitRand(cfg.Seed, seq, 4) < cfg.TaskWarningRate
}
