package bus

import "flag"

// RegisterFlags registers the NATS connection flags of a service's command on fs, each with an environment
// variable as its default (read through getenv). The password is read from PROXOPS_NATS_PASSWORD only, never
// from a flag, so it does not show in process listings.
func (cfg *ConnectConfig) RegisterFlags(fs *flag.FlagSet, getenv func(string) string) {
	env := func(name string) string { return getenv(name) }
	fs.StringVar(&cfg.URL, "nats-url", env("PROXOPS_NATS_URL"), "NATS server URL(s), comma-separated [PROXOPS_NATS_URL]")
	fs.StringVar(&cfg.CredsFile, "nats-creds", env("PROXOPS_NATS_CREDS"), "NATS credentials file [PROXOPS_NATS_CREDS]")
	fs.StringVar(&cfg.User, "nats-user", env("PROXOPS_NATS_USER"), "NATS user; the password is read from PROXOPS_NATS_PASSWORD [PROXOPS_NATS_USER]")
	fs.StringVar(&cfg.NKeySeedFile, "nats-nkey", env("PROXOPS_NATS_NKEY"), "NATS nkey seed file [PROXOPS_NATS_NKEY]")
	fs.StringVar(&cfg.TLSCA, "nats-ca", env("PROXOPS_NATS_CA"), "CA file verifying the NATS servers [PROXOPS_NATS_CA]")
	fs.StringVar(&cfg.TLSCert, "nats-cert", env("PROXOPS_NATS_CERT"), "client certificate for NATS [PROXOPS_NATS_CERT]")
	fs.StringVar(&cfg.TLSKey, "nats-key", env("PROXOPS_NATS_KEY"), "client key for NATS [PROXOPS_NATS_KEY]")
	cfg.Password = getenv("PROXOPS_NATS_PASSWORD")
}
