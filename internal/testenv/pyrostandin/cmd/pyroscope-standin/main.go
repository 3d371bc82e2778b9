// Command pyroscope-standin serves the in-memory Pyroscope stand-in (not a
// real Pyroscope) for demos and end-to-end runs.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4040", "address to listen on")
	tenant := flag.String("tenant", "", "require this X-Scope-OrgID")
	maxQuery := flag.Duration("max-query-length", 24*time.Hour, "longest query range, like Pyroscope's -querier.max-query-length (0: none)")
	older := flag.Duration("reject-older-than", time.Hour, "oldest profile accepted, like Pyroscope's -validation.reject-older-than (0: none)")
	newer := flag.Duration("reject-newer-than", 10*time.Minute, "furthest-ahead profile accepted, like -validation.reject-newer-than (0: none)")
	block := flag.Duration("block-duration", time.Hour, "span of the blocks label queries see whole (0: exact)")
	flag.Parse()

	opts := []pyrostandin.Option{pyrostandin.WithMaxQueryLength(*maxQuery),
		pyrostandin.WithIngestionWindow(*older, *newer), pyrostandin.WithBlockDuration(*block)}
	if *tenant != "" {
		opts = append(opts, pyrostandin.WithTenant(*tenant))
	}
	s := pyrostandin.New(opts...)
	if err := s.Start(*addr); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s listening on %s\n", pyrostandin.Banner, s.URL())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	s.Close()
}
