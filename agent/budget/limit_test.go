package budget

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupMemoryLimit(t *testing.T) {
	root := t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("system.slice/slurmscope-agent.service/memory.max", "1073741824\n")
	write("unified/hybrid.service/memory.max", "max\n")
	write("memory/hybrid.service/memory.limit_in_bytes", "536870912\n")
	write("memory/unlimited/memory.limit_in_bytes", "9223372036854771712\n")
	for _, tc := range []struct {
		name, cgroup string
		want         int64
		ok           bool
	}{
		{"v2", "0::/system.slice/slurmscope-agent.service\n", 1 << 30, true},
		// Hybrid: v2 has no memory controller (memory.max absent or max),
		// v1's memory hierarchy has the limit.
		{"hybrid v2 max", "4:memory:/hybrid.service\n0::/hybrid.service\n", 0, false},
		{"v1", "4:memory:/hybrid.service\n1:cpu,cpuacct:/\n", 512 << 20, true},
		{"v1 unlimited", "4:memory:/unlimited\n", 0, false},
		{"none", "0::/nowhere\n", 0, false},
	} {
		got, ok := CgroupMemoryLimit([]byte(tc.cgroup), root)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestForLimitFitsTheUnitsMemoryMax(t *testing.T) {
	o, gomem := ForLimit(Options{}, 1<<30)
	if o.Total != DefaultTotal || o.JobShare != DefaultJobShare || o.SharedShare != DefaultSharedShare || gomem != 768<<20 {
		t.Errorf("MemoryMax=1G: %+v, GOMEMLIMIT %d; want the defaults and 768 MiB", o, gomem)
	}
	o, _ = ForLimit(Options{}, 256<<20)
	if o.Total != 96<<20 || o.JobShare != 32<<20 {
		t.Errorf("256 MiB: %+v", o)
	}
	o, _ = ForLimit(Options{Total: 64 << 20, JobShare: 48 << 20}, 1<<30)
	if o.Total != 64<<20 || o.JobShare != 48<<20 {
		t.Errorf("explicit options below the limit are kept: %+v", o)
	}
}
