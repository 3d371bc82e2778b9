package cli

import (
	"flag"

	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/python"
)

// interpreters are the interpreters whose frames the stack capture walks,
// each its own package behind agent/interp (and a header listed in
// agent/bpf/include/interpreters.h); a new one is one more line here.
var interpreters = []interp.Interpreter{
	python.CPython{},
}

// interpFlags turns each interpreter on or off: --<name>-frames.
type interpFlags map[string]*bool

func (f interpFlags) register(fs *flag.FlagSet) {
	for _, in := range interpreters {
		f[in.Name()] = fs.Bool(in.Name()+"-frames", true, in.Help())
	}
}

// enabled lists the interpreters turned on.
func (f interpFlags) enabled() []interp.Interpreter {
	var out []interp.Interpreter
	for _, in := range interpreters {
		if on := f[in.Name()]; on != nil && *on {
			out = append(out, in)
		}
	}
	return out
}
