package promschema

import (
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// collected sends f's metrics and returns each one's labels and value.
func collected(t *testing.T, f func(ch chan<- prometheus.Metric)) []string {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	f(ch)
	close(ch)
	var out []string
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		s := ""
		for _, l := range pb.GetLabel() {
			s += l.GetName() + "=" + l.GetValue() + " "
		}
		out = append(out, fmt.Sprint(s, pb.GetGauge().GetValue()+pb.GetCounter().GetValue()))
	}
	return out
}

// TestSnapshot: nothing before the first Store, then what the last Store
// held, as it was.
func TestSnapshot(t *testing.T) {
	var s Snapshot
	if got := collected(t, s.Collect); len(got) != 0 {
		t.Fatalf("zero Snapshot sent %q", got)
	}
	d := prometheus.NewDesc("x", "x", []string{"gpu"}, nil)
	s.Store([]prometheus.Metric{prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 1, "0")})
	s.Store([]prometheus.Metric{prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 2, "0"),
		prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 3, "1")})
	if got, want := collected(t, s.Collect), []string{"gpu=0 2", "gpu=1 3"}; !slices.Equal(got, want) {
		t.Errorf("sent %q, want %q", got, want)
	}
}

// TestCollectCounts: one counter per key, in the order of the first
// string, then the second.
func TestCollectCounts(t *testing.T) {
	d := prometheus.NewDesc("errors_total", "x", []string{"file", "reason"}, nil)
	counts := map[[2]string]uint64{{"memory.stat", "unreadable"}: 2, {"cpu.stat", "too_large"}: 1, {"cpu.stat", "refused"}: 3}
	got := collected(t, func(ch chan<- prometheus.Metric) { CollectCounts(ch, d, counts) })
	want := []string{"file=cpu.stat reason=refused 3", "file=cpu.stat reason=too_large 1", "file=memory.stat reason=unreadable 2"}
	if !slices.Equal(got, want) {
		t.Errorf("sent %q, want %q", got, want)
	}
}
