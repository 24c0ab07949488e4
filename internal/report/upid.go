package report

import "regexp"

// upidPattern is a PVE task id, UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:, in an error
// message. The pid, process start and start time differ from one run to the next.
var upidPattern = regexp.MustCompile(`UPID:([^:\s]+):[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+:([^:\s]*):([^:\s]*):([^:\s]*):`)

// maskUPIDs replaces the parts of every task id in msg that differ between runs with "*", keeping the node,
// task type, id and user, so that the same failure gives the same message and the report stays
// deterministic.
func maskUPIDs(msg string) string {
	return upidPattern.ReplaceAllString(msg, "UPID:$1:*:*:*:$2:$3:$4:")
}
