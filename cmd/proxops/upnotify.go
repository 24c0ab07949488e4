package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/services/notifier"
)

// notificationSecrets decrypts notifications.secrets-file: a relative path is relative to the directory of
// the --config file that sets it, else to the repository's work tree (the file is read from disk when up
// starts). Nil when no file is named.
func notificationSecrets(ctx context.Context, uc upConfig) (*secrets.Store, error) {
	name := uc.cfg.Notifications.SecretsFile
	if name == "" {
		return nil, nil
	}
	p, err := secrets.ExpandHome(name)
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(p) {
		base := uc.src.Root
		if uc.src.Process != nil && uc.src.ConfigFile != "" {
			if _, set := uc.src.Process.Positions["notifications.secrets-file"]; set {
				base = filepath.Dir(uc.src.ConfigFile)
			}
		}
		if base == "" {
			return nil, fmt.Errorf("notifications.secrets-file %s: a relative path needs a local repository or --config", name)
		}
		p = filepath.Join(base, p)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("notifications.secrets-file: %w", err)
	}
	store, err := secrets.NewDecryptor(secretsKeys()).Decrypt(ctx, p, data)
	if err != nil {
		return nil, fmt.Errorf("notifications.secrets-file: %w", err)
	}
	return store, nil
}

// startNotifier runs the notifier: the plan events of every cluster, told to the configured providers.
func (s *system) startNotifier(ncfg notifier.Config) error {
	nb, err := s.connect(s.rctx, "notifier")
	if err != nil {
		return err
	}
	ncfg.Bus, ncfg.Registry, ncfg.Logger = nb, s.cfg.Registry, s.log.With("service", "notifier")
	s.goRun("notifier", nb, func() error { return notifier.Run(s.rctx, ncfg) })
	return nil
}

// waitNotifierCaughtUp waits (at most 15 s) until the notifier has settled every plan event published so
// far, so up --once stops only once what the reconcile has to tell is told.
func waitNotifierCaughtUp(ctx context.Context, b *bus.Bus, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		cs, err := b.DurableConsumers(ctx, bus.StreamPlans)
		if err == nil {
			for _, c := range cs {
				if c.Consumer == bus.ConsumerNotifierPlans && c.Pending == 0 && c.AckPending == 0 {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			log.Warn("the notifier has not sent every notification yet; stopping anyway (it sends them on the next start)")
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}
