package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/schema"
)

// cpuProfile is a gzipped CPU profile as the agent writes one: one sample
// of n 10 ms ticks per stack (leaf first), labels as name=value comments.
func cpuProfile(t *testing.T, labels []string, stacks map[string]int64) []byte {
	t.Helper()
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000,
		Comments:   labels,
	}
	fns := map[string]*profile.Function{}
	for leaf, n := range stacks {
		var locs []*profile.Location
		for _, name := range []string{leaf, "main"} {
			fn := fns[name]
			if fn == nil {
				fn = &profile.Function{ID: uint64(len(fns) + 1), Name: name}
				fns[name] = fn
				p.Function = append(p.Function, fn)
			}
			loc := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: fn}}}
			p.Location = append(p.Location, loc)
			locs = append(locs, loc)
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: locs, Value: []int64{n, n * 10_000_000}})
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

type failing struct{}

func (failing) Write(context.Context, []daemon.Output) error { return errors.New("backend down") }

// TestReadDirReadsWhatDirWrote: the offline reader and the writer agree on
// the layout, and Multi writes to every sink whatever one of them returns.
func TestReadDirReadsWhatDirWrote(t *testing.T) {
	root := t.TempDir()
	end := time.Unix(1700000000, 0)
	job := func(host string) []string {
		return []string{schema.JobID.Label + "=12", schema.HostName.Label + "=" + host}
	}
	outs := []daemon.Output{
		{Type: profiles.CPU, JobID: "12", End: end, Data: cpuProfile(t, job("node-a"), map[string]int64{"hot": 30, "warm": 10})},
		{Type: profiles.CPU, JobID: "12", End: end, Data: cpuProfile(t, job("node-b"), map[string]int64{"hot": 30})},
		{Type: profiles.CPU, ServiceName: "sshd", End: end, Data: cpuProfile(t, []string{schema.ServiceName + "=sshd"}, map[string]int64{"poll": 1})},
	}
	err := Multi{failing{}, &Dir{Root: root}}.Write(context.Background(), outs)
	if err == nil || err.Error() != "backend down" {
		t.Errorf("Multi: %v, want the failing sink's error", err)
	}
	var skipped []string
	jobs, err := ReadDir(root, "", func(path string, err error) { skipped = append(skipped, path) })
	if err != nil || len(skipped) > 0 {
		t.Fatalf("ReadDir: %v, skipped %v", err, skipped)
	}
	var got []string
	for _, j := range jobs {
		got = append(got, fmt.Sprintf("%s files=%d cpu=%d samples=%d hosts=%s top=%v", j.Dir, j.Files, j.CPU, j.Samples, j.Value(schema.HostName.Label), j.Top(1)))
	}
	want := []string{
		"12 files=2 cpu=700000000 samples=70 hosts=node-a,node-b top=[{hot 600000000 600000000}]",
		NoJobDir + " files=1 cpu=10000000 samples=1 hosts= top=[{poll 10000000 10000000}]",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("read back\n%q\nwant\n%q", got, want)
	}
	if only, err := ReadDir(root, NoJobDir, func(string, error) {}); err != nil || len(only) != 1 || only[0].Dir != NoJobDir {
		t.Errorf("only %s: %v %v", NoJobDir, only, err)
	}
}
