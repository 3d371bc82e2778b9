package main

import (
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	in := `{"Action":"start","Package":"x/a"}
{"Action":"run","Package":"x/a","Test":"TestQuiet"}
{"Action":"output","Package":"x/a","Test":"TestQuiet","Output":"=== RUN   TestQuiet\n"}
{"Action":"output","Package":"x/a","Test":"TestQuiet","Output":"    q_test.go:9: chatter of a passing test\n"}
{"Action":"pass","Package":"x/a","Test":"TestQuiet","Elapsed":2.5}
{"Action":"run","Package":"x/a","Test":"TestLoud"}
{"Action":"output","Package":"x/a","Test":"TestLoud","Output":"    helpers_test.go:40: queued 1m0s for its lane\n"}
{"Action":"run","Package":"x/a","Test":"TestLoud/sub"}
{"Action":"output","Package":"x/a","Test":"TestLoud/sub","Output":"    l_test.go:3: the reason it failed\n"}
{"Action":"fail","Package":"x/a","Test":"TestLoud/sub","Elapsed":1}
{"Action":"output","Package":"x/a","Test":"TestLoud","Output":"--- FAIL: TestLoud (70.00s)\n"}
{"Action":"fail","Package":"x/a","Test":"TestLoud","Elapsed":70}
{"Action":"output","Package":"x/a","Output":"PASS\n"}
{"Action":"output","Package":"x/a","Output":"FAIL\tx/a\t72.1s\n"}
{"Action":"fail","Package":"x/a","Elapsed":72.1}
{"Action":"run","Package":"x/b","Test":"TestHangs"}
{"Action":"output","Package":"x/b","Test":"TestHangs","Output":"    h_test.go:7: waiting for the job\n"}
{"Action":"output","Package":"x/b","Output":"panic: test timed out after 10m0s\n"}
{"Action":"fail","Package":"x/b","Elapsed":600}
{"ImportPath":"x/c","Action":"build-output","Output":"c.go:1:1: expected 'package'\n"}
{"ImportPath":"x/c","Action":"build-fail"}
# not json
`
	var out strings.Builder
	failed, err := summarize(strings.NewReader(in), &out, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Error("a failed run was not reported as failed")
	}
	got := out.String()
	for _, want := range []string{
		"the reason it failed",              // a failed subtest's output
		"--- FAIL: TestLoud (70.00s)",       // its parent's
		"FAIL\tx/a\t72.1s",                  // package lines pass through
		"--- unfinished: TestHangs\n",       // a test cut off by a timeout
		"waiting for the job",               // with what it said
		"panic: test timed out after 10m0s", // and the package's panic
		"c.go:1:1: expected 'package'",      // build errors
		"# not json",
		"   10.0s    60.0s  fail  a.TestLoud", // own time excludes the lane queue
		"    2.5s     0.0s  pass  a.TestQuiet",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"chatter of a passing test", "PASS\n", "TestLoud/sub"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output has %q:\n%s", unwanted, got)
		}
	}
	if strings.Index(got, "a.TestLoud") > strings.Index(got, "a.TestQuiet") {
		t.Errorf("slowest first:\n%s", got)
	}
}

func TestSummarizePassing(t *testing.T) {
	in := `{"Action":"run","Package":"x/a","Test":"TestA"}
{"Action":"skip","Package":"x/a","Test":"TestA","Elapsed":0}
{"Action":"output","Package":"x/a","Output":"ok  \tx/a\t0.1s\n"}
{"Action":"pass","Package":"x/a","Elapsed":0.1}
`
	var out strings.Builder
	failed, err := summarize(strings.NewReader(in), &out, 0)
	if err != nil || failed {
		t.Fatalf("failed=%v err=%v", failed, err)
	}
	if got := out.String(); got != "ok  \tx/a\t0.1s\n" {
		t.Errorf("output %q", got)
	}
}
