package pvesim

import (
	"fmt"
	"strconv"
	"time"
)

// Config locking, as pve-guest-common AbstractConfig.pm and pve-common Tools.pm do it: every change to a
// guest's config runs under an flock on a per-guest lock file (lock_config → lock_file_full), and a
// change that spans a task stores a `lock:` property in the config itself (check_lock).

// PVE's flock waits (AbstractConfig lock_config: 10s; create_and_lock_config 5s; clone 1s, per
// pve-facts §2).
var defaultLockTimeouts = map[string]time.Duration{
	"default": 10 * time.Second,
	"create":  5 * time.Second,
	"clone":   1 * time.Second,
}

// lockFilePath is the flock file of a guest: QemuConfig.pm config_file_lock and LXC/Config.pm
// config_file_lock.
func lockFilePath(kind string, vmid int) string {
	if kind == "lxc" {
		return "/run/lock/lxc/pve-config-" + strconv.Itoa(vmid) + ".lock"
	}
	return "/var/lock/qemu-server/lock-" + strconv.Itoa(vmid) + ".conf"
}

// lockTimeoutErr is PVE::Tools::lock_file_full's failure text.
func lockTimeoutErr(path string) string {
	return fmt.Sprintf("can't lock file '%s' - got timeout", path)
}

// flock is a held config flock; release it exactly once.
type flock struct {
	path   string
	shared bool
}

func (s *Sim) lockTimeout(which string) time.Duration {
	if d, ok := s.lockTimeouts[which]; ok {
		return d
	}
	return s.lockTimeouts["default"]
}

// acquireFlock takes a guest's config flock, waiting up to timeout. The caller holds s.mu; while waiting
// the mutex is released, so the caller must re-read any state afterwards. A shared lock coexists with
// other shared locks (lock_config_shared); an exclusive one with none.
func (s *Sim) acquireFlock(kind string, vmid int, shared bool, timeout time.Duration) (*flock, error) {
	path := lockFilePath(kind, vmid)
	deadline := time.Now().Add(timeout)
	for {
		n := s.flocks[path]
		if n == 0 || (shared && n > 0) {
			if shared {
				s.flocks[path] = n + 1
			} else {
				s.flocks[path] = -1
			}
			return &flock{path: path, shared: shared}, nil
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil, fmt.Errorf("%s", lockTimeoutErr(path))
		}
		wake := s.flockWake
		s.mu.Unlock()
		t := time.NewTimer(remaining)
		select {
		case <-wake:
		case <-t.C:
		}
		t.Stop()
		s.mu.Lock()
	}
}

// releaseFlock drops a flock (nil is a no-op). The caller holds s.mu.
func (s *Sim) releaseFlock(f *flock) {
	if f == nil {
		return
	}
	if f.shared && s.flocks[f.path] > 1 {
		s.flocks[f.path]--
	} else {
		delete(s.flocks, f.path)
	}
	close(s.flockWake)
	s.flockWake = make(chan struct{})
}

// lockGuestSync takes the flock of the request's guest for a synchronous handler, failing as PVE does
// with a 500 "can't lock file … got timeout".
func (s *Sim) lockGuestSync(kind string, vmid int, which string) (*flock, error) {
	f, err := s.acquireFlock(kind, vmid, false, s.lockTimeout(which))
	if err != nil {
		return nil, dieErr("%s", err.Error())
	}
	return f, nil
}

// flockHold is a guest's config flock a synchronous handler holds until it returns, unless it hands it
// to the worker it forks (fork_worker inside lock_config: the worker inherits the flock).
type flockHold struct {
	s      *Sim
	fl     *flock
	handed bool
}

// holdGuestFlock is lockGuestSync for a handler that may hand the flock to its worker; the handler
// defers release.
func (s *Sim) holdGuestFlock(kind string, vmid int, which string) (*flockHold, error) {
	fl, err := s.lockGuestSync(kind, vmid, which)
	if err != nil {
		return nil, err
	}
	return &flockHold{s: s, fl: fl}, nil
}

// release drops the flock unless it was handed to a worker.
func (h *flockHold) release() {
	if !h.handed {
		h.s.releaseFlock(h.fl)
	}
}

// hand gives the flock to the worker, whose task releases it when it ends; a nil hold (skiplock) hands
// none.
func (h *flockHold) hand() *flock {
	if h == nil {
		return nil
	}
	h.handed = true
	return h.fl
}

// lockedGuest starts a synchronous handler under lock_config: it takes the flock of the request's guest,
// loads its config and refuses a locked guest (check_lock), failing as PVE does. The caller defers release.
func (s *Sim) lockedGuest(c *call, kind string) (*guest, *flockHold, error) {
	h, err := s.holdGuestFlock(kind, c.vmid(), "default")
	if err != nil {
		return nil, nil, err
	}
	g, err := s.guestOn(c, kind)
	if err == nil {
		if lerr := checkLock(g); lerr != nil {
			err = dieErr("%s", lerr.Error())
		}
	}
	if err != nil {
		h.release()
		return nil, nil, err
	}
	return g, h, nil
}

// lockedUnlessSkiplock is lockedGuest for a power handler of a container, whose worker inherits the
// flock; with skiplock=1 it takes none and keeps the guest g it found.
func (s *Sim) lockedUnlessSkiplock(c *call, g *guest) (*guest, *flockHold, error) {
	if c.str("skiplock") == "1" {
		return g, nil, nil
	}
	return s.lockedGuest(c, g.kind)
}

// checkSkiplock refuses skiplock=1 to anyone but root@pam.
func checkSkiplock(c *call) error {
	if c.str("skiplock") == "1" && !c.isRoot() {
		return paramErr(map[string]string{"skiplock": "Only root may use this option."})
	}
	return nil
}

// guestSkiplock is guestOn for a handler that takes skiplock, after checkSkiplock.
func (s *Sim) guestSkiplock(c *call, kind string) (*guest, error) {
	if err := checkSkiplock(c); err != nil {
		return nil, err
	}
	return s.guestOn(c, kind)
}

// checkLock is AbstractConfig check_lock: "VM 100 is locked (backup)" / "CT 100 is locked (disk)".
func checkLock(g *guest) error {
	if l := g.conf()["lock"]; l != "" {
		return fmt.Errorf("%s %d is locked (%s)", g.typeWord(), g.vmid, l)
	}
	return nil
}

// SetLock sets (or with "" clears) a guest's `lock:` property by hand, as a backup or migration would.
func (s *Sim) SetLock(vmid int, lock string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.guests[vmid]
	if !ok {
		return fmt.Errorf("set lock: guest %d does not exist", vmid)
	}
	if lock == "" {
		delete(g.conf(), "lock")
	} else {
		g.conf()["lock"] = lock
	}
	g.write()
	return nil
}

// LockFor sets a guest's `lock:` property (e.g. "backup") now and clears it after d, as a vzdump run
// would.
func (s *Sim) LockFor(vmid int, lock string, d time.Duration) error {
	if err := s.SetLock(vmid, lock); err != nil {
		return err
	}
	s.timer(d, func() {
		if g, ok := s.guests[vmid]; ok && g.conf()["lock"] == lock {
			delete(g.conf(), "lock")
			g.write()
		}
	})
	return nil
}

// timer runs fn under s.mu once d has passed. Unlike after, WaitTasks does not wait for it (long locks
// may outlive a test or a server).
func (s *Sim) timer(d time.Duration, fn func()) {
	time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		fn()
	})
}

// HoldFlock takes a guest's config flock from outside the API (kind "qemu" or "lxc") and returns the
// function that releases it, so tests can create flock contention deterministically.
func (s *Sim) HoldFlock(kind string, vmid int) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.acquireFlock(kind, vmid, false, s.lockTimeout("default"))
	if err != nil {
		return nil, err
	}
	done := false
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !done {
			done = true
			s.releaseFlock(f)
		}
	}, nil
}

// after runs fn under s.mu once d has passed; WaitTasks waits for it.
func (s *Sim) after(d time.Duration, fn func()) {
	s.taskWG.Add(1)
	go func() {
		defer s.taskWG.Done()
		if d > 0 {
			time.Sleep(d)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		fn()
	}()
}
