package cli

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The agent's own profiles are served only when asked for: they show
// its internals to whoever reaches /metrics.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, on := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		mux := metricsMux(reg, reg, nil)
		if on {
			servePprof(mux)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
		body, _ := io.ReadAll(rec.Result().Body)
		served := strings.Contains(string(body), "goroutine")
		if served != on {
			t.Errorf("--debug.pprof=%v: /debug/pprof/ served the profiles: %v (status %d)", on, served, rec.Code)
		}
	}
}
