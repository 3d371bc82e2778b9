package symbolize

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// compile runs a compiler (gcc, g++) and fails the test if it is missing:
// the unit tier requires a C toolchain.
func compile(t *testing.T, compiler string, args ...string) {
	t.Helper()
	out, err := exec.Command(compiler, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, strings.Join(args, " "), err, out)
	}
}

func srcPath(name string) string { return filepath.Join("testdata", "src", name) }

// startTarget runs a test program that prints one hex address and then
// blocks; it returns the pid and the printed address. The process is killed
// when the test ends.
func startTarget(t *testing.T, path string, env ...string) (int, uint64) {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading address from %s: %v", path, err)
	}
	addr, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(line), "0x"), 16, 64)
	if err != nil {
		t.Fatalf("parsing address %q: %v", line, err)
	}
	return cmd.Process.Pid, addr
}

// goTool returns the go command that runs this test.
func goTool(t *testing.T) string {
	t.Helper()
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("go command not found")
	}
	return p
}

// buildGo builds testdata/src/gotarget with extra flags into dir.
func buildGo(t *testing.T, dir, name string, flags ...string) string {
	t.Helper()
	src, err := os.ReadFile(srcPath("gotarget/main.go"))
	if err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(dir, "mod-"+name)
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(mod, "main.go"), src, 0o644))
	must(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/gotarget\n\ngo 1.21\n"), 0o644))
	out := filepath.Join(dir, name)
	cmd := exec.Command(goTool(t), append(append([]string{"build", "-o", out}, flags...), ".")...)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", flags, err, b)
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// leafAndReturn is a two-frame stack whose both entries resolve to addr: the
// leaf is looked up as is, the return address (addr+1) as addr+1-1.
func leafAndReturn(addr uint64) []uint64 { return []uint64{addr, addr + 1} }

// checkResolves asserts that every frame names want.
func checkResolves(t *testing.T, frames []Frame, want string) {
	t.Helper()
	if len(frames) == 0 {
		t.Fatal("no frames")
	}
	for _, f := range frames {
		if f.Function != want {
			t.Errorf("frame %#x: got %q (module %q), want %q", f.Address, f.Function, f.Module, want)
		}
	}
}

func mkfifo(path string) error          { return syscall.Mkfifo(path, 0o644) }
func symlink(target, path string) error { return os.Symlink(target, path) }
func removeFile(path string) error      { return os.Remove(path) }
