package pyrostandin

import (
	"github.com/slurmscope/slurmscope/schema"

	"bytes"
	"compress/gzip"
	"sort"
	"strings"
	"time"

	googlev1 "github.com/grafana/pyroscope/api/gen/proto/go/google/v1"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"
	"google.golang.org/protobuf/proto"
)

// CPUProfile builds a gzipped process_cpu pprof stamped at, one sample
// per stack ("root;...;leaf" -> nanoseconds), for tests that push to a
// Pyroscope.
func CPUProfile(at time.Time, stacks map[string]int64) []byte {
	p := &googlev1.Profile{StringTable: []string{"", "cpu", "nanoseconds"}, Period: 1e7, TimeNanos: at.UnixNano()}
	p.SampleType = []*googlev1.ValueType{{Type: 1, Unit: 2}}
	p.PeriodType = &googlev1.ValueType{Type: 1, Unit: 2}
	ids := map[string]uint64{}
	keys := make([]string, 0, len(stacks))
	for k := range stacks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, stack := range keys {
		frames := strings.Split(stack, ";")
		var locs []uint64
		for i := len(frames) - 1; i >= 0; i-- {
			id, ok := ids[frames[i]]
			if !ok {
				p.StringTable = append(p.StringTable, frames[i])
				id = uint64(len(ids) + 1) // #nosec G115 -- a length plus one, never negative
				ids[frames[i]] = id
				p.Function = append(p.Function, &googlev1.Function{Id: id, Name: int64(len(p.StringTable) - 1)})
				p.Location = append(p.Location, &googlev1.Location{Id: id, Line: []*googlev1.Line{{FunctionId: id}}})
			}
			locs = append(locs, id)
		}
		p.Sample = append(p.Sample, &googlev1.Sample{LocationId: locs, Value: []int64{stacks[stack]}})
	}
	raw, err := proto.Marshal(p)
	if err != nil {
		panic(err) // a message built above always marshals
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(raw)
	zw.Close()
	return b.Bytes()
}

// CPUSeries is one pushed process_cpu series: labels are name, value
// pairs besides __name__.
func CPUSeries(at time.Time, stacks map[string]int64, labels ...string) *pushv1.RawProfileSeries {
	ls := []*typesv1.LabelPair{{Name: "__name__", Value: schema.ProcessCPU.Name}}
	for i := 0; i+1 < len(labels); i += 2 {
		ls = append(ls, &typesv1.LabelPair{Name: labels[i], Value: labels[i+1]})
	}
	return &pushv1.RawProfileSeries{Labels: ls, Samples: []*pushv1.RawSample{{RawProfile: CPUProfile(at, stacks)}}}
}
