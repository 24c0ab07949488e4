package secrets

import (
	"encoding/base64"
	"encoding/binary"
	"strings"
)

// checkSSHKeyLine returns why s is not one OpenSSH public-key line (authorized_keys form: optional options,
// key type, base64 key blob, optional comment), or "". The message never contains the line.
func checkSSHKeyLine(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		return "must be one OpenSSH public-key line, found several lines"
	}
	fields := strings.Fields(s)
	if len(fields) < 2 {
		return "is not an OpenSSH public-key line (want: <type> <base64 key> [comment])"
	}
	for i := 0; i+1 < len(fields); i++ {
		if blobHasType(fields[i+1], fields[i]) {
			return ""
		}
	}
	return "is not an OpenSSH public-key line: no key type followed by a matching base64 key blob"
}

// blobHasType reports whether b64 decodes to an SSH public-key blob whose leading type string is typ.
func blobHasType(b64, typ string) bool {
	if !strings.HasPrefix(typ, "ssh-") && !strings.HasPrefix(typ, "ecdsa-") && !strings.HasPrefix(typ, "sk-") {
		return false
	}
	blob, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(blob) < 4 {
		return false
	}
	n := binary.BigEndian.Uint32(blob)
	return uint64(n) == uint64(len(typ)) && len(blob) >= 4+len(typ) && string(blob[4:4+len(typ)]) == typ
}
