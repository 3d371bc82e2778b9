package gpuinject

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The TaskProlog (deploy/slurmscope-taskprolog.sh) decides per job whether
// CUDA loads the library; Slurm runs it with the task's environment. The
// script is run here with sh, with its library path pointed at a file of
// the test (it prints the export only when the library is readable).
func TestTaskPrologHonoursTheJobsChoice(t *testing.T) {
	const installed = "lib=/usr/lib/slurmscope/libslurmscope_inject.so\n"
	b, err := os.ReadFile("../deploy/slurmscope-taskprolog.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), installed) {
		t.Fatalf("taskprolog.sh does not set %q", strings.TrimSpace(installed))
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libslurmscope_inject.so")
	if err := os.WriteFile(lib, []byte("\x7fELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := func(libPath string) string {
		p := filepath.Join(dir, "taskprolog-"+filepath.Base(libPath)+".sh")
		s := strings.Replace(string(b), installed, "lib="+libPath+"\n", 1)
		if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withLib, withoutLib := script(lib), script(filepath.Join(dir, "missing.so"))
	// Both variables name the same library, each decided alone.
	export, unset := "export CUDA_INJECTION64_PATH="+lib+"\n", "unset CUDA_INJECTION64_PATH\n"
	exportNVTX, unsetNVTX := "export NVTX_INJECTION64_PATH="+lib+"\n", "unset NVTX_INJECTION64_PATH\n"
	const nsight = "/opt/nvidia/nsight-systems/target-linux-x64/libToolsInjection64.so"
	for _, tc := range []struct {
		name, script string
		env          []string
		want         string
	}{
		{"default", withLib, nil, export + exportNVTX},
		{"not installed", withoutLib, nil, ""},
		{"opted out", withLib, []string{"SLURMSCOPE_GPU_TRACE=off"}, ""},
		{"opted out, upper case", withLib, []string{"SLURMSCOPE_GPU_TRACE=OFF"}, ""},
		{"other value", withLib, []string{"SLURMSCOPE_GPU_TRACE=on"}, export + exportNVTX},
		{"empty value", withLib, []string{"SLURMSCOPE_GPU_TRACE="}, export + exportNVTX},
		{"own injection library", withLib, []string{"CUDA_INJECTION64_PATH=" + nsight}, exportNVTX},
		{"own libraries (Nsight sets both)", withLib, []string{"CUDA_INJECTION64_PATH=" + nsight, "NVTX_INJECTION64_PATH=" + nsight}, ""},
		{"ours inherited", withLib, []string{"CUDA_INJECTION64_PATH=" + lib}, export + exportNVTX},
		{"empty inherited", withLib, []string{"CUDA_INJECTION64_PATH="}, export + exportNVTX},
		{"opted out, ours inherited", withLib, []string{"SLURMSCOPE_GPU_TRACE=off", "CUDA_INJECTION64_PATH=" + lib, "NVTX_INJECTION64_PATH=" + lib}, unset + unsetNVTX},
		{"opted out, own library", withLib, []string{"SLURMSCOPE_GPU_TRACE=off", "CUDA_INJECTION64_PATH=" + nsight}, ""},
		{"hostile variable name content", withLib, []string{"CUDA_INJECTION64_PATH=$(touch " + filepath.Join(dir, "pwned") + ")"}, exportNVTX},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sh", tc.script)
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, tc.env...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("sh: %v", err)
			}
			if string(out) != tc.want {
				t.Fatalf("prints %q, want %q", out, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
				t.Fatal("the TaskProlog ran what a job's variable held")
			}
		})
	}
}
