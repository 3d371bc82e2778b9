// Package querytype is the registry of the datasource's query types. Each
// query type is one file here that registers itself: its name, the fields
// of its JSON model and their checks, the engine calls it makes and the
// frames it returns. The datasource parses and runs queries through it,
// its error text lists the types from it, the dashboards test checks
// query models with it, and the front end's list of types and their
// fields is generated from it (go generate; TestTypeScriptIsCurrent).
package querytype

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/schema"
)

//go:generate go run ./tsgen ../../../..

// Info describes a query type.
type Info struct {
	// Name is the JSON model's queryType.
	Name string
	// Key names it in the front end: QueryType.<Key>, its fields
	// <Key>Fields, and its editor, <Key>Editor, which
	// src/components/query/<Key>Editor.tsx exports.
	Key string
	// Label and Description are the editor's words for it.
	Label, Description string
	// Order places it in the editor's list and in error messages.
	Order int
	// Enums are the values of the fields tagged ts:"<name>": the front
	// end's union type <name>.
	Enums map[string][]string
	// Constants are numbers the front end's editor shows or checks.
	Constants map[string]int
}

// Query is a parsed and checked query.
type Query interface {
	// Needs says which backends it calls.
	Needs() Backends
	// Shape says what frames Run returns.
	Shape() Shape
	// Run asks the engine and builds the frames.
	Run(ctx context.Context, env Env) (data.Frames, error)
}

// Fields is what a query type's fields struct does. Check runs after the
// JSON model is decoded into it: it validates the fields and fills in
// defaults, and its errors are the user's.
type Fields interface {
	Query
	Check() error
}

// Backends says which backends a query calls.
type Backends struct{ Pyroscope, Prometheus bool }

// Shape is what a query's frames are.
type Shape struct {
	// Type is the frames' data plane type: data.FrameTypeTimeSeriesMulti
	// or data.FrameTypeNumericMulti, which alert rules evaluate, or ""
	// for a table, a flame graph or a list.
	Type data.FrameType
	// Labels are the labels its numbers carry.
	Labels []string
}

// Alertable says whether Grafana's alert rules can evaluate the frames.
func (s Shape) Alertable() bool {
	return s.Type == data.FrameTypeTimeSeriesMulti || s.Type == data.FrameTypeNumericMulti
}

// Env is what a query runs against.
type Env struct {
	Engine *query.Engine
	Scope  query.Scope
	Range  query.Range
	// ProfileType is what a query that names none reads: the settings'
	// default.
	ProfileType string
}

func (e Env) profileType(named string) string {
	if named != "" {
		return named
	}
	return e.ProfileType
}

// Default is the type of a query model that names none.
const Default = Flamegraph

type registered struct {
	Info
	fields reflect.Type // the fields struct
	parse  func(raw []byte) (Query, error)
}

var registry = map[string]*registered{}

// Register adds the query type info describes, whose JSON fields are F's.
// Each query type's file calls it from init; a name or key registered
// twice panics.
func Register[F any, PF interface {
	*F
	Fields
}](info Info) {
	for _, r := range registry {
		if r.Name == info.Name || r.Key == info.Key {
			panic(fmt.Sprintf("querytype: %s (%s) registered twice", info.Name, info.Key))
		}
	}
	registry[info.Name] = &registered{Info: info, fields: reflect.TypeFor[F](), parse: func(raw []byte) (Query, error) {
		f := PF(new(F))
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, f); err != nil {
				return nil, fmt.Errorf("query model is not valid JSON: %w", err)
			}
		}
		if err := f.Check(); err != nil {
			return nil, err
		}
		return f, nil
	}}
}

// All describes the query types, in their order.
func All() []Info {
	out := make([]Info, 0, len(registry))
	for _, r := range sorted() {
		out = append(out, r.Info)
	}
	return out
}

func sorted() []*registered {
	out := make([]*registered, 0, len(registry))
	for _, r := range registry {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *registered) int {
		if a.Order != b.Order {
			return a.Order - b.Order
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Names lists the query types' names, in their order.
func Names() []string {
	var out []string
	for _, r := range sorted() {
		out = append(out, r.Name)
	}
	return out
}

// Parse reads a query model of the named type from its JSON (fields of
// other types are ignored: Grafana keeps them when the user switches
// types) and checks it. Its errors are the user's.
func Parse(name string, raw []byte) (Query, error) {
	r, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("unknown queryType %q: want %s", name, oneOf(Names()))
	}
	return r.parse(raw)
}

// FieldNames lists the JSON fields of the named type's model.
func FieldNames(name string) []string {
	r, ok := registry[name]
	if !ok {
		return nil
	}
	var out []string
	for _, f := range jsonFields(r.fields) {
		out = append(out, f.name)
	}
	return out
}

type jsonField struct {
	name string
	typ  reflect.Type
	enum string // the ts tag
}

// jsonFields are t's exported fields with a JSON name.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		out = append(out, jsonField{name: name, typ: f.Type, enum: f.Tag.Get("ts")})
	}
	return out
}

// oneOf is "a, b or c".
func oneOf(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// attributes resolves attribute names (dotted) from the schema.
func attributes(names ...string) ([]schema.Attribute, error) {
	out := make([]schema.Attribute, 0, len(names))
	for _, n := range names {
		a, ok := schema.ByName(n)
		if !ok {
			return nil, fmt.Errorf("unknown attribute %q", n)
		}
		out = append(out, a)
	}
	return out, nil
}

// strs turns a list of named strings into strings, for Enums.
func strs[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// profileUnit maps a profile type's sample unit to a Grafana unit.
func profileUnit(profileType string) string {
	parts := strings.Split(profileType, ":")
	if len(parts) < 3 {
		return ""
	}
	switch parts[2] {
	case "nanoseconds":
		return "ns"
	case "bytes":
		return "bytes"
	}
	return "short"
}
