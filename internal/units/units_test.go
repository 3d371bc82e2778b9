package units

import (
	"flag"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"512", 512},
		{"512B", 512},
		{"1KiB", 1024},
		{"256MiB", 256 << 20},
		{"2GiB", 2 << 30},
		{"3TiB", 3 << 40},
		{"1kB", 1000},
		{"1KB", 1000},
		{"500MB", 500e6},
		{"10GB", 10e9},
		{"2TB", 2e12},
		{" 64MiB\n", 64 << 20},
		{"0GiB", 0},
		{"007MiB", 7 << 20},
		{"9223372036854775807", math.MaxInt64},
		{"8388607TiB", 8388607 << 40},
	} {
		if got, err := ParseBytes(c.in); err != nil || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestParseBytesErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":                     "want a size",
		"MiB":                  "want a size",
		"-1":                   "cannot be negative",
		"-1MiB":                "cannot be negative",
		"+1":                   "want a size",
		"1.5GiB":               "whole number",
		"10XB":                 `unknown unit "XB"`,
		"10G":                  `unknown unit "G"`,
		"10mb":                 `unknown unit "mb"`,
		"10kib":                `unknown unit "kib"`,
		"10Kb":                 `unknown unit "Kb"`,
		"5 MiB":                `unknown unit " MiB"`,
		"1e9":                  `unknown unit "e9"`,
		"0x10":                 `unknown unit "x10"`,
		"9999999TiB":           "too large",
		"8388608TiB":           "too large",
		"9223372036854775808":  "too large",
		"99999999999999999999": "too large",
	} {
		got, err := ParseBytes(in)
		if err == nil || got != 0 || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("ParseBytes(%q) = %d, %v; want an error naming it and saying %q", in, got, err, want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0:               "0",
		1:               "1",
		512:             "512",
		1000:            "1kB",
		1024:            "1KiB",
		1536:            "1536",
		2000:            "2kB",
		4194304:         "4MiB",
		67108864:        "64MiB",
		134217728:       "128MiB",
		268435456:       "256MiB",
		1 << 30:         "1GiB",
		10e9:            "10GB",
		1024000:         "1024kB",
		1 << 40:         "1TiB",
		1e12:            "1TB",
		1 << 50:         "1024TiB",
		math.MaxInt64:   "9223372036854775807",
		8388607 << 40:   "8388607TiB",
		-1:              "-1",
		100 << 20:       "100MiB",
		5 * 1000 * 1024: "5120kB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q; want %q", n, got, want)
		}
	}
}

// TestBytesRoundTrip: what FormatBytes writes, ParseBytes reads back.
func TestBytesRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 999, 1000, 1023, 1024, 1536, 1e6, 1 << 20, 3 << 30, 5e12, 7 << 40, 123456789, math.MaxInt64, 1<<62 + 1} {
		s := FormatBytes(n)
		if got, err := ParseBytes(s); err != nil || got != n {
			t.Errorf("ParseBytes(FormatBytes(%d) = %q) = %d, %v", n, s, got, err)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"0s", 0},
		{"90m", 90 * time.Minute},
		{"1.5h", 90 * time.Minute},
		{"250ms", 250 * time.Millisecond},
		{"24h0m0s", Day},
		{"-5s", -5 * time.Second},
		{"1d", Day},
		{"7d", 7 * Day},
		{"1w", Week},
		{"2w3d", 17 * Day},
		{"1d12h", 36 * time.Hour},
		{"1w2d6h30m", Week + 2*Day + 6*time.Hour + 30*time.Minute},
		{"1d1.5h", Day + 90*time.Minute},
		{"0d", 0},
		{"-1d12h", -36 * time.Hour},
		{"+2d", 2 * Day},
		{"106751d", 106751 * Day},
		{"106751d23h47m16.854775807s", math.MaxInt64},
		{"-2562047h47m16.854775808s", math.MinInt64},
	} {
		if got, err := ParseDuration(c.in); err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestParseDurationErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "want a duration",
		"7":                          "want a duration",
		"d":                          "want a duration",
		"w":                          "want a duration",
		"soon":                       "want a duration",
		"1.5d":                       "want a duration",
		"12h1d":                      "want a duration",
		"1d1w":                       "want a duration",
		"1d1d":                       "want a duration",
		"1d-5h":                      "want a duration",
		"1d+5h":                      "want a duration",
		"--1d":                       "want a duration",
		"1 d":                        "want a duration",
		"1D":                         "want a duration",
		"7days":                      "want a duration",
		"106752d":                    "too long",
		"106751d24h":                 "too long",
		"15250w2d":                   "too long",
		"99999999999999999999d":      "too long",
		"9999999999h":                "want a duration", // Go's own overflow
		"106751d23h47m16.854775808s": "too long",
	} {
		got, err := ParseDuration(in)
		if err == nil || got != 0 || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("ParseDuration(%q) = %v, %v; want an error naming it and saying %q", in, got, err, want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                      "0s",
		time.Second:            "1s",
		15 * time.Second:       "15s",
		10 * time.Minute:       "10m0s",
		time.Hour:              "1h0m0s",
		36 * time.Hour:         "36h0m0s",
		Day:                    "1d",
		168 * time.Hour:        "7d",
		30 * Day:               "30d",
		-2 * Day:               "-2d",
		Day + time.Nanosecond:  "24h0m0.000000001s",
		500 * time.Millisecond: "500ms",
		math.MaxInt64:          "2562047h47m16.854775807s",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q; want %q", d, got, want)
		}
		if back, err := ParseDuration(FormatDuration(d)); err != nil || back != d {
			t.Errorf("ParseDuration(FormatDuration(%v)) = %v, %v", d, back, err)
		}
	}
}

// TestFlags: the flag.Values set the default, take the suffixes, show the
// default in the suffixed form and refuse what the parsers refuse.
func TestFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var size, zero int64
	var keep, every time.Duration
	fs.Var(NewBytes(&size, 256<<20), "max-bytes", "bound")
	fs.Var(NewBytes(&zero, 0), "budget-bytes", "budget; 0: the default")
	fs.Var(NewDuration(&keep, 7*Day), "retention", "how long")
	fs.Var(NewDuration(&every, 15*time.Second), "interval", "how often")
	if size != 256<<20 || zero != 0 || keep != 7*Day || every != 15*time.Second {
		t.Fatalf("defaults not set: %d %d %v %v", size, zero, keep, every)
	}
	for name, want := range map[string]string{"max-bytes": "256MiB", "budget-bytes": "0", "retention": "7d", "interval": "15s"} {
		if got := fs.Lookup(name).DefValue; got != want {
			t.Errorf("--%s default shown as %q; want %q", name, got, want)
		}
	}
	var help strings.Builder
	fs.SetOutput(&help)
	fs.PrintDefaults()
	for _, want := range []string{"bound (default 256MiB)", "how long (default 7d)", "how often (default 15s)"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, help.String())
		}
	}
	if strings.Contains(help.String(), "budget; 0: the default (default") {
		t.Errorf("a zero default is shown:\n%s", help.String())
	}
	if err := fs.Parse([]string{"--max-bytes=1GiB", "--budget-bytes", "10GB", "--retention=1w2d", "--interval=1d12h"}); err != nil {
		t.Fatal(err)
	}
	if size != 1<<30 || zero != 10e9 || keep != 9*Day || every != 36*time.Hour {
		t.Errorf("parsed %d %d %v %v", size, zero, keep, every)
	}
	if got := fs.Lookup("interval").Value.(flag.Getter).Get(); got != 36*time.Hour {
		t.Errorf("Get() = %v", got)
	}
	if got := fs.Lookup("max-bytes").Value.(flag.Getter).Get(); got != int64(1<<30) {
		t.Errorf("Get() = %v", got)
	}
	for _, args := range [][]string{{"--max-bytes=-1"}, {"--max-bytes=1.5GiB"}, {"--retention=1.5d"}, {"--interval=soon"}} {
		err := fs.Parse(args)
		if err == nil {
			t.Errorf("%q: no error", args)
			continue
		}
		// The flag package quotes the value once; the message does not
		// repeat it.
		if v := args[0][strings.Index(args[0], "=")+1:]; strings.Count(err.Error(), `"`+v+`"`) != 1 {
			t.Errorf("%q: %v", args, err)
		}
	}
	if size != 1<<30 || keep != 9*Day || every != 36*time.Hour {
		t.Errorf("a refused value changed the flag: %d %v %v", size, keep, every)
	}
	var b Bytes
	var d Duration
	if b.String() != "0" || d.String() != "0s" {
		t.Errorf("zero values: %q %q", b.String(), d.String())
	}
}
