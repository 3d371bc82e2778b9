package bpf

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// LayoutMatches checks that v, a Go struct, is laid out as the C struct
// name in spec's BTF: the same size, and each C member at the offset of the
// Go field bpf2go would name for it (snake_case to CamelCase). For the few
// structs Go composes from generated ones (an event that embeds a shared
// struct), so that a C edit without its Go half fails a test.
func LayoutMatches(spec *ebpf.CollectionSpec, name string, v any) error {
	var st *btf.Struct
	if err := spec.Types.TypeByName(name, &st); err != nil {
		return fmt.Errorf("struct %s: %w", name, err)
	}
	rt := reflect.TypeOf(v)
	if rt.Kind() != reflect.Struct {
		return fmt.Errorf("%s is not a struct", rt)
	}
	if uintptr(st.Size) != rt.Size() {
		return fmt.Errorf("struct %s is %d bytes, %s %d", name, st.Size, rt, rt.Size())
	}
	for _, m := range st.Members {
		f, ok := rt.FieldByName(goName(m.Name))
		if !ok {
			return fmt.Errorf("struct %s: %s has no field for %s", name, rt, m.Name)
		}
		if uintptr(m.Offset.Bytes()) != f.Offset {
			return fmt.Errorf("struct %s: %s at %d, %s.%s at %d", name, m.Name, m.Offset.Bytes(), rt, f.Name, f.Offset)
		}
	}
	return nil
}

// goName is bpf2go's Go name of a C member: start_boottime_ns is
// StartBoottimeNs.
func goName(c string) string {
	var b strings.Builder
	for _, part := range strings.Split(c, "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}
