package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Elapsed    float64 // seconds, on pass and fail
	Output     string
}

// queuedRE finds the e2e lanes' log of how long a parallel test waited for
// its lane (e2e/helpers_test.go): the rest of its time is its own.
var queuedRE = regexp.MustCompile(`queued (\S+) for its lane`)

type testKey struct{ pkg, test string }

type result struct {
	testKey
	status  string
	elapsed time.Duration
	queued  time.Duration
}

// summarize copies in's package lines to out, the output of each failed or
// unfinished test in full, and at the end the slowest top-level tests.
// failed says whether any test, package or build failed.
func summarize(in io.Reader, out io.Writer, slowest int) (failed bool, err error) {
	buf := map[testKey][]string{}
	queued := map[testKey]time.Duration{}
	var order []testKey // first seen, for unfinished tests
	var done []result
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// go test's own errors (a package that does not compile
			// before Go 1.24, a bad flag) are not JSON.
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		k := testKey{e.Package, e.Test}
		switch e.Action {
		case "build-output":
			fmt.Fprint(out, e.Output)
		case "build-fail":
			failed = true
		case "output":
			if e.Test == "" {
				if e.Output != "PASS\n" {
					fmt.Fprint(out, e.Output)
				}
				continue
			}
			if _, seen := buf[k]; !seen {
				order = append(order, k)
			}
			buf[k] = append(buf[k], e.Output)
			if m := queuedRE.FindStringSubmatch(e.Output); m != nil {
				if d, err := time.ParseDuration(m[1]); err == nil {
					queued[k] = d
				}
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				if e.Action == "fail" {
					failed = true
					for _, u := range order {
						if lines, open := buf[u]; open && u.pkg == e.Package {
							fmt.Fprintf(out, "--- unfinished: %s\n%s", u.test, strings.Join(lines, ""))
							delete(buf, u)
						}
					}
				}
				continue
			}
			if e.Action == "fail" {
				failed = true
				fmt.Fprint(out, strings.Join(buf[k], ""))
			}
			delete(buf, k)
			if !strings.Contains(e.Test, "/") {
				done = append(done, result{k, e.Action, time.Duration(e.Elapsed * float64(time.Second)), queued[k]})
			}
		}
	}
	if err := sc.Err(); err != nil {
		return true, fmt.Errorf("reading go test -json: %w", err)
	}
	writeSlowest(out, done, slowest)
	return failed, nil
}

func writeSlowest(out io.Writer, done []result, n int) {
	if n <= 0 || len(done) == 0 {
		return
	}
	sort.SliceStable(done, func(i, j int) bool { return done[i].elapsed-done[i].queued > done[j].elapsed-done[j].queued })
	if len(done) > n {
		done = done[:n]
	}
	fmt.Fprintf(out, "\nslowest tests (own time: elapsed less the time queued for an e2e lane)\n")
	fmt.Fprintf(out, "%8s %8s  %-4s  %s\n", "own", "queued", "", "test")
	for _, r := range done {
		pkg := r.pkg[strings.LastIndex(r.pkg, "/")+1:]
		fmt.Fprintf(out, "%7.1fs %7.1fs  %-4s  %s.%s\n", (r.elapsed - r.queued).Seconds(), r.queued.Seconds(), r.status, pkg, r.test)
	}
}
