package main

import (
	"flag"
	"io"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
)

// jobOptions is everything `slurmscope job` (and `slurmscope diff`, which
// reaches the same servers) is told, by flags, the environment or the
// config file (settings.go).
type jobOptions struct {
	pyro, prom backendOptions
	tenant     string
	timeout    durationValue
	maxQuery   durationValue
	parallel   int
	maxCalls   int
	since      sinceValue
	to         string
	asJSON     bool
	config     string
	th         findings.Thresholds
	ranks      bool // job: the per-rank table instead of the report

	src *sources // where each setting came from, for hints and errors
}

// backendOptions is how to reach one backend. Its flags are spelled as
// the agent's (agent/httpclient.RegisterFlags), so that one site's
// settings read the same on compute and login nodes.
type backendOptions struct {
	name       string // "pyroscope", "prometheus": the flags' prefix
	url        string
	user       string
	passFile   string
	tokenFile  string
	pass       string // the config file's basic_auth_password
	token      string // the config file's bearer_token
	caFile     string
	certFile   string
	keyFile    string
	serverName string
	insecure   bool
}

// flagOnly are the flags that say what to ask, not how to reach the
// servers: they come from the command line only.
var flagOnly = map[string]bool{"config": true, "json": true, "since": true, "to": true, "ranks": true,
	"left": true, "right": true, "top": true, "profile-type": true}

func newJobFlags(stderr io.Writer) (*flag.FlagSet, *jobOptions) {
	fs, o := newQueryFlags("slurmscope job", stderr)
	fs.BoolVar(&o.ranks, "ranks", false, "print the job's ranks instead: each one's CPU time, top function and its share, and deviation from the median rank, with its straggler findings")
	return fs, o
}

// newQueryFlags registers the flags of every command that asks the
// servers: how to reach them, the range, the call limits and the finding
// thresholds (a site's config file may set any of them).
func newQueryFlags(name string, stderr io.Writer) (*flag.FlagSet, *jobOptions) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &jobOptions{pyro: backendOptions{name: "pyroscope"}, prom: backendOptions{name: "prometheus"},
		timeout: durationValue(30 * time.Second), maxQuery: durationValue(query.DefaultMaxQueryLength),
		since: sinceValue{back: 24 * time.Hour}}
	o.pyro.flags(fs, "Pyroscope", "Pyroscope base URL")
	o.prom.flags(fs, "Prometheus", "Prometheus (or Mimir/Thanos) base URL")
	fs.StringVar(&o.tenant, "tenant", "", "X-Scope-OrgID sent to both")
	fs.Var(&o.since, "since", "look back this far from --to, a `duration` (24h, 7d), or start at a time (2026-11-28, RFC 3339)")
	fs.StringVar(&o.to, "to", "", "end of the range: RFC 3339, 2026-11-30T12:00:00 or 2026-11-30 (local time; default: now)")
	fs.Var(&o.timeout, "timeout", "`duration` of one backend call at most")
	fs.Var(&o.maxQuery, "max-query-length", "Pyroscope's max_query_length, a `duration`: longer ranges are asked for in chunks of it")
	fs.IntVar(&o.parallel, "parallel", query.DefaultParallel, "backend calls in flight at once")
	fs.IntVar(&o.maxCalls, "max-calls", query.DefaultMaxCalls, "most Pyroscope calls one query may make")
	fs.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	fs.StringVar(&o.config, "config", "", "YAML file of settings (default "+defaultConfigPath+" where it exists; \"\" reads none)")
	o.th.Flags(fs)
	return fs, o
}

// flags registers b's flags, --<name>-<setting>. Passwords and tokens are
// read from files, never given on the command line, where every user of
// the login node could read them in ps.
func (b *backendOptions) flags(fs *flag.FlagSet, backend, urlHelp string) {
	p := b.name + "-"
	fs.StringVar(&b.url, p+"url", "", urlHelp)
	fs.StringVar(&b.user, p+"basic-auth-user", "", "basic auth user for "+backend+" (with --"+p+"basic-auth-password-file)")
	fs.StringVar(&b.passFile, p+"basic-auth-password-file", "", "file holding the basic auth password for "+backend)
	fs.StringVar(&b.tokenFile, p+"bearer-token-file", "", "file holding a bearer token for "+backend)
	fs.StringVar(&b.caFile, p+"ca-file", "", "PEM CA bundle to verify "+backend+" with")
	fs.StringVar(&b.certFile, p+"cert-file", "", "client certificate for mutual TLS with "+backend)
	fs.StringVar(&b.keyFile, p+"key-file", "", "client key for mutual TLS with "+backend)
	fs.StringVar(&b.serverName, p+"server-name", "", "server name to verify in "+backend+"'s certificate instead of the URL's host")
	fs.BoolVar(&b.insecure, p+"insecure-skip-verify", false, "INSECURE, testing only: do not verify "+backend+"'s certificate")
}

// credentialSettings are b's settings that together make its
// credentials; the config-only ones (inline secrets) included.
func (b *backendOptions) credentialSettings() []string {
	p := b.name + "-"
	return []string{p + "basic-auth-user", p + "basic-auth-password-file", p + "basic-auth-password", p + "bearer-token-file", p + "bearer-token"}
}

// configOnly are the settings only the config file may give, and where
// they go: secrets inline, which a flag would show in ps and an
// environment variable would pass to every child process.
func (o *jobOptions) configOnly() map[string]*string {
	return map[string]*string{
		"pyroscope-basic-auth-password":  &o.pyro.pass,
		"pyroscope-bearer-token":         &o.pyro.token,
		"prometheus-basic-auth-password": &o.prom.pass,
		"prometheus-bearer-token":        &o.prom.token,
	}
}
