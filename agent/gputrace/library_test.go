package gputrace

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// buildLibrary builds the injection library with its own script and
// returns its path.
func buildLibrary(t *testing.T) string {
	t.Helper()
	cc := "cc"
	if v := os.Getenv("CC"); v != "" {
		cc = strings.Fields(v)[0]
	}
	testenv.Require(t, testenv.Tools(cc))
	dir := t.TempDir()
	if out, err := exec.Command("sh", "../../gpuinject/build.sh", dir).CombinedOutput(); err != nil {
		t.Fatalf("gpuinject/build.sh: %v\n%s", err, out)
	}
	return filepath.Join(dir, LibraryName)
}

// TestABIVersionHostileSymbol: the real library reads its ABI version; the
// same file with the symbol's value moved next to 2^64 (where value+4
// wraps) or past its section is refused as outside it.
func TestABIVersionHostileSymbol(t *testing.T) {
	raw, err := os.ReadFile(buildLibrary(t))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := readABIVersion(bytes.NewReader(raw), int64(len(raw))); err != nil || v != abiVersion {
		t.Fatalf("real library: %d, %v; want %d", v, err, abiVersion)
	}
	f, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	dynsym, dynstr := f.Section(".dynsym"), f.Section(".dynstr")
	strs, err := dynstr.Data()
	if err != nil {
		t.Fatal(err)
	}
	// The Elf64_Sym of the symbol: st_name at 0, st_value at 8.
	at := -1
	for off := uint64(0); off+24 <= dynsym.Size; off += 24 {
		e := raw[dynsym.Offset+off:]
		name := strs[binary.LittleEndian.Uint32(e):]
		if i := bytes.IndexByte(name, 0); i >= 0 && string(name[:i]) == "slurmscope_inject_abi_version" {
			at = int(dynsym.Offset + off + 8)
		}
	}
	if at < 0 {
		t.Fatal("no slurmscope_inject_abi_version in .dynsym")
	}
	value := binary.LittleEndian.Uint64(raw[at:])
	sec := f.Sections[slices.IndexFunc(f.Sections, func(s *elf.Section) bool {
		return s.Addr <= value && value < s.Addr+s.Size && s.Type != elf.SHT_NULL
	})]
	for _, v := range []uint64{1<<64 - 2, sec.Addr + sec.Size - 2, sec.Addr + sec.Size} {
		bad := slices.Clone(raw)
		binary.LittleEndian.PutUint64(bad[at:], v)
		if _, err := readABIVersion(bytes.NewReader(bad), int64(len(bad))); err == nil || !strings.Contains(err.Error(), "outside its section") {
			t.Errorf("value %#x: %v, want outside its section", v, err)
		}
	}
}
