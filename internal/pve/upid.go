package pve

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/pveformat"
)

// UPID identifies a PVE task: UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>: (pve-common
// src/PVE/UPID.pm). UPIDs arrive from PVE and over NATS (intent records), so they are always parsed and
// validated before use; the client library's own task constructor panics on a malformed one.
type UPID struct {
	Node      string
	PID       uint64
	PStart    uint64
	StartTime int64
	Type      string
	ID        string
	User      string
	raw       string
}

// String returns the UPID as PVE spells it.
func (u UPID) String() string { return u.raw }

// ParseUPID parses and validates a UPID with the rules of PVE's regex
// ^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):
// ([^:\s/]+):([^:\s/]*):([^:\s/]+):$ (written out by hand: no panics, no regex backtracking).
func ParseUPID(s string) (UPID, error) {
	bad := func(why string) (UPID, error) {
		return UPID{}, fmt.Errorf("malformed upid %q: %s", truncate(s, 120), why)
	}
	rest, ok := strings.CutPrefix(s, "UPID:")
	if !ok {
		return bad("missing UPID: prefix")
	}
	if !strings.HasSuffix(rest, ":") {
		return bad("missing trailing colon")
	}
	f := strings.Split(strings.TrimSuffix(rest, ":"), ":")
	if len(f) != 7 {
		return bad(fmt.Sprintf("want 7 fields, got %d", len(f)))
	}
	if !pveformat.ValidNodeName(f[0]) {
		return bad("invalid node name")
	}
	u := UPID{Node: f[0], Type: f[4], ID: f[5], User: f[6], raw: s}
	var err error
	if u.PID, err = parseHexField(f[1], 8, 8); err != nil {
		return bad("pid: " + err.Error())
	}
	if u.PStart, err = parseHexField(f[2], 8, 9); err != nil {
		return bad("pstart: " + err.Error())
	}
	st, err := parseHexField(f[3], 8, 8)
	if err != nil {
		return bad("starttime: " + err.Error())
	}
	u.StartTime = int64(st)
	if u.Type == "" || !upidText(u.Type) {
		return bad("invalid task type")
	}
	if !upidText(u.ID) {
		return bad("invalid task id")
	}
	if u.User == "" || !upidText(u.User) {
		return bad("invalid user")
	}
	return u, nil
}

func parseHexField(s string, minLen, maxLen int) (uint64, error) {
	if len(s) < minLen || len(s) > maxLen {
		return 0, fmt.Errorf("want %d to %d hex digits", minLen, maxLen)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("not hex")
	}
	return v, nil
}

// upidText is [^:\s/]*.
func upidText(s string) bool {
	for _, r := range s {
		switch r {
		case ':', '/', ' ', '\t', '\n', '\r', '\f', '\v':
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
