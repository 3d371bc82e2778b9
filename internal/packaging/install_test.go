package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// The files each package installs (directories left out).
var (
	agentFiles = []string{AgentBinary, EnvFile, InjectLib, TaskProlog, UnitFile}
	cliFiles   = []string{CLIBinary}
)

// TestIntegrationInstall builds the packages as `mage package` does, from
// the real binaries, installs the .debs with dpkg into a scratch root and
// the .rpm with rpm into another, and checks what landed: the file list,
// that the unit file verifies and names a binary that is there, that the
// installed binaries run, that an admin's edit of the environment file
// survives a reinstall, and that both formats refuse a system whose C
// library is older than the binaries need.
func TestIntegrationInstall(t *testing.T) {
	// Root: dpkg installs files owned by root.
	testenv.RequireIntegration(t, testenv.Root, testenv.Tools("dpkg", "dpkg-query", "rpm", "systemd-analyze", "cc"))
	out := t.TempDir()
	// No -trimpath (mage package passes it): the e2e tests build the same
	// commands without it, so the build cache serves both.
	paths, err := Build(t.Context(), Options{Repo: repo, OutDir: out, Meta: Meta{Version: "1.2.3"}, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	pkg := map[string]string{}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes", filepath.Base(p), fi.Size())
		pkg[filepath.Base(p)] = p
	}
	arch := run(t, "dpkg", "--print-architecture")
	debs := map[string]string{AgentPackage: pkg["slurmscope-agent_1.2.3-1_"+arch+".deb"], CLIPackage: pkg["slurmscope_1.2.3-1_"+arch+".deb"]}
	rpmArch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[arch]
	agentRPM := pkg["slurmscope-agent-1.2.3-1."+rpmArch+".rpm"]
	if len(paths) != 4 || debs[AgentPackage] == "" || debs[CLIPackage] == "" || agentRPM == "" || pkg["slurmscope-1.2.3-1."+rpmArch+".rpm"] == "" {
		t.Fatalf("packages %v", paths)
	}

	// What the binaries need from the C library, read from the binaries.
	stage := t.TempDir()
	for _, pair := range [][2]string{{debs[AgentPackage], "agent"}, {debs[CLIPackage], "cli"}} {
		run(t, "dpkg-deb", "-x", pair[0], filepath.Join(stage, pair[1]))
	}
	agentLibc, err := MinGlibc(filepath.Join(stage, "agent", AgentBinary), filepath.Join(stage, "agent", InjectLib))
	if err != nil || agentLibc == "" {
		t.Fatalf("the agent imports no glibc version (%v): is it not a cgo build?", err)
	}

	t.Run("deb", func(t *testing.T) {
		root := dpkgRoot(t, "")
		dpkg(t, root, "-i", debs[AgentPackage], debs[CLIPackage])
		if got := run(t, "dpkg-deb", "-f", debs[AgentPackage], "Depends"); got != "libc6 (>= "+agentLibc+")" {
			t.Errorf("Depends: %q, want libc6 (>= %s)", got, agentLibc)
		}
		for name, want := range map[string][]string{AgentPackage: agentFiles, CLIPackage: cliFiles} {
			if status := dpkg(t, root, "-s", name); !strings.Contains(status, "Status: install ok installed") {
				t.Errorf("%s: %s", name, status)
			}
			var got []string
			for _, f := range strings.Split(dpkg(t, root, "-L", name), "\n") {
				if fi, err := os.Lstat(filepath.Join(root, f)); err == nil && !fi.IsDir() && !strings.HasPrefix(f, "/usr/share/doc/") {
					got = append(got, f)
				}
			}
			slices.Sort(got)
			want = slices.Sorted(slices.Values(want))
			if !slices.Equal(got, want) {
				t.Errorf("%s installs %q, want %q", name, got, want)
			}
		}
		checkInstalled(t, root)

		// An admin's edit of the environment file is kept when the package
		// is installed again (it is a conffile).
		edited := readFile(t, filepath.Join(root, EnvFile)) + "EXTRA_FLAGS=\"--log-level=debug\"\n"
		if err := os.WriteFile(filepath.Join(root, EnvFile), []byte(edited), 0o644); err != nil {
			t.Fatal(err)
		}
		dpkg(t, root, "-i", debs[AgentPackage])
		if got := readFile(t, filepath.Join(root, EnvFile)); got != edited {
			t.Errorf("reinstall replaced the edited %s", EnvFile)
		}
		// Removal takes the files and leaves the conffile (purge takes it).
		dpkg(t, root, "-r", AgentPackage)
		if _, err := os.Stat(filepath.Join(root, AgentBinary)); err == nil {
			t.Error("dpkg -r left the binary")
		}
		if got := readFile(t, filepath.Join(root, EnvFile)); got != edited {
			t.Error("dpkg -r removed the edited environment file")
		}
		dpkg(t, root, "--purge", AgentPackage)
		if _, err := os.Stat(filepath.Join(root, EnvFile)); err == nil {
			t.Error("dpkg --purge left the environment file")
		}
	})

	t.Run("deb refuses an older libc6", func(t *testing.T) {
		root := dpkgRoot(t, "2.17-1")
		cmd := exec.Command("dpkg", "--root="+root, "--force-script-chrootless", "-i", debs[AgentPackage])
		b, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(b), "depends on libc6 (>= "+agentLibc+")") {
			t.Errorf("dpkg -i with libc6 2.17: %v\n%s", err, b)
		}
		// Unpacked at most, never configured.
		if s, _ := exec.Command("dpkg", "--root="+root, "-s", AgentPackage).CombinedOutput(); strings.Contains(string(s), "install ok installed") {
			t.Error("configured despite the unmet dependency")
		}
	})

	t.Run("rpm", func(t *testing.T) {
		want := append(slices.Clone(agentFiles), "/etc/slurmscope", "/usr/lib/slurmscope", "/usr/share/licenses/slurmscope-agent/LICENSE")
		slices.Sort(want)
		if got := strings.Split(run(t, "rpm", "-qlp", agentRPM), "\n"); !slices.Equal(got, want) {
			t.Errorf("rpm -qlp:\n got %q\nwant %q", got, want)
		}
		if got := run(t, "rpm", "-qcp", agentRPM); got != EnvFile {
			t.Errorf("config files %q, want %s", got, EnvFile)
		}
		if got := run(t, "rpm", "-qp", "--requires", agentRPM); !slices.Contains(strings.Split(got, "\n"), "glibc >= "+agentLibc) {
			t.Errorf("requires:\n%s\nwant glibc >= %s", got, agentLibc)
		}
		scripts := run(t, "rpm", "-qp", "--scripts", agentRPM)
		for _, s := range []string{"postinstall.sh", "preremove.sh", "postremove.sh"} {
			if !strings.Contains(scripts, strings.TrimSpace(readFile(t, filepath.Join(repo, "deploy", "package", s)))) {
				t.Errorf("rpm scripts lack deploy/package/%s:\n%s", s, scripts)
			}
		}
		if got := run(t, "rpm", "-K", agentRPM); !strings.HasSuffix(got, "digests OK") {
			t.Errorf("rpm -K: %s", got)
		}

		// Installed into a scratch root. Its rpm database has no glibc:
		// without --nodeps rpm refuses, naming the requirement.
		root := t.TempDir()
		run(t, "rpm", "--root", root, "--initdb")
		b, err := exec.Command("rpm", "--root", root, "-i", "--noscripts", agentRPM).CombinedOutput()
		if err == nil || !strings.Contains(string(b), "glibc >= "+agentLibc+" is needed") {
			t.Errorf("rpm -i without glibc: %v\n%s", err, b)
		}
		// Scripts need a /bin/sh inside the root, which this one has not.
		run(t, "rpm", "--root", root, "-i", "--nodeps", "--noscripts", agentRPM)
		if got := run(t, "rpm", "--root", root, "-V", "--nodeps", AgentPackage); got != "" {
			t.Errorf("rpm -V: %s", got)
		}
		checkInstalled(t, root)
	})
}

// checkInstalled checks the agent's files in root: the unit verifies (its
// ExecStart binary is there and executable), its EnvironmentFile and the
// injection library the environment file names are there, and the
// installed binaries run.
func checkInstalled(t *testing.T, root string) {
	t.Helper()
	unit := readFile(t, filepath.Join(root, UnitFile))
	bin := regexp.MustCompile(`(?m)^ExecStart=(\S+)`).FindStringSubmatch(unit)
	envf := regexp.MustCompile(`(?m)^EnvironmentFile=(\S+)`).FindStringSubmatch(unit)
	lib := regexp.MustCompile(`--gpu-inject-lib=([^\s"]+)`).FindStringSubmatch(readFile(t, filepath.Join(root, EnvFile)))
	if bin == nil || envf == nil || lib == nil {
		t.Fatalf("unit %q %q, env %q", bin, envf, lib)
	}
	for _, p := range []string{bin[1], envf[1], lib[1]} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("named by the unit or its environment file: %v", err)
		}
	}
	// systemd-analyze needs the targets a unit hangs off; take the host's.
	targets, _ := filepath.Glob("/lib/systemd/system/*.target")
	if len(targets) == 0 {
		t.Fatal("no systemd targets in /lib/systemd/system")
	}
	for _, tg := range targets {
		dst := filepath.Join(root, "usr/lib/systemd/system", filepath.Base(tg))
		if err := os.WriteFile(dst, []byte(readFile(t, tg)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// It reports a bad setting on stderr and still exits 0, so any output
	// fails.
	if b, err := exec.Command("systemd-analyze", "--root="+root, "verify", UnitFile).CombinedOutput(); err != nil || len(b) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, b)
	}
	for _, tg := range targets {
		os.Remove(filepath.Join(root, "usr/lib/systemd/system", filepath.Base(tg)))
	}

	for bin, want := range map[string]string{AgentBinary: "Commands:\n  jobs", CLIBinary: "Commands:\n  diff"} {
		if _, err := os.Stat(filepath.Join(root, bin)); err != nil {
			continue // the rpm root has the agent only
		}
		b, err := exec.Command(filepath.Join(root, bin), "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s --help: %v\n%s", bin, err, b)
		}
	}
}

// dpkgRoot makes an empty dpkg root whose database holds only the host's
// libc6, at libcVersion if set, so that Depends is checked as on a node.
func dpkgRoot(t *testing.T, libcVersion string) string {
	t.Helper()
	root := t.TempDir()
	admin := filepath.Join(root, "var/lib/dpkg")
	for _, d := range []string{"info", "updates", "triggers"} {
		if err := os.MkdirAll(filepath.Join(admin, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	libc := run(t, "dpkg-query", "-s", "libc6")
	if libcVersion != "" {
		libc = regexp.MustCompile(`(?m)^Version: .*$`).ReplaceAllString(libc, "Version: "+libcVersion)
	}
	arch := run(t, "dpkg", "--print-architecture")
	for name, content := range map[string]string{
		"status":    libc + "\n\n",
		"available": "",
		// Its file list, which dpkg reads for every installed package.
		"info/libc6:" + arch + ".list": "",
	} {
		if err := os.WriteFile(filepath.Join(admin, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// dpkg runs dpkg on root. The maintainer scripts run outside the root
// (there is no /bin/sh inside), with DPKG_ROOT set, which tells them that
// this is not the running system.
func dpkg(t *testing.T, root string, args ...string) string {
	t.Helper()
	return run(t, "dpkg", append([]string{"--root=" + root, "--force-script-chrootless"}, args...)...)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	b, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, b)
	}
	return strings.TrimSpace(string(b))
}

// testLog sends the build's output to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
