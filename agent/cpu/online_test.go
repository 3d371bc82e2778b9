package cpu

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"0-3,5,7-8", []int{0, 1, 2, 3, 5, 7, 8}},
		{"0-3,5,7-8\n", []int{0, 1, 2, 3, 5, 7, 8}},
		{"0", []int{0}},
		{"", nil},
		{"\n", nil},
		{"4-4", []int{4}},
		{"2,0-1,1", []int{0, 1, 2}}, // unordered and overlapping: sorted, deduplicated
		{"8191", []int{8191}},
	} {
		got, err := parseCPUList(tc.in)
		if err != nil {
			t.Errorf("parseCPUList(%q): %v", tc.in, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("parseCPUList(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestParseCPUListRejects(t *testing.T) {
	for _, in := range []string{
		"a", "1-", "-1", "3-1", "1,,2", "1 2", "0-4294967295", "8192", "1-2-3", "+1", "0x1",
	} {
		if got, err := parseCPUList(in); err == nil {
			t.Errorf("parseCPUList(%q) = %v, want error", in, got)
		}
	}
}

func TestReadOnlineCPUs(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "devices", "system", "cpu")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "online"), []byte("0-1,4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readOnlineCPUs(root)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int{0, 1, 4}) {
		t.Errorf("readOnlineCPUs = %v", got)
	}
	if _, err := readOnlineCPUs(t.TempDir()); err == nil {
		t.Error("readOnlineCPUs of a tree without the file: want error")
	}
}
