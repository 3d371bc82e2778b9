// Package profiles turns symbolised stacks into one pprof profile per job
// and interval, labelled with the attribute schema's wire labels.
package profiles

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/schema"
)

// Type is a profile type; the types and their ids are defined in package
// schema.
type Type = schema.ProfileType

// CPU, GPU and OffCPU are the types the agent builds.
var (
	CPU = schema.ProcessCPU
	GPU = schema.GPUTime
	// OffCPU is pushed as one profile; its runnable time is read as
	// schema.OffCPURunnable.
	OffCPU = schema.OffCPU
)

// Label is one wire label.
type Label = schema.Label

// Builder accumulates the samples of one profile. Locations and functions
// are interned, so a stack seen a million times costs one entry.
type Builder struct {
	typ    Type
	period int64
	start  time.Time
	p      *profile.Profile

	mappings  map[string]*profile.Mapping
	functions map[funcKey]*profile.Function
	locations map[locKey]*profile.Location
	samples   map[string]*profile.Sample
	keyBuf    []byte
}

type funcKey struct{ name, file string }

type locKey struct {
	module       string
	addr         uint64
	fn, file     string
	line         int64
	inlinedChain string
}

// NewBuilder starts a profile of typ covering the interval from start.
func NewBuilder(typ Type, period int64, start time.Time) *Builder {
	return &Builder{
		typ: typ, period: period, start: start,
		p: &profile.Profile{
			SampleType:        valueTypes(typ.SampleTypes...),
			PeriodType:        valueTypes(typ.PeriodType)[0],
			Period:            period,
			TimeNanos:         start.UnixNano(),
			DefaultSampleType: typ.Main().Type,
		},
		mappings:  map[string]*profile.Mapping{},
		functions: map[funcKey]*profile.Function{},
		locations: map[locKey]*profile.Location{},
		samples:   map[string]*profile.Sample{},
	}
}

func valueTypes(vs ...schema.ValueType) []*profile.ValueType {
	out := make([]*profile.ValueType, len(vs))
	for i, v := range vs {
		out[i] = &profile.ValueType{Type: v.Type, Unit: v.Unit}
	}
	return out
}

// Empty reports whether no sample was added.
func (b *Builder) Empty() bool { return len(b.samples) == 0 }

// Add records values for a stack, leaf first. Frames that share an address
// (inlined calls) become one location with several lines, as pprof expects.
// sampleLabels (e.g. the job step) split samples inside the profile;
// Pyroscope turns them into series labels.
func (b *Builder) Add(stack []symbolize.Frame, sampleLabels []Label, values ...int64) {
	if len(values) != len(b.typ.SampleTypes) {
		panic(fmt.Sprintf("profiles: %d values for %d sample types", len(values), len(b.typ.SampleTypes)))
	}
	var locs []*profile.Location
	for i := 0; i < len(stack); {
		j := i + 1
		// symbolize returns inlined frames innermost first, each with
		// Inlined set except the outermost (the physical frame).
		for j-1 < len(stack) && stack[j-1].Inlined && j < len(stack) && stack[j].Address == stack[i].Address {
			j++
		}
		locs = append(locs, b.location(stack[i:j]))
		i = j
	}
	key := b.sampleKey(locs, sampleLabels)
	if s, ok := b.samples[key]; ok {
		for k, v := range values {
			s.Value[k] += v
		}
		return
	}
	s := &profile.Sample{Location: locs, Value: append([]int64(nil), values...)}
	if len(sampleLabels) > 0 {
		s.Label = map[string][]string{}
		for _, l := range sampleLabels {
			s.Label[l.Name] = []string{l.Value}
		}
	}
	b.samples[key] = s
	b.p.Sample = append(b.p.Sample, s)
}

func (b *Builder) sampleKey(locs []*profile.Location, labels []Label) string {
	b.keyBuf = b.keyBuf[:0]
	for _, l := range locs {
		b.keyBuf = fmt.Appendf(b.keyBuf, "%d,", l.ID)
	}
	for _, l := range labels {
		b.keyBuf = append(b.keyBuf, 0)
		b.keyBuf = append(b.keyBuf, l.Name...)
		b.keyBuf = append(b.keyBuf, 0)
		b.keyBuf = append(b.keyBuf, l.Value...)
	}
	return string(b.keyBuf)
}

func (b *Builder) location(frames []symbolize.Frame) *profile.Location {
	phys := frames[len(frames)-1]
	k := locKey{module: phys.Module, addr: phys.Address, fn: phys.Function, file: phys.File, line: int64(phys.Line)}
	if len(frames) > 1 {
		var sb strings.Builder
		for _, f := range frames[:len(frames)-1] {
			fmt.Fprintf(&sb, "%s\x00%s\x00%d\x00", f.Function, f.File, f.Line)
		}
		k.inlinedChain = sb.String()
	}
	if l, ok := b.locations[k]; ok {
		return l
	}
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Address: phys.Address, Mapping: b.mapping(phys.Module)} // #nosec G115 -- a length plus one, never negative
	for _, f := range frames {
		name := f.Function
		if name == "" {
			name = unknownName(f)
		}
		l.Line = append(l.Line, profile.Line{Function: b.function(name, f.File), Line: int64(f.Line)})
	}
	b.locations[k] = l
	b.p.Location = append(b.p.Location, l)
	return l
}

// unknownName keeps unresolved frames distinct per module, so "time in
// libfoo.so we could not name" is still visible.
func unknownName(f symbolize.Frame) string {
	if f.Module == "" {
		return "[unknown]"
	}
	m := f.Module
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	return "[" + strings.Trim(m, "[]") + "]"
}

func (b *Builder) function(name, file string) *profile.Function {
	k := funcKey{name, file}
	if f, ok := b.functions[k]; ok {
		return f
	}
	f := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: name, Filename: file} // #nosec G115 -- a length plus one, never negative
	b.functions[k] = f
	b.p.Function = append(b.p.Function, f)
	return f
}

func (b *Builder) mapping(module string) *profile.Mapping {
	if module == "" {
		return nil
	}
	if m, ok := b.mappings[module]; ok {
		return m
	}
	m := &profile.Mapping{ID: uint64(len(b.p.Mapping) + 1), File: module, HasFunctions: true} // #nosec G115 -- a length plus one, never negative
	b.mappings[module] = m
	b.p.Mapping = append(b.p.Mapping, m)
	return m
}

// Finish closes the profile at end and attaches the series labels as
// comments ("name=value", one per comment), so a file on disk says whose
// it is without a sidecar.
func (b *Builder) Finish(end time.Time, labels []Label) *profile.Profile {
	b.p.DurationNanos = end.Sub(b.start).Nanoseconds()
	b.p.Comments = nil
	for _, l := range labels {
		b.p.Comments = append(b.p.Comments, l.Name+"="+l.Value)
	}
	return b.p
}

// Encode serialises a profile as gzipped protobuf, the format both
// Pyroscope and go tool pprof read.
func Encode(p *profile.Profile) ([]byte, error) {
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("invalid profile: %w", err)
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
