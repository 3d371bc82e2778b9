package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/golang/snappy"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/querier/v1/querierv1connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/cpu"
	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/gpu"
	"github.com/slurmscope/slurmscope/agent/gpu/gputest"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/pyroscope"
	"github.com/slurmscope/slurmscope/agent/remotewrite"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/users"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

type config struct {
	hours        int
	jobsPerHour  float64
	meanDuration time.Duration
	gpus, nodes  int
	seed         uint64
	// ranksPerNode, jobNodes: every job is one node's part of a
	// multi-node job (ranks-per-node > 0).
	ranksPerNode, jobNodes int
	rankLabels             bool
}

// The agent's defaults.
const (
	sampleRate      = 97
	uploadInterval  = 15 * time.Second
	gpuInterval     = 10 * time.Second
	writeInterval   = 15 * time.Second
	samplesPerWrite = 2000
	tick            = 5 * time.Second
)

// hour is what one simulated hour sent.
type hour struct {
	profileBytes, profilePushes int
	profileRaw                  int // the pprofs uncompressed: what Pyroscope's ingestion rate limit counts
	metricBytes, metricSamples  int
	metricSeries                map[string]string // key -> class
	jobs                        map[string]bool
}

func run(c config, out io.Writer) error {
	dir, err := os.MkdirTemp("", "slurmscope-cardinality-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	build := exec.Command("sh", "agent/gpu/nvmlstub/build.sh", dir)
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the NVML stand-in (run from the repository root): %w", err)
	}
	lib := filepath.Join(dir, "libnvidia-ml.so.1")

	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	n, err := newNode(dir, c.gpus, c.seed, t0)
	if err != nil {
		return err
	}
	os.Setenv(gputest.EnvScenario, n.scenario)
	quiet := slog.New(slog.DiscardHandler)
	fs := procfs.New(n.procRoot)
	res := attribution.New(attribution.Options{Proc: fs, Users: users.Passwd(n.users), HostName: n.name, Now: clk.Now, Cgroups: n.cgroups,
		Ranks: c.rankLabels})
	coll, err := gpu.New(gpu.Options{LibraryPath: lib, HostName: n.name, Jobs: res, Proc: fs, Log: quiet, Now: clk.Now,
		Grants: n, Devices: gpu.Devices{Root: "/dev", Lookup: gputest.Lookup}})
	if err != nil {
		return err
	}
	defer coll.Close()

	// Profiles go to the Pyroscope stand-in, which splits series by sample
	// labels as the server does; its clock is the simulation's.
	pyro := pyrostandin.New(pyrostandin.WithClock(clk.Now), pyrostandin.WithBlockDuration(0))
	if err := pyro.Start("127.0.0.1:0"); err != nil {
		return err
	}
	defer pyro.Close()
	hours := make([]hour, c.hours+1)
	cur := func() *hour {
		h := int(clk.Now().Sub(t0) / time.Hour)
		return &hours[min(h, c.hours)]
	}
	sink := &pushSink{client: pushv1connect.NewPusherServiceClient(httpClient, pyro.URL()), hour: cur}
	smp := &sampler{n: n, clk: clk, rate: sampleRate, last: t0}
	d := daemon.New(daemon.Config{Interval: uploadInterval, RankLabels: c.rankLabels, Log: quiet, Now: clk.Now},
		[]source.Source{cpu.NewSource(smp, sampleRate, nil)}, symbolizer{n}, res, sink)
	reg := prometheus.NewRegistry()
	reg.MustRegister(coll)
	reg.MustRegister(d.Collectors()...)

	ctx := context.Background()
	end := t0.Add(time.Duration(c.hours+1) * time.Hour)
	for t := t0; t.Before(end); t = t.Add(tick) {
		clk.set(t)
		if err := n.step(t, c); err != nil {
			return err
		}
		h := cur()
		if h.jobs == nil {
			h.jobs, h.metricSeries = map[string]bool{}, map[string]string{}
		}
		for _, j := range n.jobs {
			h.jobs[j.id] = true
		}
		el := t.Sub(t0)
		if el%gpuInterval == 0 {
			if err := coll.Poll(ctx); err != nil {
				return fmt.Errorf("GPU poll: %w", err)
			}
		}
		if el%uploadInterval == 0 && el > 0 {
			// The agent's full pass before each drain: ranks are read there.
			if _, err := res.Scan(); err != nil {
				return err
			}
			if err := d.Collect(ctx); err != nil {
				return err
			}
		}
		if el%writeInterval == 0 {
			if err := remoteWrite(reg, t, n.name, h); err != nil {
				return err
			}
		}
	}
	series, err := profileSeries(pyro.URL(), t0, c.hours+1)
	if err != nil {
		return err
	}
	report(out, c, hours, series)
	return nil
}

// pushSink is the agent's Pyroscope sink, one push request per profile
// (pyroscope.PushRequest, as pyroscope.Sink sends them), sent straight to
// the server.
type pushSink struct {
	client pushv1connect.PusherServiceClient
	hour   func() *hour
}

func (s *pushSink) Write(ctx context.Context, outs []daemon.Output) error {
	for _, o := range outs {
		req, err := pyroscope.PushRequest(o)
		if err != nil {
			return err
		}
		h := s.hour()
		h.profileBytes += proto.Size(req)
		h.profilePushes++
		zr, err := gzip.NewReader(bytes.NewReader(o.Data))
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, zr)
		if err != nil {
			return err
		}
		h.profileRaw += int(n)
		if _, err := s.client.Push(ctx, connect.NewRequest(req)); err != nil {
			return err
		}
	}
	return nil
}

// remoteWrite gathers what the agent remote-writes, cuts it into requests
// of at most samplesPerWrite samples, and counts their snappy bytes and
// their series.
func remoteWrite(reg prometheus.Gatherer, at time.Time, host string, h *hour) error {
	series, _, err := remotewrite.FromGatherer(reg, at)
	if err != nil {
		return err
	}
	for i := range series {
		// The agent adds host_name to its own metrics as an external label.
		if !slices.ContainsFunc(series[i].Labels, func(l remotewrite.Label) bool { return l.Name == schema.HostName.Label }) {
			series[i].Labels = append(series[i].Labels, remotewrite.Label{Name: schema.HostName.Label, Value: host})
			sort.Slice(series[i].Labels, func(a, b int) bool { return series[i].Labels[a].Name < series[i].Labels[b].Name })
		}
		var key strings.Builder
		var hasGPU, hasJob bool
		for _, l := range series[i].Labels {
			key.WriteString(l.Name + "=" + l.Value + ",")
			hasGPU = hasGPU || l.Name == schema.GPUUUID.Label
			hasJob = hasJob || l.Name == schema.JobID.Label
		}
		class := "node"
		switch {
		case hasGPU && hasJob:
			class = "job×GPU"
		case hasGPU:
			class = "GPU"
		case hasJob:
			class = "job"
		}
		h.metricSeries[key.String()] = class
		h.metricSamples += len(series[i].Samples)
	}
	for len(series) > 0 {
		k := min(len(series), samplesPerWrite)
		h.metricBytes += len(snappy.Encode(nil, remotewrite.MarshalWriteRequest(series[:k])))
		series = series[k:]
	}
	return nil
}

// profileSeries asks the server for the profile series of each hour.
func profileSeries(url string, t0 time.Time, hours int) ([]map[string]string, error) {
	q := querierv1connect.NewQuerierServiceClient(httpClient, url)
	out := make([]map[string]string, hours)
	for h := range hours {
		from := t0.Add(time.Duration(h) * time.Hour)
		resp, err := q.Series(context.Background(), connect.NewRequest(&querierv1.SeriesRequest{Matchers: []string{"{}"},
			Start: from.UnixMilli(), End: from.Add(time.Hour).UnixMilli() - 1}))
		if err != nil {
			return nil, err
		}
		out[h] = map[string]string{}
		for _, ls := range resp.Msg.LabelsSet {
			var key strings.Builder
			job := ""
			for _, l := range ls.Labels {
				key.WriteString(l.Name + "=" + l.Value + ",")
				if l.Name == schema.JobID.Label {
					job = l.Value
				}
			}
			out[h][key.String()] = job
		}
	}
	return out, nil
}

func report(w io.Writer, c config, hours []hour, profiles []map[string]string) {
	fmt.Fprintf(w, "one node, %d GPUs, %.1f jobs/hour arriving (mean %s), %d simulated hours after 1 of warm-up\n",
		c.gpus, c.jobsPerHour, c.meanDuration, c.hours)
	if c.ranksPerNode > 0 {
		fmt.Fprintf(w, "each job %d ranks on this node of its %d, ", c.ranksPerNode, c.jobNodes)
	}
	fmt.Fprintf(w, "rank labels %v\n\n", map[bool]string{true: "on", false: "off"}[c.rankLabels])
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "hour\tjobs\tprofile series\tnew\tpushes\tprofile KiB\tmetric series\tnew\tGPU\tjob×GPU\tjob\tnode\tsamples\tmetric KiB\t")
	var sum struct {
		jobs, ps, psNew, pushes, pBytes, pRaw, ms, msNew, samples, mBytes float64
		class                                                             map[string]float64
		seriesPerJob                                                      float64
	}
	sum.class = map[string]float64{}
	seenP, seenM := map[string]bool{}, map[string]bool{}
	for k := range profiles[0] {
		seenP[k] = true
	}
	for k := range hours[0].metricSeries {
		seenM[k] = true
	}
	for i := 1; i < len(hours); i++ {
		h := hours[i]
		newP, newM := 0, 0
		for k := range profiles[i] {
			if !seenP[k] {
				newP++
				seenP[k] = true
			}
		}
		class := map[string]int{}
		for k, cl := range h.metricSeries {
			class[cl]++
			if !seenM[k] {
				newM++
				seenM[k] = true
			}
		}
		perJob := map[string]int{}
		for _, job := range profiles[i] {
			if job != "" {
				perJob[job]++
			}
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t\n", i, len(h.jobs), len(profiles[i]), newP,
			h.profilePushes, float64(h.profileBytes)/1024, len(h.metricSeries), newM, class["GPU"], class["job×GPU"], class["job"],
			class["node"], h.metricSamples, float64(h.metricBytes)/1024)
		sum.jobs += float64(len(h.jobs))
		sum.ps += float64(len(profiles[i]))
		sum.psNew += float64(newP)
		sum.pushes += float64(h.profilePushes)
		sum.pBytes += float64(h.profileBytes)
		sum.pRaw += float64(h.profileRaw)
		sum.ms += float64(len(h.metricSeries))
		sum.msNew += float64(newM)
		sum.samples += float64(h.metricSamples)
		sum.mBytes += float64(h.metricBytes)
		for k, v := range class {
			sum.class[k] += float64(v)
		}
		if len(perJob) > 0 {
			sum.seriesPerJob += float64(len(profiles[i])) / float64(len(perJob))
		}
	}
	tw.Flush()
	hs := float64(c.hours)
	nodes := float64(c.nodes)
	jobs := sum.jobs / hs
	fmt.Fprintf(w, "\nper node, mean over the hours (jobs seen in an hour: %.1f):\n", jobs)
	fmt.Fprintf(w, "  profile series active in an hour  %8.1f  (%.1f per job: one per job step with samples, and per rank with rank labels)\n", sum.ps/hs, sum.seriesPerJob/hs)
	fmt.Fprintf(w, "  new profile series per hour       %8.1f\n", sum.psNew/hs)
	fmt.Fprintf(w, "  profile pushes per hour           %8.0f  (%.1f KiB each)\n", sum.pushes/hs, sum.pBytes/sum.pushes/1024)
	fmt.Fprintf(w, "  profile bytes per hour            %8.1f MiB pushed, %.1f MiB uncompressed\n", sum.pBytes/hs/(1<<20), sum.pRaw/hs/(1<<20))
	fmt.Fprintf(w, "  metric series active in an hour   %8.1f  (GPU %.1f = %.1f per GPU, job×GPU %.1f, job %.1f, node %.1f)\n", sum.ms/hs,
		sum.class["GPU"]/hs, sum.class["GPU"]/hs/float64(c.gpus), sum.class["job×GPU"]/hs, sum.class["job"]/hs, sum.class["node"]/hs)
	fmt.Fprintf(w, "  new metric series per hour        %8.1f\n", sum.msNew/hs)
	fmt.Fprintf(w, "  metric samples per second         %8.1f\n", sum.samples/hs/3600)
	fmt.Fprintf(w, "  remote-write bytes per hour       %8.1f MiB\n", sum.mBytes/hs/(1<<20))
	fmt.Fprintf(w, "\n%d nodes (the per-node figures times %d; series of different nodes never coincide):\n", c.nodes, c.nodes)
	fmt.Fprintf(w, "  profile series active in an hour  %10.0f\n", sum.ps/hs*nodes)
	fmt.Fprintf(w, "  new profile series per day        %10.0f\n", sum.psNew/hs*24*nodes)
	fmt.Fprintf(w, "  profile ingest                    %10.1f GiB/day pushed (%.2f MiB/s; uncompressed %.2f MiB/s)\n",
		sum.pBytes/hs*24*nodes/(1<<30), sum.pBytes/hs*nodes/3600/(1<<20), sum.pRaw/hs*nodes/3600/(1<<20))
	fmt.Fprintf(w, "  metric series active in an hour   %10.0f\n", sum.ms/hs*nodes)
	fmt.Fprintf(w, "  new metric series per day         %10.0f\n", sum.msNew/hs*24*nodes)
	fmt.Fprintf(w, "  metric samples per second         %10.0f\n", sum.samples/hs/3600*nodes)
	fmt.Fprintf(w, "  remote-write                      %10.1f GiB/day\n", sum.mBytes/hs*24*nodes/(1<<30))
}

var httpClient = &http.Client{Timeout: time.Minute}
