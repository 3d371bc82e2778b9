package plugin

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
)

// The settings page shows the backend's defaults as placeholders from one
// literal, BACKEND_DEFAULTS in src/components/config.ts; this reads it as
// text and fails when it and the Go defaults differ, or when it names a key
// jsonData does not have.
func TestFrontEndDefaults(t *testing.T) {
	src, err := os.ReadFile("../../../src/components/config.ts")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)export const BACKEND_DEFAULTS = (\{\n.*?\n\}) as const;`).FindSubmatch(src)
	if m == nil {
		t.Fatal("config.ts: no `export const BACKEND_DEFAULTS = {...} as const;`")
	}
	// The literal is JSON but for unquoted keys, single quotes and trailing commas.
	js := regexp.MustCompile(`(?m)^(\s*)([A-Za-z]+):`).ReplaceAll(m[1], []byte(`$1"$2":`))
	js = regexp.MustCompile(`'([^'"\\]*)'`).ReplaceAll(js, []byte(`"$1"`))
	js = regexp.MustCompile(`,(\s*\})`).ReplaceAll(js, []byte(`$1`))

	var got Settings
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("BACKEND_DEFAULTS as JSON: %v\n%s", err, js)
	}
	want := Settings{
		TimeoutSeconds:          int(backends.DefaultTimeout / time.Second),
		PyroscopeMaxQueryLength: model.Duration(query.DefaultMaxQueryLength),
		MaxConcurrentCalls:      query.DefaultParallel,
		MaxCallsPerQuery:        query.DefaultMaxCalls,
		Findings:                findings.Defaults(),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config.ts BACKEND_DEFAULTS = %+v, Go's defaults %+v", got, want)
	}
}
