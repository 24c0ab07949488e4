package pvesim

import (
	mrand "math/rand/v2"
	"time"
)

// stampUnix is the time, in Unix seconds, the simulator writes into the state it keeps: Spec.Clock when
// set, so that identical runs leave identical configs, or else the current time.
func (s *Sim) stampUnix() int64 {
	if !s.clock.IsZero() {
		return s.clock.Unix()
	}
	return time.Now().Unix()
}

// idStream is the random stream of the identifiers the simulator generates for guest vmid (MACs, UUIDs,
// password salts). It is seeded from the spec's seed and the vmid, so that with a fixed seed a guest's
// identifiers depend only on what was done to that guest: concurrent creates on other nodes, in whatever
// order they arrive, do not change them. The caller holds s.mu.
func (s *Sim) idStream(vmid int) *mrand.Rand {
	r, ok := s.idRNG[vmid]
	if !ok {
		r = mrand.New(mrand.NewPCG(s.seed, splitmix64(uint64(vmid))))
		s.idRNG[vmid] = r
	}
	return r
}
