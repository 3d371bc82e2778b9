// Command record regenerates the unwinder's replay snapshots
// (agent/unwind/replay/testdata) with package recorder. From the
// repository root:
//
//	go run ./agent/unwind/replay/record
//
// It needs gdb, gcc, g++, pyenv's CPython 3.9-3.13 and Debian's
// python3.11; -only records the named snapshots alone.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/slurmscope/slurmscope/agent/unwind/replay/recorder"
)

func main() {
	log.SetFlags(0)
	out := flag.String("out", "agent/unwind/replay/testdata", "snapshot directory")
	o := recorder.Options{WorkDir: recorder.DefaultWorkDir}
	flag.StringVar(&o.Src, "src", "internal/testenv/workloads", "the C and C++ workloads' sources")
	flag.StringVar(&o.Pyenv, "pyenv", filepath.Join(os.Getenv("HOME"), ".pyenv"), "pyenv's root (CPython 3.9-3.13 under versions/)")
	flag.StringVar(&o.DebianPython, "debian-python", "/usr/bin/python3.11", "Debian's python3.11")
	only := flag.String("only", "", "comma-separated snapshot names (default: all)")
	flag.Parse()
	defer os.RemoveAll(o.WorkDir)
	ws, err := recorder.Workloads(o)
	if err != nil {
		log.Fatal(err)
	}
	want := map[string]bool{}
	for _, n := range strings.Split(*only, ",") {
		want[n] = n != ""
	}
	for _, w := range ws {
		if *only != "" && !want[w.Name] {
			continue
		}
		s, err := recorder.Record(w)
		if err != nil {
			log.Fatalf("%s: %v", w.Name, err)
		}
		dir := filepath.Join(*out, w.Name)
		if err := os.RemoveAll(dir); err != nil {
			log.Fatal(err)
		}
		if err := s.Save(dir); err != nil {
			log.Fatalf("%s: %v", w.Name, err)
		}
		log.Printf("%s: %d frames, %s", w.Name, len(s.Frames), sizes(dir))
	}
}

func sizes(dir string) string {
	ents, _ := os.ReadDir(dir)
	var parts []string
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			parts = append(parts, fmt.Sprintf("%s %d B", e.Name(), fi.Size()))
		}
	}
	return strings.Join(parts, ", ")
}
