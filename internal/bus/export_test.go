package bus

import "time"

// SetFollowStallCheck shortens how often b's silent followers check their stream.
func SetFollowStallCheck(b *Bus, d time.Duration) { b.followStallCheck = d }
