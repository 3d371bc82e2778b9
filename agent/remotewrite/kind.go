package remotewrite

import (
	"flag"
	"fmt"

	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/service"
	"github.com/slurmscope/slurmscope/agent/ship"
	"github.com/slurmscope/slurmscope/agent/spool"
	"github.com/slurmscope/slurmscope/internal/units"
	"github.com/slurmscope/slurmscope/schema"
)

// Kind remote-writes the agent's metrics when --prometheus-remote-write-url
// is set, through the spool in --remote-write-spool-dir.
type Kind struct {
	cfg   Config
	spool ship.SpoolFlags
}

var _ service.Kind = (*Kind)(nil)

// Flags registers the --prometheus-remote-write-* flags of package
// httpclient, the interval and the spool.
func (k *Kind) Flags(fs *flag.FlagSet) {
	httpclient.RegisterFlags(fs, "prometheus-remote-write", &k.cfg.Config, "the remote-write endpoint",
		"also push the agent's metrics with Prometheus remote-write 1.0 to this URL (e.g. http://prometheus:9090/api/v1/write)")
	fs.Var(units.NewDuration(&k.cfg.Interval, DefaultInterval), "prometheus-remote-write-interval", "how often metrics are remote-written")
	k.spool.Register(fs, "remote-write-", "/var/lib/slurmscope/remote-write", 64<<20, "metric batches waiting for the remote-write endpoint")
}

// Check refuses a URL without scheme or host, a non-positive timeout or
// interval, and a spool bound no spool can keep.
func (k *Kind) Check() error {
	if err := k.cfg.CheckFlags("prometheus-remote-write", "http://prometheus:9090/api/v1/write"); err != nil {
		return err
	}
	if k.cfg.Interval <= 0 {
		return fmt.Errorf("--prometheus-remote-write-interval %v: must be positive", k.cfg.Interval)
	}
	return k.spool.Check()
}

// Open opens the spool and builds the Writer of env's registry, when
// --prometheus-remote-write-url is set.
func (k *Kind) Open(env service.Env) (service.Service, error) {
	if k.cfg.URL == "" {
		return nil, nil
	}
	sp, err := k.spool.Open(env.Log)
	if err != nil {
		return nil, err
	}
	cfg := k.cfg
	// Self-metrics carry no node label of their own.
	cfg.ExternalLabels = map[string]string{schema.HostName.Label: env.HostName}
	w, err := New(cfg, sp, env.Gatherer, env.Log)
	if err != nil {
		sp.Close()
		return nil, fmt.Errorf("--prometheus-remote-write-url: %w", err)
	}
	env.Reg.MustRegister(NewCollector(w))
	return &writerService{Writer: w, spool: sp}, nil
}

// writerService closes the Writer's spool once it stopped.
type writerService struct {
	*Writer
	spool *spool.Spool
}

var _ service.Service = (*writerService)(nil)

func (s *writerService) Close() error { return s.spool.Close() }
