package main

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
)

// backendConfig is how to reach b, with its secret and TLS files read now,
// so that a wrong path is a usage error before any call. Errors name the
// settings as the user gave them and never quote a secret.
func (o *jobOptions) backendConfig(b *backendOptions) (backends.Config, error) {
	c := backends.Config{URL: b.url, TenantID: o.tenant, Timeout: time.Duration(o.timeout)}
	if err := o.credentials(b, &c); err != nil {
		return c, err
	}
	t, err := o.tlsFiles(b)
	c.TLS = t
	return c, err
}

// credentials sets c's basic or bearer auth from b. They came from one
// source (resolve), so a missing half is named as that source spells it.
func (o *jobOptions) credentials(b *backendOptions, c *backends.Config) error {
	p := b.name + "-"
	basic := b.user != "" || b.passFile != "" || b.pass != ""
	bearer := b.tokenFile != "" || b.token != ""
	from := o.credSource(b)
	switch {
	case basic && bearer:
		return fmt.Errorf("%s credentials: give basic auth (%s) or a bearer token (%s), not both",
			b.name, o.src.spell(p+"basic-auth-user"), o.src.spell(p+"bearer-token-file"))
	case b.passFile != "" && b.pass != "":
		return fmt.Errorf("give %s or %s, not both", o.src.spell(p+"basic-auth-password-file"), o.src.spell(p+"basic-auth-password"))
	case b.tokenFile != "" && b.token != "":
		return fmt.Errorf("give %s or %s, not both", o.src.spell(p+"bearer-token-file"), o.src.spell(p+"bearer-token"))
	case basic && b.user == "":
		return fmt.Errorf("%s basic auth needs a user: %s", b.name, spellIn(o.src, p+"basic-auth-user", from))
	case basic && b.passFile == "" && b.pass == "":
		return fmt.Errorf("%s basic auth needs a password: %s", b.name, spellIn(o.src, p+"basic-auth-password-file", from))
	}
	var err error
	if basic {
		c.BasicUser, c.BasicPassword = b.user, b.pass
		if b.passFile != "" {
			c.BasicPassword, err = readSecret(o.src.spell(p+"basic-auth-password-file"), b.passFile)
		}
	}
	if bearer {
		c.BearerToken, err = o.token(b)
	}
	return err
}

// token is b's bearer token, which must fit in a header.
func (o *jobOptions) token(b *backendOptions) (string, error) {
	name, token := b.name+"-bearer-token", b.token
	if b.tokenFile != "" {
		name += "-file"
		var err error
		if token, err = readSecret(o.src.spell(name), b.tokenFile); err != nil {
			return "", err
		}
	}
	if strings.ContainsFunc(token, isControl) {
		return "", fmt.Errorf("%s: the token holds a line break or another control character", o.src.spell(name))
	}
	return token, nil
}

// credSource is where b's credentials came from (one source: resolve).
func (o *jobOptions) credSource(b *backendOptions) source {
	for _, n := range b.credentialSettings() {
		if f := o.src.from[n]; f != fromDefault {
			return f
		}
	}
	return fromDefault
}

// spellIn spells setting name as source from does, with the config file's
// path where that is the source.
func spellIn(s *sources, name string, from source) string {
	if from == fromConfig {
		return spellAs(name, from) + " in " + s.path()
	}
	return spellAs(name, from)
}

// readSecret reads a password or token file as the agent does: trailing
// line breaks dropped, and empty is an error, not "no auth".
func readSecret(what, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %v", what, err)
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) == 0 {
		return "", fmt.Errorf("%s: %s is empty", what, path)
	}
	return string(b), nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// tlsFiles reads b's CA bundle and client certificate: backends takes
// PEM contents, as Grafana's settings carry them.
func (o *jobOptions) tlsFiles(b *backendOptions) (backends.TLS, error) {
	p := b.name + "-"
	t := backends.TLS{ServerName: b.serverName, InsecureSkipVerify: b.insecure}
	if (b.certFile == "") != (b.keyFile == "") {
		return t, fmt.Errorf("%s and %s go together (mutual TLS)", o.src.spell(p+"cert-file"), o.src.spell(p+"key-file"))
	}
	for _, f := range []struct {
		name, path string
		dst        *string
	}{{p + "ca-file", b.caFile, &t.CACert}, {p + "cert-file", b.certFile, &t.ClientCert}, {p + "key-file", b.keyFile, &t.ClientKey}} {
		if f.path == "" {
			continue
		}
		pem, err := os.ReadFile(f.path)
		if err != nil {
			return t, fmt.Errorf("%s: %v", o.src.spell(f.name), err)
		}
		*f.dst = string(pem)
	}
	if t.CACert != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(t.CACert)) {
		return t, fmt.Errorf("%s: no PEM certificate in %s", o.src.spell(p+"ca-file"), b.caFile)
	}
	return t, nil
}

// datasourceHint is what backends adds to a 401 or 403, worded for
// Grafana's settings page; the CLI names its own settings instead.
const datasourceHint = " (check the credentials and tenant in the datasource settings)"

// explain rewrites the engine's advice, which is worded for Grafana, in
// the CLI's terms: a refused backend gets one line after the errors that
// says which credentials it was sent, from where, or how to give them.
func (o *jobOptions) explain(msg string) string {
	var hints []string
	for _, b := range []*backendOptions{&o.pyro, &o.prom} {
		refused := false
		for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden} {
			head := fmt.Sprintf("%s: HTTP %d %s", b.name, status, http.StatusText(status))
			refused = refused || strings.Contains(msg, head+datasourceHint)
			msg = strings.ReplaceAll(msg, head+datasourceHint, head)
		}
		if refused {
			hints = append(hints, b.name+": "+o.authHint(b))
		}
	}
	msg = strings.ReplaceAll(msg, datasourceHint, " (check the credentials and "+o.src.spell("tenant")+")")
	msg = strings.ReplaceAll(msg, "raise maxCallsPerQuery in the datasource settings", "raise "+o.src.spell("max-calls"))
	return strings.Join(append([]string{msg}, hints...), "\n")
}

// authHint says which credentials b was sent, from where, or how to give
// them.
func (o *jobOptions) authHint(b *backendOptions) string {
	tenant := o.src.spell("tenant")
	var given []string
	from := o.credSource(b)
	for _, n := range b.credentialSettings() {
		if o.src.from[n] != fromDefault {
			given = append(given, spellAs(n, from))
		}
	}
	if len(given) > 0 {
		where := strings.Join(given, " and ")
		if from == fromConfig {
			where += " in " + o.src.path()
		}
		return "check the credentials from " + where + ", and " + tenant
	}
	p := "--" + b.name + "-"
	return fmt.Sprintf("no credentials were given: set %sbasic-auth-user and %sbasic-auth-password-file, or %sbearer-token-file "+
		"(or SLURMSCOPE_%s_* in the environment, or under %s: in %s); and check %s",
		p, p, p, strings.ToUpper(b.name), b.name, o.src.path(), tenant)
}
