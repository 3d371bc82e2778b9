package pyrostandin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	googlev1 "github.com/grafana/pyroscope/api/gen/proto/go/google/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The fixtures were recorded from a real Pyroscope (see
// testdata/fixtures/README.md). Replaying them against the stand-in keeps it
// honest: same status codes, same error codes and messages, same label
// names, values and series, same flame graph and profile totals.

const fixtures = "testdata/fixtures"

// recordedAt is about when the fixtures were recorded: a few minutes after
// their T0 (scenario.json), inside the pushes' ingestion window.
var recordedAt = time.Unix(1796019525, 0).Add(5 * time.Minute)

type call struct {
	Name                string `json:"name"`
	Path                string `json:"path"`
	Request             string `json:"request"`
	RequestContentType  string `json:"request_content_type"`
	HTTPStatus          int    `json:"http_status"`
	Response            string `json:"response"`
	ResponseContentType string `json:"response_content_type"`
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReplayRecordedFixtures(t *testing.T) {
	var calls []call
	if err := json.Unmarshal(readFixture(t, "index.json"), &calls); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(WithClock(func() time.Time { return recordedAt })).Handler())
	defer srv.Close()
	for _, c := range calls {
		// Subtests in order: every query depends on the two pushes before it.
		t.Run(c.Name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+c.Path, c.RequestContentType, bytes.NewReader(readFixture(t, c.Request)))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.HTTPStatus {
				t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, c.HTTPStatus, got)
			}
			want := readFixture(t, c.Response)
			switch {
			case c.ResponseContentType == "application/proto":
				compareProfiles(t, got, want, true)
			case strings.HasPrefix(c.Name, "06"):
				compareProfiles(t, got, want, false)
			case strings.Contains(c.Path, "SelectMergeStacktraces") && c.HTTPStatus == 200:
				compareFlamegraphs(t, got, want)
			default:
				compareJSON(t, got, want)
			}
		})
	}
}

func compareJSON(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("response differs\n got: %s\nwant: %s", got, want)
	}
}

type flamegraphJSON struct {
	Flamegraph struct {
		Names  []string `json:"names"`
		Levels []struct {
			Values []json.Number `json:"values"`
		} `json:"levels"`
		Total   json.Number `json:"total"`
		MaxSelf json.Number `json:"maxSelf"`
	} `json:"flamegraph"`
}

// boxes decodes a flame graph into "path total self" lines, independent of
// name-table order.
func boxes(t *testing.T, b []byte) (lines []string, total, maxSelf string) {
	t.Helper()
	var fg flamegraphJSON
	if err := json.Unmarshal(b, &fg); err != nil {
		t.Fatal(err)
	}
	type box struct {
		start, total int64
		path         string
	}
	var prev []box
	for d, lv := range fg.Flamegraph.Levels {
		var cur []box
		var end int64
		for i := 0; i+3 < len(lv.Values); i += 4 {
			var v [4]int64
			for j := range v {
				fmt.Sscan(string(lv.Values[i+j]), &v[j])
			}
			start := end + v[0]
			end = start + v[1]
			path := fg.Flamegraph.Names[v[3]]
			if d > 0 {
				parent := "?"
				for _, p := range prev {
					if start >= p.start && start+v[1] <= p.start+p.total {
						parent = p.path
					}
				}
				path = parent + ";" + path
			}
			cur = append(cur, box{start, v[1], path})
			lines = append(lines, fmt.Sprintf("%s @%d total=%d self=%d", path, start, v[1], v[2]))
		}
		prev = cur
	}
	sort.Strings(lines)
	return lines, string(fg.Flamegraph.Total), string(fg.Flamegraph.MaxSelf)
}

func compareFlamegraphs(t *testing.T, got, want []byte) {
	t.Helper()
	gl, gt, gm := boxes(t, got)
	wl, wt, wm := boxes(t, want)
	if gt != wt || gm != wm || !reflect.DeepEqual(gl, wl) {
		t.Fatalf("flame graph differs: total %s/%s maxSelf %s/%s\n got: %s\nwant: %s",
			gt, wt, gm, wm, strings.Join(gl, "\n      "), strings.Join(wl, "\n      "))
	}
}

// stacks flattens a pprof into "root;...;leaf" -> value.
func stacks(p *googlev1.Profile) map[string]int64 {
	locs := map[uint64]*googlev1.Location{}
	for _, l := range p.Location {
		locs[l.Id] = l
	}
	funcs := map[uint64]*googlev1.Function{}
	for _, f := range p.Function {
		funcs[f.Id] = f
	}
	out := map[string]int64{}
	for _, s := range p.Sample {
		var names []string
		for i := len(s.LocationId) - 1; i >= 0; i-- {
			for _, ln := range locs[s.LocationId[i]].Line {
				names = append(names, p.StringTable[funcs[ln.FunctionId].Name])
			}
		}
		out[strings.Join(names, ";")] += s.Value[0]
	}
	return out
}

func compareProfiles(t *testing.T, got, want []byte, binary bool) {
	t.Helper()
	g, w := &googlev1.Profile{}, &googlev1.Profile{}
	unmarshal := func(b []byte, p *googlev1.Profile) {
		var err error
		if binary {
			err = proto.Unmarshal(b, p)
		} else {
			err = protojson.Unmarshal(b, p)
		}
		if err != nil {
			t.Fatalf("decoding profile: %v", err)
		}
	}
	unmarshal(got, g)
	unmarshal(want, w)
	if gs, ws := stacks(g), stacks(w); !reflect.DeepEqual(gs, ws) {
		t.Errorf("stacks differ\n got: %v\nwant: %v", gs, ws)
	}
	typ := func(p *googlev1.Profile) string {
		st := p.SampleType[0]
		return fmt.Sprintf("%s/%s period %s/%s %d time %d mappings %d", p.StringTable[st.Type], p.StringTable[st.Unit],
			p.StringTable[p.PeriodType.Type], p.StringTable[p.PeriodType.Unit], p.Period, p.TimeNanos, len(p.Mapping))
	}
	if typ(g) != typ(w) {
		t.Errorf("profile header differs\n got: %s\nwant: %s", typ(g), typ(w))
	}
}
