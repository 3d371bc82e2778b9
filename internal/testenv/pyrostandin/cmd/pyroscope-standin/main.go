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

	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4040", "address to listen on")
	tenant := flag.String("tenant", "", "require this X-Scope-OrgID")
	flag.Parse()

	var opts []pyrostandin.Option
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
