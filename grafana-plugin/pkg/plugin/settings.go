package plugin

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/prometheus/common/model"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/schema"
)

// Settings is the datasource's jsonData; secrets come from secureJsonData
// under the keys named in secretKeys.
type Settings struct {
	Pyroscope  BackendSettings `json:"pyroscope"`
	Prometheus BackendSettings `json:"prometheus"`
	// TenantID is sent as X-Scope-OrgID to both, unless a backend sets its own.
	TenantID string `json:"tenantId"`
	// DefaultProfileType is used by queries that name none.
	DefaultProfileType string `json:"defaultProfileType"`
	// TimeoutSeconds bounds each backend call (default 30).
	TimeoutSeconds int       `json:"timeoutSeconds"`
	Ownership      Ownership `json:"jobOwnership"`
	// PyroscopeMaxQueryLength is the server's max_query_length ("24h",
	// "1d"; default 24h): longer ranges are asked for in chunks of it.
	PyroscopeMaxQueryLength model.Duration `json:"pyroscopeMaxQueryLength"`
	// MaxConcurrentCalls bounds the backend calls one query has in flight
	// (default 8).
	MaxConcurrentCalls int `json:"maxConcurrentCalls"`
	// MaxCallsPerQuery caps the Pyroscope calls of one query, selectors ×
	// time chunks (default 1024); a query over it fails with a message
	// saying so.
	MaxCallsPerQuery int `json:"maxCallsPerQuery"`
	// Findings are the thresholds findings are judged by; unset ones take
	// their defaults (findings.Defaults).
	Findings findings.Thresholds `json:"findings"`
}

// BackendSettings is one backend's connection.
type BackendSettings struct {
	URL      string `json:"url"`
	TenantID string `json:"tenantId"`
	// Auth is "", "basic" or "bearer".
	Auth          string `json:"auth"`
	BasicUser     string `json:"basicAuthUser"`
	TLSSkipVerify bool   `json:"tlsSkipVerify"`
	TLSServerName string `json:"tlsServerName"`
	TLSClientAuth bool   `json:"tlsClientAuth"`
	TLSWithCACert bool   `json:"tlsWithCACert"`
}

// Ownership is the opt-in "users see only their own jobs". It is only as
// strong as the identity Grafana gives the plugin: a local Grafana user
// may change their own login and email, so it needs users from a source
// they cannot change (LDAP, OAuth, an auth proxy).
type Ownership struct {
	Enabled bool `json:"enabled"`
	// Users and Teams (logins, team names) see every job, like admins.
	AllowUsers []string `json:"allowUsers"`
	AllowTeams []string `json:"allowTeams"`
	// MatchField is the Grafana user's field that must equal
	// slurm.job.user: MatchLogin (the default) or MatchEmail.
	MatchField string `json:"matchField"`
	// EmailDomain is, with MatchEmail, the one domain whose addresses
	// name Slurm users: bob@EmailDomain sees bob's jobs; an address
	// elsewhere sees none.
	EmailDomain string `json:"emailDomain"`
	// AllowAlertQueries lets alert rules query while ownership is on.
	// Grafana evaluates alert rules as an org admin, so ownership cannot
	// narrow them: whoever may write an alert rule on this datasource
	// then sees every user's jobs through it. Off, alert queries are
	// refused.
	AllowAlertQueries bool `json:"allowAlertQueries"`
}

// Ownership match fields.
const (
	MatchLogin = "login"
	MatchEmail = "email"
)

// Secret keys in secureJsonData, per backend: "<backend><Key>", e.g.
// pyroscopeBasicAuthPassword, prometheusBearerToken, pyroscopeTlsCACert.
const (
	keyBasicPassword = "BasicAuthPassword"
	keyBearer        = "BearerToken"
	keyCACert        = "TlsCACert"
	keyClientCert    = "TlsClientCert"
	keyClientKey     = "TlsClientKey"
)

// ParseSettings reads a datasource instance's settings.
func ParseSettings(s backend.DataSourceInstanceSettings) (Settings, error) {
	var out Settings
	if len(s.JSONData) > 0 {
		if err := json.Unmarshal(s.JSONData, &out); err != nil {
			return Settings{}, fmt.Errorf("datasource settings: %w", err)
		}
	}
	// A datasource created with only its main URL field set treats that
	// URL as Pyroscope's.
	if out.Pyroscope.URL == "" {
		out.Pyroscope.URL = s.URL
	}
	if out.DefaultProfileType == "" {
		out.DefaultProfileType = schema.DefaultProfileType.ID()
	}
	switch {
	case out.PyroscopeMaxQueryLength != 0 && time.Duration(out.PyroscopeMaxQueryLength) < time.Second:
		return Settings{}, fmt.Errorf("datasource settings: pyroscopeMaxQueryLength %s: want at least 1s", out.PyroscopeMaxQueryLength)
	case out.MaxConcurrentCalls < 0:
		return Settings{}, fmt.Errorf("datasource settings: maxConcurrentCalls %d is negative", out.MaxConcurrentCalls)
	case out.MaxCallsPerQuery < 0:
		return Settings{}, fmt.Errorf("datasource settings: maxCallsPerQuery %d is negative", out.MaxCallsPerQuery)
	}
	if err := out.Findings.WithDefaults().Validate(); err != nil {
		return Settings{}, fmt.Errorf("datasource settings: findings: %w", err)
	}
	if err := out.Ownership.check(); err != nil {
		return Settings{}, fmt.Errorf("datasource settings: jobOwnership: %w", err)
	}
	return out, nil
}

// engine is the query engine these settings ask for, without backends.
func (s Settings) engine() *query.Engine {
	return &query.Engine{MaxQueryLength: time.Duration(s.PyroscopeMaxQueryLength),
		Parallel: s.MaxConcurrentCalls, MaxCalls: s.MaxCallsPerQuery, Thresholds: s.Findings}
}

// backendConfig builds one backend's client configuration; name is
// "pyroscope" or "prometheus", the prefix of its secrets.
func (s Settings) backendConfig(name string, b BackendSettings, secrets map[string]string) (backends.Config, error) {
	c := backends.Config{URL: b.URL, TenantID: b.TenantID, Timeout: time.Duration(s.TimeoutSeconds) * time.Second}
	if c.TenantID == "" {
		c.TenantID = s.TenantID
	}
	switch b.Auth {
	case "":
	case "basic":
		if b.BasicUser == "" {
			return c, fmt.Errorf("%s: basic auth needs a user", name)
		}
		c.BasicUser, c.BasicPassword = b.BasicUser, secrets[name+keyBasicPassword]
	case "bearer":
		c.BearerToken = secrets[name+keyBearer]
		if c.BearerToken == "" {
			return c, fmt.Errorf("%s: bearer auth needs a token (%s%s)", name, name, keyBearer)
		}
	default:
		return c, fmt.Errorf("%s: auth %q: want basic or bearer", name, b.Auth)
	}
	c.TLS = backends.TLS{ServerName: b.TLSServerName, InsecureSkipVerify: b.TLSSkipVerify}
	if b.TLSWithCACert {
		c.TLS.CACert = secrets[name+keyCACert]
	}
	if b.TLSClientAuth {
		c.TLS.ClientCert, c.TLS.ClientKey = secrets[name+keyClientCert], secrets[name+keyClientKey]
	}
	return c, nil
}

func (o *Ownership) check() error {
	switch o.MatchField {
	case "":
		o.MatchField = MatchLogin
	case MatchLogin:
	case MatchEmail:
		d := o.EmailDomain
		if d == "" || strings.ContainsAny(d, "@ \t\n") || strings.HasPrefix(d, ".") {
			return fmt.Errorf("matchField email needs emailDomain, the domain of the addresses that name Slurm users (e.g. uni.example), got %q", d)
		}
	default:
		return fmt.Errorf("matchField %q: want %s or %s", o.MatchField, MatchLogin, MatchEmail)
	}
	return nil
}

// owner is the Slurm user a Grafana user is, by the configured field; ""
// when the user has none (and then sees nothing).
func (o Ownership) owner(u *backend.User) string {
	if u == nil {
		return ""
	}
	if o.MatchField != MatchEmail {
		return u.Login
	}
	local, domain, ok := strings.Cut(u.Email, "@")
	if !ok || local == "" || !strings.EqualFold(domain, o.EmailDomain) {
		return ""
	}
	return local
}
