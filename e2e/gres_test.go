package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/slurmscope/slurmscope/internal/testenv/slurmtest"
)

// The mixed node of the GPU tests as slurmd sees it: GPUs 0 and 1 whole,
// GPU 2 in MIG mode with a 3g.40gb instance (GPU instance 2) and a 4g.40gb
// one (GPU instance 1). There is no driver, so the device files are
// stand-ins with the driver's numbers (195:<minor> for /dev/nvidia<minor>,
// and a major of their own for the MIG capabilities), which is all slurmd
// reads of them; the driver's mig-minors table is a file beside them.
const (
	capsMajor = 237
	mig3gCap  = 21 // gpu2/gi2/access
	mig4gCap  = 12 // gpu2/gi1/access
)

type mixedNode struct {
	gres      []slurmtest.GRES
	devRoot   string // --dev-root
	migMinors string // --nvidia-mig-minors
}

// agentFlags are the flags that point the agent at the stand-in devices.
func (m mixedNode) agentFlags() []string {
	return []string{"--dev-root", m.devRoot, "--nvidia-mig-minors", m.migMinors}
}

func newMixedNode(t *testing.T, node string) mixedNode {
	t.Helper()
	dir := t.TempDir()
	dev := func(name string, major, minor uint32) string {
		p := filepath.Join(dir, "dev", name)
		if err := slurmtest.CharDevice(p, major, minor); err != nil {
			t.Fatal(err)
		}
		return p
	}
	g0, g1, g2 := dev("nvidia0", 195, 0), dev("nvidia1", 195, 1), dev("nvidia2", 195, 2)
	caps := func(m uint32) string { return dev("nvidia-caps/nvidia-cap"+strconv.Itoa(int(m)), capsMajor, m) }
	m := mixedNode{devRoot: filepath.Join(dir, "dev"), migMinors: filepath.Join(dir, "mig-minors"),
		gres: []slurmtest.GRES{
			{Node: node, Type: "h100", Files: []string{g0}},
			{Node: node, Type: "h100", Files: []string{g1}},
			{Node: node, Type: "3g.40gb", Files: []string{g2, caps(mig3gCap), caps(mig3gCap + 1)}},
			{Node: node, Type: "4g.40gb", Files: []string{g2, caps(mig4gCap), caps(mig4gCap + 1)}},
		}}
	table := "config 1\nmonitor 2\n" +
		"gpu2/gi2/access " + strconv.Itoa(mig3gCap) + "\ngpu2/gi2/ci0/access " + strconv.Itoa(mig3gCap+1) + "\n" +
		"gpu2/gi1/access " + strconv.Itoa(mig4gCap) + "\ngpu2/gi1/ci0/access " + strconv.Itoa(mig4gCap+1) + "\n"
	if err := os.WriteFile(m.migMinors, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}
