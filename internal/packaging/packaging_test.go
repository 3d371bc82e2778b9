package packaging

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const repo = "../.."

func TestNewestGlibc(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"", "GCC_3.0", "LIBPTHREAD"}, ""},
		{[]string{"GLIBC_2.2.5", "GLIBC_2.34", "GLIBC_2.17"}, "2.34"},
		// Numeric, not lexical: 2.4 < 2.10 < 2.34.
		{[]string{"GLIBC_2.10", "GLIBC_2.4"}, "2.10"},
		{[]string{"GLIBC_2.3", "GLIBC_2.3.4", "GLIBC_2.3.2"}, "2.3.4"},
		// GLIBC_PRIVATE and other non-numeric names are not versions.
		{[]string{"GLIBC_PRIVATE", "GLIBC_2.x", "GLIBC_2.28"}, "2.28"},
	} {
		if got := newestGlibc(c.in); got != c.want {
			t.Errorf("newestGlibc(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The unit and the environment file name the paths the package installs;
// a path changed on one side only would give a unit that cannot start.
func TestDeployFilesNamePackagedPaths(t *testing.T) {
	unit := readFile(t, filepath.Join(repo, "deploy", "slurmscope-agent.service"))
	exec := regexp.MustCompile(`(?m)^ExecStart=(\S+)`).FindStringSubmatch(unit)
	if exec == nil || exec[1] != AgentBinary {
		t.Errorf("unit: ExecStart %q, want %s", exec, AgentBinary)
	}
	envf := regexp.MustCompile(`(?m)^EnvironmentFile=(\S+)`).FindStringSubmatch(unit)
	if envf == nil || envf[1] != EnvFile {
		t.Errorf("unit: EnvironmentFile %q, want %s", envf, EnvFile)
	}
	env := readFile(t, filepath.Join(repo, "deploy", "slurmscope-agent.env"))
	lib := regexp.MustCompile(`(?m)^GPU_FLAGS=".*--gpu-inject-lib=(\S+?)["\s]`).FindStringSubmatch(env)
	if lib == nil || lib[1] != InjectLib {
		t.Errorf("env: --gpu-inject-lib %q, want %s", lib, InjectLib)
	}
	prolog := readFile(t, filepath.Join(repo, "deploy", "slurmscope-taskprolog.sh"))
	if !strings.Contains(prolog, "lib="+InjectLib+"\n") || !strings.Contains(prolog, "TaskProlog="+TaskProlog) {
		t.Errorf("taskprolog.sh does not name %s and %s", InjectLib, TaskProlog)
	}
}

// TestDebContents writes the agent's .deb from stand-in binaries and reads
// it back as dpkg would: the ar members, the control fields, the conffiles,
// the maintainer scripts, and every file's path, mode and bytes.
func TestDebContents(t *testing.T) {
	st := fakeStage(t)
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	infos, err := Packages(repo, st, Meta{Version: "1.2.3-rc.1", Arch: "arm64", MTime: mtime}, "deb")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Name != AgentPackage || infos[1].Name != CLIPackage {
		t.Fatalf("packages %v", infos)
	}
	path, err := Write(infos[0], "deb", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A pre-release sorts before its release: 1.2.3~rc.1 < 1.2.3.
	if got := filepath.Base(path); got != "slurmscope-agent_1.2.3~rc.1-1_arm64.deb" {
		t.Errorf("file name %s", got)
	}
	members := readAr(t, path)
	if got := string(members["debian-binary"]); got != "2.0\n" {
		t.Errorf("debian-binary %q", got)
	}

	control := readTarGz(t, members["control.tar.gz"])
	fields := controlFields(control["/control"].data)
	for k, want := range map[string]string{
		"Package": AgentPackage, "Version": "1.2.3~rc.1-1", "Architecture": "arm64", "Section": "admin",
	} {
		if fields[k] != want {
			t.Errorf("control %s: %q, want %q", k, fields[k], want)
		}
	}
	// The stand-ins import no glibc symbols, so nothing is required (the
	// integration test checks the real binaries' requirement).
	if d, ok := fields["Depends"]; ok {
		t.Errorf("control Depends %q, want none", d)
	}
	if got := string(control["/conffiles"].data); got != EnvFile+"\n" {
		t.Errorf("conffiles %q, want %s", got, EnvFile)
	}
	for member, script := range map[string]string{"postinst": "postinstall.sh", "prerm": "preremove.sh", "postrm": "postremove.sh"} {
		want := readFile(t, filepath.Join(repo, "deploy", "package", script))
		if got := control["/"+member]; string(got.data) != want || got.mode&0o111 == 0 {
			t.Errorf("%s: mode %o, same as deploy/package/%s: %v", member, got.mode, script, string(got.data) == want)
		}
	}

	data := readTarGz(t, members["data.tar.gz"])
	want := map[string]struct {
		src  string
		mode int64
	}{
		AgentBinary: {st.Agent, 0o755},
		UnitFile:    {filepath.Join(repo, "deploy", "slurmscope-agent.service"), 0o644},
		EnvFile:     {filepath.Join(repo, "deploy", "slurmscope-agent.env"), 0o644},
		InjectLib:   {st.InjectLib, 0o644},
		TaskProlog:  {filepath.Join(repo, "deploy", "slurmscope-taskprolog.sh"), 0o755},
		"/usr/share/doc/slurmscope-agent/copyright": {filepath.Join(repo, "LICENSE"), 0o644},
	}
	var got []string
	for name, e := range data {
		if e.typ == tar.TypeReg {
			got = append(got, name)
		}
		if !e.modTime.Equal(mtime) || e.uname != "root" {
			t.Errorf("%s: mtime %v owner %s, want %v root", name, e.modTime, e.uname, mtime)
		}
	}
	slices.Sort(got)
	var wantNames []string
	for name, w := range want {
		wantNames = append(wantNames, name)
		e, ok := data[name]
		if !ok {
			continue
		}
		if e.mode != w.mode || !bytes.Equal(e.data, []byte(readFile(t, w.src))) {
			t.Errorf("%s: mode %o (want %o), same bytes as %s: %v", name, e.mode, w.mode, w.src, bytes.Equal(e.data, []byte(readFile(t, w.src))))
		}
	}
	slices.Sort(wantNames)
	if !slices.Equal(got, wantNames) {
		t.Errorf("files\n got %q\nwant %q", got, wantNames)
	}
	for _, d := range []string{"/etc/slurmscope", "/usr/lib/slurmscope"} {
		if e, ok := data[d]; !ok || e.typ != tar.TypeDir {
			t.Errorf("no directory %s", d)
		}
	}
}

func TestGitVersion(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	gitRun := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE=2026-03-04T05:06:07Z", "GIT_COMMITTER_DATE=2026-03-04T05:06:07Z",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	gitRun("init", "-q")
	gitRun("commit", "-q", "--allow-empty", "-m", "one")
	hash := gitRun("rev-parse", "--short", "HEAD")
	v, mtime, err := GitVersion(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := "0.0.0-git20260304050607." + hash; v != want || !mtime.Equal(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)) {
		t.Errorf("untagged: %q %v, want %q", v, mtime, want)
	}
	gitRun("tag", "v1.4.0")
	if v, _, err := GitVersion(t.Context(), dir); err != nil || v != "1.4.0" {
		t.Errorf("tagged: %q %v, want 1.4.0", v, err)
	}
	if _, _, err := GitVersion(t.Context(), t.TempDir()); err == nil {
		t.Error("no repository: no error")
	}
}

// fakeStage stands in for the built binaries with ELF headers and no more:
// MinGlibc reads them as it reads the real ones (and finds no glibc
// symbols), and packing them takes no time.
func fakeStage(t *testing.T) Stage {
	t.Helper()
	dir := t.TempDir()
	st := Stage{Agent: filepath.Join(dir, "a"), CLI: filepath.Join(dir, "c"), InjectLib: filepath.Join(dir, "l")}
	for i, p := range []string{st.Agent, st.CLI, st.InjectLib} {
		h := make([]byte, 64)
		copy(h, "\x7fELF\x02\x01\x01") // 64-bit, little-endian, version 1
		binary.LittleEndian.PutUint16(h[16:], uint16(elf.ET_DYN))
		binary.LittleEndian.PutUint16(h[18:], uint16(elf.EM_X86_64))
		binary.LittleEndian.PutUint32(h[20:], uint32(elf.EV_CURRENT))
		binary.LittleEndian.PutUint16(h[52:], 64) // header size
		// Distinct bytes, so a file packed from the wrong source shows.
		if err := os.WriteFile(p, append(h, "stand-in "+strconv.Itoa(i)...), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if libc, err := MinGlibc(st.Agent, st.CLI, st.InjectLib); err != nil || libc != "" {
		t.Fatalf("stand-in ELF files: glibc %q, %v", libc, err)
	}
	return st
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readAr reads a Unix ar archive (a .deb's outer layer): "!<arch>\n", then
// per member a 60-byte header (name 16, mtime 12, uid 6, gid 6, mode 8,
// size 10, "`\n") and the data, padded to an even length.
func readAr(t *testing.T, path string) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("!<arch>\n")) {
		t.Fatalf("%s: not an ar archive", path)
	}
	out := map[string][]byte{}
	for b = b[8:]; len(b) > 0; {
		if len(b) < 60 || string(b[58:60]) != "`\n" {
			t.Fatalf("%s: bad ar header", path)
		}
		name := strings.TrimSuffix(strings.TrimSpace(string(b[:16])), "/")
		size, err := strconv.Atoi(strings.TrimSpace(string(b[48:58])))
		if err != nil || size < 0 || 60+size > len(b) {
			t.Fatalf("%s: member %s: bad size", path, name)
		}
		out[name] = b[60 : 60+size]
		b = b[min(len(b), 60+size+size%2):]
	}
	return out
}

type tarEntry struct {
	typ     byte
	mode    int64
	uname   string
	modTime time.Time
	data    []byte
}

// readTarGz reads a gzipped tar into entries keyed by absolute path
// ("./usr/bin/x" is "/usr/bin/x", the control member "./control" is
// "/control").
func readTarGz(t *testing.T, b []byte) map[string]tarEntry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]tarEntry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.Trim(strings.TrimPrefix(h.Name, "."), "/")
		if name == "/" {
			continue
		}
		out[name] = tarEntry{typ: h.Typeflag, mode: h.Mode & 0o7777, uname: h.Uname, modTime: h.ModTime, data: data}
	}
}

// controlFields reads a deb control file's "Key: value" lines (not the
// continuation lines of Description).
func controlFields(b []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ": "); ok && !strings.HasPrefix(k, " ") {
			out[k] = v
		}
	}
	return out
}

// TestTaskPrologPythonPerfSupportIsOptIn: the TaskProlog exports
// PYTHONPERFSUPPORT=1 into jobs only where the site turned it on, and
// otherwise prints nothing but the injection library's path.
func TestTaskPrologPythonPerfSupportIsOptIn(t *testing.T) {
	prolog := readFile(t, filepath.Join(repo, "deploy", "slurmscope-taskprolog.sh"))
	const off, on = "\npython_perf_support=0\n", "\npython_perf_support=1\n"
	if !strings.Contains(prolog, off) {
		t.Fatalf("taskprolog.sh does not set %q", strings.TrimSpace(off))
	}
	run := func(script string) string {
		out, err := exec.Command("sh", "-c", script).Output()
		if err != nil {
			t.Fatalf("sh: %v", err)
		}
		return string(out)
	}
	for _, line := range strings.Split(strings.TrimSpace(run(prolog)), "\n") {
		if line != "" && line != "export CUDA_INJECTION64_PATH="+InjectLib {
			t.Errorf("taskprolog.sh prints %q by default", line)
		}
	}
	if got := run(strings.Replace(prolog, off, on, 1)); !strings.Contains(got, "export PYTHONPERFSUPPORT=1\n") {
		t.Errorf("taskprolog.sh with python_perf_support=1 prints %q", got)
	}
}
