package secrets

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// HostFiles says whether a secrets file outside the repository may be read from this host's disk.
type HostFiles int

const (
	// RepositoryOnly refuses a secrets file outside the repository: a deployed service reads what the
	// repository holds and nothing of the host it runs on.
	RepositoryOnly HostFiles = iota
	// HostDisk reads a secrets file outside the repository (an absolute path, or one under ~) from this
	// host's disk: the operator's own commands, and services started with --local-secrets.
	HostDisk
)

// ErrOutsideRepository is the refusal of a secrets file outside the repository under RepositoryOnly.
var ErrOutsideRepository = errors.New("the secrets file is outside the repository")

// decryptTimeout bounds one decryption (SOPS may ask a key service).
const decryptTimeout = 30 * time.Second

// IsHostPath reports whether a secrets-file path lies outside the repository: absolute, or under ~.
func IsHostPath(file string) bool { return filepath.IsAbs(file) || strings.HasPrefix(file, "~") }

// ReadClusterFile reads and decrypts a cluster's secrets file, as the cluster's configuration resolves its
// path: a relative path from the repository tree, a path outside it from this host's disk when host allows
// it. A file that cannot be read is an error of class ClassFileMissing naming it.
func (d *Decryptor) ReadClusterFile(ctx context.Context, tree fs.FS, file string, host HostFiles) (*Store, error) {
	var data []byte
	var err error
	if IsHostPath(file) {
		if host != HostDisk {
			return nil, fmt.Errorf("secrets-file %s: %w", file, ErrOutsideRepository)
		}
		var local string
		if local, err = ExpandHome(file); err != nil {
			return nil, fmt.Errorf("secrets-file %s: %w", file, err)
		}
		data, err = os.ReadFile(local)
	} else {
		data, err = fs.ReadFile(tree, file)
	}
	if err != nil {
		return nil, MissingFileError(file)
	}
	dctx, cancel := context.WithTimeout(ctx, decryptTimeout)
	defer cancel()
	return d.Decrypt(dctx, file, data)
}

// ExpandHome replaces a leading ~ (alone or followed by /) with the user's home directory.
func ExpandHome(p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expand %s: %w", p, err)
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~")), nil
}
