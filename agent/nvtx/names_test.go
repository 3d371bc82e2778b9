package nvtx

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/symbolize"
)

// Literal ids: FNV-1a 64 of domain, 0x00, message (slurmscope_nvtx.h).
const (
	idStep       = 0x59e59c2f977af70d // "" / "step"
	idDomainStep = 0xcd95f6b14129572f // "mydomain" / "step"
	idPhaseA     = 0x21b4566d12d65fda // "" / "phase_a"
)

func TestRangeID(t *testing.T) {
	for _, c := range []struct {
		text string
		id   uint64
	}{{"\x00step", idStep}, {"mydomain\x00step", idDomainStep}, {"\x00phase_a", idPhaseA}} {
		if got := RangeID([]byte(c.text)); got != c.id {
			t.Errorf("RangeID(%q) = %016x, want %016x", c.text, got, c.id)
		}
	}
}

func TestParseName(t *testing.T) {
	long := strings.Repeat("m", messageMax)
	for _, c := range []struct {
		name      string
		id        uint64
		text      string
		domainLen uint32
		want      string // "" : refused
	}{
		{"default domain", idStep, "\x00step", 0, "[nvtx] step"},
		{"a domain", idDomainStep, "mydomain\x00step", 8, "[nvtx] mydomain: step"},
		{"wrong id", idStep + 1, "\x00step", 0, ""},
		{"another name's id", idStep, "\x00phase_a", 0, ""},
		{"domain length past its 0x00", idDomainStep, "mydomain\x00step", 9, ""},
		{"domain length beyond the text", RangeID([]byte("ab\x00")), "ab\x00", 3, ""},
		{"reserved id 0", 0, "\x00x", 0, ""},
		{"reserved id 1", 1, "\x00(other NVTX ranges)", 0, ""},
		{"empty", 2, "", 0, ""},
		{"longest message", RangeID([]byte("\x00" + long)), "\x00" + long, 0, "[nvtx] " + long},
		{"message past the cap", RangeID([]byte("\x00" + long + "m")), "\x00" + long + "m", 0, ""},
		{"domain past the cap", RangeID([]byte(strings.Repeat("d", 65) + "\x00m")), strings.Repeat("d", 65) + "\x00m", 65, ""},
		{"control characters and bad UTF-8", RangeID([]byte("\x00a\x1b[31m\xffb")), "\x00a\x1b[31m\xffb", 0, "[nvtx] a?[31m\ufffdb"},
		{"empty message", RangeID([]byte("d\x00")), "d\x00", 1, "[nvtx] d: (unnamed)"},
	} {
		got, err := ParseName(c.id, []byte(c.text), c.domainLen)
		if (err != nil) != (c.want == "") || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

var proc = procfs.ID{PID: 42, Start: procfs.StartFromBoottime(7_000_000_000)}

func iproc() interp.Process { return interp.Process{PID: 42, StartNs: 7_000_000_000} }

func frames(ids ...uint64) []bpf.InterpFrame {
	out := make([]bpf.InterpFrame, len(ids))
	for i, id := range ids {
		out[i] = bpf.InterpFrame{Addr: id, Check: Tag}
	}
	return out
}

func fnames(fs []symbolize.Frame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Function
		if f.Module != Module {
			out[i] += " (module " + f.Module + ")"
		}
	}
	return out
}

// TestRootNamesRanges: frames captured outermost first come back innermost
// first, named from the process's own announcements; unknown ids, the
// library's overflow id and a cut stack have frames that say so.
func TestRootNamesRanges(t *testing.T) {
	n := NewNames(NamesOptions{})
	for _, a := range []struct {
		id   uint64
		text string
		dl   uint32
	}{{idStep, "\x00step", 0}, {idPhaseA, "\x00phase_a", 0}, {idDomainStep, "mydomain\x00step", 8}} {
		if err := n.Add(proc, a.id, []byte(a.text), a.dl); err != nil {
			t.Fatal(err)
		}
	}
	got := fnames(n.Root(iproc(), frames(idStep, idPhaseA), false))
	if want := []string{"[nvtx] phase_a", "[nvtx] step"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	got = fnames(n.Root(iproc(), frames(idDomainStep, 1, 0x1234), true))
	want := []string{DeeperFrame, "[nvtx] (range 0000000000001234)", OtherFrame, "[nvtx] mydomain: step"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	// Another process (or the same pid started later) has no names.
	other := interp.Process{PID: 42, StartNs: 8_000_000_000}
	if got := fnames(n.Root(other, frames(idStep), false)); got[0] != "[nvtx] (range 59e59c2f977af70d)" {
		t.Errorf("another process's ranges named %q", got)
	}
	n.Forget(proc)
	if got := fnames(n.Root(iproc(), frames(idStep), false)); got[0] != "[nvtx] (range 59e59c2f977af70d)" {
		t.Errorf("forgotten process's ranges named %q", got)
	}
	if st := n.Stats(); st.Names != 3 || st.Frames != 7 || st.Unnamed != 3 || st.Truncated != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestNamesBounded: a process's names stop at its cap, all names at the
// byte bound, a job's at its budget share; others are not affected, and a
// refused or duplicate announcement changes nothing.
func TestNamesBounded(t *testing.T) {
	n := NewNames(NamesOptions{MaxPerProcess: 3, MaxBytes: 4 * (nameOverhead + 20)})
	add := func(p procfs.ID, msg string) error {
		text := []byte("\x00" + msg)
		return n.Add(p, RangeID(text), text, 0)
	}
	for i := range 5 {
		err := add(proc, "name"+string(rune('a'+i)))
		if (err != nil) != (i >= 3) {
			t.Fatalf("name %d: %v", i, err)
		}
	}
	if err := add(proc, "namea"); err != nil {
		t.Fatalf("duplicate: %v", err)
	}
	other := procfs.ID{PID: 43, Start: 1}
	if err := add(other, "x"); err != nil {
		t.Fatal(err)
	}
	if err := add(other, "y"); err == nil {
		t.Fatal("all names' bound not enforced")
	}
	if err := n.Add(other, 99, []byte("\x00forged"), 0); err == nil {
		t.Fatal("forged id accepted")
	}
	if err := n.Add(other, 1, []byte("\x00(other NVTX ranges)"), 0); err != nil {
		t.Fatalf("the overflow range's announcement: %v", err)
	}
	st := n.Stats()
	if st.Names != 4 || st.PerProcessFull != 2 || st.AllFull != 1 || st.Invalid != 1 || st.Duplicates != 2 {
		t.Errorf("stats %+v", st)
	}

	b := budget.New(budget.Options{Total: 2 * chargeStep, JobShare: chargeStep})
	owner := func(p procfs.ID) string { return budget.JobOwner(map[int]string{42: "1", 43: "2"}[p.PID]) }
	n = NewNames(NamesOptions{Budget: b, Owner: owner})
	big := strings.Repeat("z", 200)
	var refused bool
	for i := range 200 {
		if err := add(proc, big+string(rune('a'+i%26))+string(rune('a'+i/26))); err != nil {
			refused = true
			break
		}
	}
	if !refused || n.Stats().Refused != 1 || b.Held(budget.JobOwner("1")) != chargeStep {
		t.Fatalf("job 1 not held to its share: %+v, held %d", n.Stats(), b.Held(budget.JobOwner("1")))
	}
	if err := add(other, "fine"); err != nil {
		t.Fatalf("job 2 suffered from job 1: %v", err)
	}
	n.Forget(proc)
	if b.Held(budget.JobOwner("1")) != 0 {
		t.Error("forgotten process still charged")
	}
}

// TestDecodeName: the wire form of struct nvtx_name_event, from its
// generated type's layout; a text cut by the probe is refused.
func TestDecodeName(t *testing.T) {
	if got := binary.Size(probesNvtxNameEvent{}); got != nameEventLen {
		t.Fatalf("struct nvtx_name_event is %d bytes, decoder says %d", got, nameEventLen)
	}
	b := make([]byte, nameEventLen)
	le := binary.LittleEndian
	le.PutUint32(b, 42)
	le.PutUint32(b[4:], 5)
	le.PutUint64(b[8:], 7_000_000_000)
	le.PutUint64(b[16:], idStep)
	le.PutUint32(b[24:], 0)
	le.PutUint32(b[28:], 5)
	copy(b[32:], "\x00step")
	p, id, text, dl, ok := decodeName(b)
	if !ok || p != proc || id != idStep || string(text) != "\x00step" || dl != 0 {
		t.Fatalf("%v %x %q %d %v", p, id, text, dl, ok)
	}
	le.PutUint32(b[4:], 400) // claimed longer than copied
	if _, _, _, _, ok := decodeName(b); ok {
		t.Error("cut text accepted")
	}
	if _, _, _, _, ok := decodeName(b[:40]); ok {
		t.Error("short event accepted")
	}
}
