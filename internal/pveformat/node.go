package pveformat

// MaxNodeName is the longest node name ProxOps accepts.
const MaxNodeName = 64

// ValidNodeName reports whether s is a node name in PVE's pve-node format,
// ^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$: letters, digits and inner '-'. It checks byte by byte: node names
// are checked on every message of every operation.
func ValidNodeName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}
