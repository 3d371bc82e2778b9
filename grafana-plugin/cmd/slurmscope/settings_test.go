package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain keeps the host's site file and environment out of the tests:
// the default config path is an empty temporary directory's, and every
// variable the CLI reads is unset.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "slurmscope-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defaultConfigPath = filepath.Join(dir, "cli.yaml")
	fs, o := newJobFlags(nil)
	os.Unsetenv(configEnv)
	for _, group := range settingGroups(fs, o) {
		for _, n := range group {
			os.Unsetenv(envName(n))
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// writeFile writes content to name in t's temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A config file that is wrong stops the command with exit 2 and a line
// that names the file and the key, before any backend is asked.
func TestJobConfigFileErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	for _, tc := range []struct {
		name   string
		config string // "" with missing set: the path that does not exist
		env    map[string]string
		want   []string
	}{
		{"misspelt key", "pyroscope:\n  url: http://127.0.0.1:1\n  basic_auth_pasword: x\n", nil,
			[]string{`line 3: unknown key "pyroscope.basic_auth_pasword"`}},
		{"flag-only setting", "json: true\n", nil, []string{`line 1: unknown key "json"`}},
		{"unknown section", "loki:\n  url: http://x\n", nil, []string{`line 1: unknown key "loki"`}},
		{"list for a value", "tenant: [a, b]\n", nil, []string{"line 1: tenant: want a single value"}},
		{"key twice", "tenant: a\ntenant: b\n", nil, []string{"tenant given twice"}},
		{"not a mapping", "- a\n", nil, []string{"want key: value lines"}},
		{"bad duration", "prometheus:\n  url: http://127.0.0.1:1\ntimeout: soon\n", nil,
			[]string{`timeout in `, `"soon" is not a duration`}},
		{"threshold from the environment", "", map[string]string{"SLURMSCOPE_PROMETHEUS_URL": "http://127.0.0.1:1", "SLURMSCOPE_CPU_EFFICIENCY_BELOW": "x"},
			[]string{"SLURMSCOPE_CPU_EFFICIENCY_BELOW: "}},
		{"--config that does not exist", missing, nil, []string{"config: open " + missing}},
		{"SLURMSCOPE_CONFIG that does not exist", "", map[string]string{configEnv: missing}, []string{"config: open " + missing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := []string{"job", "4242"}
			switch {
			case tc.config == missing:
				args = append(args, "--config", missing)
			case tc.config != "":
				args = append(args, "--config", writeFile(t, "cli.yaml", tc.config))
			}
			code, stdout, stderr := run(args...)
			if code != exitUsage || stdout != "" {
				t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// The default file is read where it exists, and its absence is no error;
// --config "" reads none.
func TestJobDefaultConfigFile(t *testing.T) {
	prom := fakeProm(t, map[string][]string{"4242": {"node-a"}})
	if code, _, stderr := run("job", "4242"); code != exitUsage || !strings.Contains(stderr, "prometheus.url in "+defaultConfigPath) {
		t.Errorf("no file, no URL: exit %d\n%s", code, stderr)
	}
	if err := os.WriteFile(defaultConfigPath, []byte("prometheus:\n  url: "+prom+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(defaultConfigPath) })
	if code, stdout, stderr := run("job", "4242"); code != exitOK || !strings.Contains(stdout, "nodes (1): node-a") {
		t.Errorf("URL from %s: exit %d\nstdout:\n%s\nstderr:\n%s", defaultConfigPath, code, stdout, stderr)
	}
	if code, _, stderr := run("job", "4242", "--config", ""); code != exitUsage || !strings.Contains(stderr, "give --pyroscope-url") {
		t.Errorf(`--config "": exit %d\n%s`, code, stderr)
	}
}
