package pyroscope

import (
	"context"
	"flag"
	"fmt"
	"net/url"

	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"

	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/logx"
	"github.com/slurmscope/slurmscope/agent/service"
	"github.com/slurmscope/slurmscope/agent/ship"
	"github.com/slurmscope/slurmscope/agent/spool"
	"github.com/slurmscope/slurmscope/internal/units"
	"github.com/slurmscope/slurmscope/schema"
)

// Kind pushes the agent's profiles to Pyroscope when --pyroscope-url is set,
// through the spool in --spool-dir.
type Kind struct {
	cfg    Config
	window Window
	spool  ship.SpoolFlags
}

var _ service.Kind = (*Kind)(nil)

// Flags registers --pyroscope-url and the other --pyroscope-* flags of
// package httpclient, the ingestion window and the spool.
func (k *Kind) Flags(fs *flag.FlagSet) {
	httpclient.RegisterFlags(fs, "pyroscope", &k.cfg.Config, "Pyroscope", "Pyroscope base URL to push to (push.v1.PusherService/Push)")
	fs.Var(units.NewDuration(&k.window.OlderThan, DefaultWindow.OlderThan), "pyroscope-reject-older-than",
		"the server's -validation.reject-older-than: spooled profiles older than this are dropped before sending (counted as too_old); 0: no bound")
	fs.Var(units.NewDuration(&k.window.NewerThan, DefaultWindow.NewerThan), "pyroscope-reject-newer-than",
		"the server's -validation.reject-newer-than: profiles it refuses as ahead of its clock by more than this are held until it takes them; 0: no bound")
	k.spool.Register(fs, "", "/var/lib/slurmscope/spool", 256<<20, "pushes waiting for Pyroscope")
}

// Check refuses a URL without scheme or host, a non-positive timeout, a
// negative ingestion window and a spool bound no spool can keep.
func (k *Kind) Check() error {
	if err := k.cfg.CheckFlags("pyroscope", "http://pyroscope:4040"); err != nil {
		return err
	}
	if k.window.OlderThan < 0 {
		return fmt.Errorf("--pyroscope-reject-older-than %v: must not be negative (0: no bound)", k.window.OlderThan)
	}
	if k.window.NewerThan < 0 {
		return fmt.Errorf("--pyroscope-reject-newer-than %v: must not be negative (0: no bound)", k.window.NewerThan)
	}
	return k.spool.Check()
}

// Open builds the client and opens the spool, when --pyroscope-url is set.
func (k *Kind) Open(env service.Env) (service.Service, error) {
	if k.cfg.URL == "" {
		return nil, nil
	}
	client, err := NewClient(k.cfg)
	if err != nil {
		return nil, fmt.Errorf("--pyroscope-url: %w", err)
	}
	sp, err := k.spool.Open(env.Log)
	if err != nil {
		return nil, err
	}
	sh := NewShipper(sp, client, WithLogger(env.Log), WithIngestionWindow(k.window))
	env.Reg.MustRegister(NewCollector(sh))
	name := k.cfg.URL
	if u, err := url.Parse(name); err == nil {
		name = u.Redacted()
	}
	return &Sink{Shipper: sh, spool: sp, name: "pyroscope " + name}, nil
}

// Sink spools one push request per profile, and its Run ships them: a
// request the server rejects then costs one job's interval, not
// everyone's.
type Sink struct {
	*Shipper
	spool *spool.Spool
	name  string
}

var (
	_ daemon.Sink     = (*Sink)(nil)
	_ daemon.Reporter = (*Sink)(nil)
	_ service.Service = (*Sink)(nil)
)

// Write implements daemon.Sink.
func (s *Sink) Write(_ context.Context, outs []daemon.Output) error {
	var errs []error
	for _, o := range outs {
		req, err := PushRequest(o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := s.Enqueue(req); err != nil {
			errs = append(errs, err)
		}
	}
	// One line however many profiles failed alike (a full spool).
	return logx.Join(errs...)
}

// Delivery implements daemon.Reporter: bytes pushed, requests dropped,
// what waits in the spool.
func (s *Sink) Delivery() daemon.Delivery {
	st := s.Stats()
	d := daemon.Delivery{Bytes: st.PushedBytes, SpoolFiles: st.SpoolEntries, SpoolBytes: st.SpoolBytes}
	for _, n := range st.Dropped {
		d.Dropped += n
	}
	return d
}

// Close closes the spool, once Run has returned.
func (s *Sink) Close() error { return s.spool.Close() }

func (s *Sink) String() string { return s.name }

// PushRequest is the push request of one profile: its series labels,
// service_name as the series' own.
func PushRequest(o daemon.Output) (*pushv1.PushRequest, error) {
	labels := map[string]string{}
	for _, l := range o.Labels {
		if l.Name != schema.ServiceName {
			labels[l.Name] = l.Value
		}
	}
	return NewPushRequest(Series{Name: o.Type.Name, ServiceName: o.ServiceName, Labels: labels, Profiles: [][]byte{o.Data}})
}
