package repo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Discover returns the root of the repository that contains dir: the nearest directory, dir itself or an
// ancestor, that holds a .git entry (a directory, or a file for a linked work tree).
func Discover(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("discover repository from %s: %w", dir, err)
	}
	for d := abs; ; d = filepath.Dir(d) {
		_, err := os.Lstat(filepath.Join(d, ".git"))
		if err == nil {
			return d, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("discover repository from %s: %w", dir, err)
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no ProxOps GitOps repository found: no .git in %s or any parent directory; run inside a repository or pass --repo", abs)
		}
	}
}
