package printable

import (
	"slices"
	"testing"
)

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"a b": "a b", "x\ny": `x\ny`, "\x1b[31m": `\x1b[31m`, "✓": "✓", "\xff": `\xff`, `a\b`: `a\\b`, "": "-",
		"tab\there": `tab\there`, "bell\a": `bell\a`, "\u202eevil": `\u202eevil`, "\u0085next": `\u0085next`,
		"ok (1.0)": "ok (1.0)", "C1 \u009b[2J": `C1 \u009b[2J`,
	} {
		if got := String(in, "-"); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLines(t *testing.T) {
	if got := Lines("1:2: bad\n\x1b]0;x\x07"); !slices.Equal(got, []string{"1:2: bad", `\x1b]0;x\a`}) {
		t.Errorf("Lines = %q", got)
	}
}

func TestName(t *testing.T) {
	for in, want := range map[string]string{
		"gemm_kernel":             "gemm_kernel",
		"step\x00\n\t\x1b[2J":     "step????[2J",
		"\xff\xfeA":               "\uFFFD\uFFFDA",
		"caf\u00e9 \u0085 \u7b97": "caf\u00e9 ? \u7b97",
		"\x7f":                    "?",
		"":                        "",
	} {
		if got := Name([]byte(in)); got != want {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
	}
}
