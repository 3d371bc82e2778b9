package sink

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/profiles"
)

func TestDirLayout(t *testing.T) {
	root := t.TempDir()
	end := time.Unix(1700000000, 0)
	outs := []daemon.Output{
		{Type: profiles.CPU, JobID: "4242", End: end, Data: []byte("a")},
		{Type: profiles.CPU, JobID: "4242", End: end, Data: []byte("b")}, // same second: must not overwrite
		{Type: profiles.CPU, JobID: "../../etc", End: end, Data: []byte("c")},
		{Type: profiles.CPU, ServiceName: "ssh d/../x", End: end, Data: []byte("d")},
	}
	if err := (&Dir{Root: root}).Write(context.Background(), outs); err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			rel, _ := filepath.Rel(root, p)
			b, _ := os.ReadFile(p)
			got = append(got, rel+"="+string(b))
		}
		return nil
	})
	sort.Strings(got)
	want := []string{
		"4242/process_cpu-1700000000-1.pb.gz=b",
		"4242/process_cpu-1700000000.pb.gz=a",
		"______etc/process_cpu-1700000000.pb.gz=c",
		"_nojob/process_cpu-1700000000.ssh_d____x.pb.gz=d",
	}
	if len(got) != len(want) {
		t.Fatalf("files = %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("file %d = %q, want %q", i, got[i], want[i])
		}
	}
}
