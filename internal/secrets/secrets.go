// Package secrets decrypts a cluster's SOPS-encrypted secrets file in-process and keeps what it holds from
// ever being printed.
//
// A secrets file is a YAML SOPS document (age recipients first; every SOPS key backend works) that decrypts
// to
//
//	secrets:            # flat name → scalar: PVE and git credentials
//	  proxops-token: …
//	cloud-init:
//	  ssh-keys:         # name → one OpenSSH public-key line
//	    main: "ssh-ed25519 AAAA… ops@example"
//	  passwords:        # name → cipassword plaintext
//	    default: "…"
//
// Decrypt (or a Decryptor, which caches by content hash so a new commit of the file is picked up without a
// restart) turns the file's bytes into a Store; its lookups return Values, which print as <redacted> through
// every fmt verb, error, JSON, YAML, text and slog path. Value.Reveal is the only way to the plaintext.
//
// Failures are *Error values with a Class (file missing, not encrypted, no key, tampered, malformed, missing
// entry, bad reference, no credentials), usable with errors.Is against ErrNoKey and the other sentinels. Their
// messages name the file, the position, the entry and the field that referenced it, and never a value; sops'
// own error text is never repeated, since it can carry key or value material.
//
// ResolvePVECredentials applies the predecessor's credential precedence (secrets file over environment over
// configuration, fail closed); Store.ResolveSSHKeys turns ssh-key-refs into key lines and the digest a plan
// carries instead of the keys.
package secrets
