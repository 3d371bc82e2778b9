package sink

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/service"
	"github.com/slurmscope/slurmscope/agent/service/servicetest"
)

func parsedKind(t *testing.T, args ...string) *Kind { return servicetest.Parse(t, &Kind{}, args...) }

// TestKindWritesOutputDir: with --output-dir the kind opens a sink that
// makes the directory and writes the daemon's profiles there, opened
// directly or as the fallback.
func TestKindWritesOutputDir(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		root := filepath.Join(t.TempDir(), "profiles")
		k := parsedKind(t, "--output-dir="+root)
		open := k.Open
		if fallback {
			open = k.OpenFallback
		}
		svc, err := open(service.Env{})
		if err != nil {
			t.Fatal(err)
		}
		end := time.Unix(1700000000, 0)
		if err := svc.(daemon.Sink).Write(context.Background(), []daemon.Output{{Type: profiles.CPU, JobID: "4242", End: end, Data: []byte("a")}}); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(root, "4242", "process_cpu-1700000000.pb.gz")); err != nil || string(b) != "a" {
			t.Errorf("fallback %v: %q, %v", fallback, b, err)
		}
		servicetest.Run(t, svc)()
	}
}

// TestKindOffWithoutOutputDir: without --output-dir only the fallback
// opens.
func TestKindOffWithoutOutputDir(t *testing.T) {
	if svc, err := parsedKind(t).Open(service.Env{}); svc != nil || err != nil {
		t.Fatalf("Open: %v, %v; want nothing", svc, err)
	}
}
