package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// defaultConfigPath is the site's settings file, read where it exists, so
// that on a login node `slurmscope job 4242` needs nothing else. A
// variable, so that tests do not read the host's.
var defaultConfigPath = "/etc/slurmscope/cli.yaml"

// configEnv names the config file when --config does not.
const configEnv = "SLURMSCOPE_CONFIG"

type source int

const (
	fromDefault source = iota
	fromFlag
	fromEnv
	fromConfig
)

// sources says where each setting came from, so that an error or a hint
// names the setting as the user wrote it.
type sources struct {
	configPath string // the file read; "" when none was
	from       map[string]source
}

// spell is how the user gave setting name (or would give it in the
// config file, for one only the file takes), the file's path included.
func (s *sources) spell(name string) string {
	from := s.from[name]
	if from == fromDefault && isConfigOnly(name) {
		from = fromConfig
	}
	if from == fromConfig {
		return spellAs(name, from) + " in " + s.path()
	}
	return spellAs(name, from)
}

// path is the config file read, or the default one where none was.
func (s *sources) path() string { return cmp.Or(s.configPath, defaultConfigPath) }

// spellAs is how setting name is written in source from: --flag-name,
// SLURMSCOPE_FLAG_NAME or section.key.
func spellAs(name string, from source) string {
	switch from {
	case fromEnv:
		return envName(name)
	case fromConfig:
		return configKey(name)
	}
	return "--" + name
}

// envName is a setting's environment variable: SLURMSCOPE_PYROSCOPE_URL.
func envName(name string) string {
	return "SLURMSCOPE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// configKey is a setting's key in the config file: a backend's settings
// sit in its section (pyroscope.basic_auth_user), the rest at the top.
func configKey(name string) string {
	key := name
	for _, b := range []string{"pyroscope", "prometheus"} {
		if rest, ok := strings.CutPrefix(name, b+"-"); ok {
			key = b + "." + rest
		}
	}
	return strings.ReplaceAll(key, "-", "_")
}

func isConfigOnly(name string) bool { return new(jobOptions).configOnly()[name] != nil }

// resolve fills what the command line left unset from the environment,
// then from the config file. A backend's credentials come whole from the
// first source that gives any of them: a user's own never mix with the
// site's, and basic auth on the command line overrides a site's token.
func resolve(fset *flag.FlagSet, o *jobOptions) error {
	src := &sources{from: map[string]source{}}
	o.src = src
	fset.Visit(func(f *flag.Flag) { src.from[f.Name] = fromFlag })
	cfg, err := o.readConfig(fset)
	if err != nil {
		return err
	}
	only := o.configOnly()
	for _, group := range settingGroups(fset, o) {
		if slices.ContainsFunc(group, func(n string) bool { return src.from[n] == fromFlag }) {
			continue
		}
		from, values := fromEnv, map[string]string{}
		for _, n := range group {
			if v, ok := os.LookupEnv(envName(n)); ok && only[n] == nil {
				values[n] = v
			}
		}
		if len(values) == 0 {
			from = fromConfig
			for _, n := range group {
				if v, ok := cfg[n]; ok {
					values[n] = v
				}
			}
		}
		for _, n := range group {
			if v, ok := values[n]; ok {
				src.from[n] = from
				if err := set(fset, only, n, v); err != nil {
					return fmt.Errorf("%s: %v", src.spell(n), err)
				}
			}
		}
	}
	return nil
}

func set(fset *flag.FlagSet, only map[string]*string, name, value string) error {
	if p := only[name]; p != nil {
		*p = value
		return nil
	}
	return fset.Set(name, value)
}

// settingGroups lists the settings the environment and the config file
// may give, each backend's credentials as one group, every other setting
// alone.
func settingGroups(fset *flag.FlagSet, o *jobOptions) [][]string {
	var groups [][]string
	creds := map[string]bool{}
	for _, b := range []*backendOptions{&o.pyro, &o.prom} {
		groups = append(groups, b.credentialSettings())
		for _, n := range b.credentialSettings() {
			creds[n] = true
		}
	}
	fset.VisitAll(func(f *flag.Flag) {
		if !flagOnly[f.Name] && !creds[f.Name] {
			groups = append(groups, []string{f.Name})
		}
	})
	return groups
}

// configPath is the file to read, and whether the user named it (then it
// must exist).
func (o *jobOptions) configPath() (path string, explicit bool) {
	if o.src.from["config"] == fromFlag {
		return o.config, true
	}
	if p, ok := os.LookupEnv(configEnv); ok {
		return p, true
	}
	return defaultConfigPath, false
}

// readConfig reads the config file into settings by name. A key it does
// not know is an error, named, so that a misspelt one is not silently
// ignored. No error here quotes a value: some are secrets.
func (o *jobOptions) readConfig(fset *flag.FlagSet) (map[string]string, error) {
	path, explicit := o.configPath()
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if !explicit && errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %v", err)
	}
	o.src.configPath = path
	keys := map[string]string{} // config key -> setting
	for _, group := range settingGroups(fset, o) {
		for _, n := range group {
			keys[configKey(n)] = n
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("config %s: %v", path, err)
	}
	out := map[string]string{}
	if len(doc.Content) == 0 {
		return out, nil // an empty file
	}
	if err := flatten(doc.Content[0], "", keys, out); err != nil {
		return nil, fmt.Errorf("config %s: %v", path, err)
	}
	return out, nil
}

// flatten reads the mapping n (a section when prefix is set) into out, by
// setting name.
func flatten(n *yaml.Node, prefix string, keys, out map[string]string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want key: value lines", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := prefix + k.Value
		if prefix == "" && (key == "pyroscope" || key == "prometheus") {
			if v.Tag == "!!null" { // a section left empty
				continue
			}
			if err := flatten(v, key+".", keys, out); err != nil {
				return err
			}
			continue
		}
		name, ok := keys[key]
		switch {
		case !ok:
			return fmt.Errorf("line %d: unknown key %q", k.Line, key)
		case v.Kind != yaml.ScalarNode:
			return fmt.Errorf("line %d: %s: want a single value", k.Line, key)
		}
		if _, dup := out[name]; dup {
			return fmt.Errorf("line %d: %s given twice", k.Line, key)
		}
		out[name] = v.Value
		if v.Tag == "!!null" {
			out[name] = ""
		}
	}
	return nil
}
