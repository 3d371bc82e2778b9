package remotewrite

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/golang/snappy"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// hostile is a label value that would break any hand-rolled text format.
const hostile = "a \"quoted\" value\nwith a newline, a \\ backslash, ünïcødé and ✓ {}=,"

func sampleSeries() []TimeSeries {
	return []TimeSeries{
		{
			Labels:  []Label{{MetricNameLabel, "up"}, {"job", hostile}},
			Samples: []Sample{{Value: 1, Timestamp: 1700000000123}},
		},
		{
			Labels: []Label{{MetricNameLabel, "x"}, {"b", "v"}},
			Samples: []Sample{
				{Value: math.Copysign(0, -1), Timestamp: 0},
				{Value: math.Inf(1), Timestamp: -5},
				{Value: math.NaN(), Timestamp: math.MaxInt64},
				{Value: -1.5e300, Timestamp: math.MinInt64},
			},
		},
		{Labels: []Label{{MetricNameLabel, "no_samples"}}},
	}
}

func sameSeries(t *testing.T, got, want []TimeSeries) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d series, want %d:\n%v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if len(g.Labels) != len(w.Labels) || len(g.Samples) != len(w.Samples) {
			t.Fatalf("series %d: got %+v, want %+v", i, g, w)
		}
		for j := range w.Labels {
			if g.Labels[j] != w.Labels[j] {
				t.Errorf("series %d label %d: got %q, want %q", i, j, g.Labels[j], w.Labels[j])
			}
		}
		for j := range w.Samples {
			// Compare bits: NaN and -0 must survive exactly.
			if math.Float64bits(g.Samples[j].Value) != math.Float64bits(w.Samples[j].Value) || g.Samples[j].Timestamp != w.Samples[j].Timestamp {
				t.Errorf("series %d sample %d: got %v, want %v", i, j, g.Samples[j], w.Samples[j])
			}
		}
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	want := sampleSeries()
	got, err := UnmarshalWriteRequest(MarshalWriteRequest(want))
	if err != nil {
		t.Fatal(err)
	}
	sameSeries(t, got, want)

	if got, err := UnmarshalWriteRequest(MarshalWriteRequest(nil)); err != nil || len(got) != 0 {
		t.Fatalf("empty request: %v, %v", got, err)
	}
}

// writeRequestDescriptor describes prometheus.WriteRequest as Prometheus'
// prompb declares it, so that an independent protobuf implementation
// (dynamicpb) can check the hand-written encoder.
func writeRequestDescriptor(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, num int32, label *descriptorpb.FieldDescriptorProto_Label, typ descriptorpb.FieldDescriptorProto_Type, msg string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Label: label, Type: typ.Enum()}
		if msg != "" {
			f.TypeName = proto.String(".prometheus." + msg)
		}
		return f
	}
	const (
		tMsg    = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
		tString = descriptorpb.FieldDescriptorProto_TYPE_STRING
		tDouble = descriptorpb.FieldDescriptorProto_TYPE_DOUBLE
		tInt64  = descriptorpb.FieldDescriptorProto_TYPE_INT64
	)
	fd := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("remote.proto"),
		Package: proto.String("prometheus"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("WriteRequest"), Field: []*descriptorpb.FieldDescriptorProto{field("timeseries", 1, rep, tMsg, "TimeSeries")}},
			{Name: proto.String("TimeSeries"), Field: []*descriptorpb.FieldDescriptorProto{field("labels", 1, rep, tMsg, "Label"), field("samples", 2, rep, tMsg, "Sample")}},
			{Name: proto.String("Label"), Field: []*descriptorpb.FieldDescriptorProto{field("name", 1, opt, tString, ""), field("value", 2, opt, tString, "")}},
			{Name: proto.String("Sample"), Field: []*descriptorpb.FieldDescriptorProto{field("value", 1, opt, tDouble, ""), field("timestamp", 2, opt, tInt64, "")}},
		},
	}
	f, err := protodesc.NewFile(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f.Messages().ByName("WriteRequest")
}

func TestMarshalMatchesProtobufSchema(t *testing.T) {
	md := writeRequestDescriptor(t)
	want := sampleSeries()
	msg := dynamicpb.NewMessage(md)
	if err := (proto.UnmarshalOptions{}).Unmarshal(MarshalWriteRequest(want), msg); err != nil {
		t.Fatalf("a real protobuf decoder refuses the request: %v", err)
	}
	var got []TimeSeries
	tsList := msg.Get(md.Fields().ByName("timeseries")).List()
	for i := 0; i < tsList.Len(); i++ {
		ts := tsList.Get(i).Message()
		var s TimeSeries
		ls := ts.Get(ts.Descriptor().Fields().ByName("labels")).List()
		for j := 0; j < ls.Len(); j++ {
			l := ls.Get(j).Message()
			s.Labels = append(s.Labels, Label{
				l.Get(l.Descriptor().Fields().ByName("name")).String(),
				l.Get(l.Descriptor().Fields().ByName("value")).String(),
			})
		}
		ss := ts.Get(ts.Descriptor().Fields().ByName("samples")).List()
		for j := 0; j < ss.Len(); j++ {
			m := ss.Get(j).Message()
			s.Samples = append(s.Samples, Sample{
				m.Get(m.Descriptor().Fields().ByName("value")).Float(),
				m.Get(m.Descriptor().Fields().ByName("timestamp")).Int(),
			})
		}
		got = append(got, s)
	}
	sameSeries(t, got, want)

	// And the other way: what a real encoder writes, our decoder reads.
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalWriteRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	sameSeries(t, back, want)
}

func TestUnmarshalHostileInputNeverPanics(t *testing.T) {
	good := MarshalWriteRequest(sampleSeries())
	// Every truncation, and random corruption, must end in an error or a
	// result, never a panic.
	for i := range good {
		_, _ = UnmarshalWriteRequest(good[:i])
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := bytes.Clone(good)
		for range 1 + r.IntN(4) {
			b[r.IntN(len(b))] = byte(r.Uint32())
		}
		_, _ = UnmarshalWriteRequest(b)
	}
	for _, b := range [][]byte{
		{0x0a},                   // field 1, no length
		{0x0a, 0xff, 0xff, 0xff}, // length past the end
		{0x08, 0x01},             // field 1 as a varint
		{0x0a, 0x02, 0x12, 0x00}, // samples with a zero-length body: fine
		{0x0f},                   // invalid wire type
	} {
		_, _ = UnmarshalWriteRequest(b)
	}
	if _, err := UnmarshalWriteRequest([]byte{0x08, 0x01}); err == nil {
		t.Error("a timeseries field with the wrong wire type must be an error")
	}
}

func FuzzUnmarshalWriteRequest(f *testing.F) {
	f.Add(MarshalWriteRequest(sampleSeries()))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		series, err := UnmarshalWriteRequest(b)
		if err != nil {
			return
		}
		// What decodes must re-encode and decode to the same thing.
		again, err := UnmarshalWriteRequest(MarshalWriteRequest(series))
		if err != nil || len(again) != len(series) {
			t.Fatalf("re-encoding changed the request: %v", err)
		}
	})
}

func TestSpoolEntry(t *testing.T) {
	series := sampleSeries()
	entry, n := encodeEntry(series)
	if n != 5 {
		t.Fatalf("sample count %d, want 5", n)
	}
	body, samples, err := decodeEntry(entry)
	if err != nil || samples != 5 {
		t.Fatalf("decodeEntry: %d samples, %v", samples, err)
	}
	pb, err := snappy.Decode(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalWriteRequest(pb)
	if err != nil {
		t.Fatal(err)
	}
	sameSeries(t, got, series)

	for _, bad := range [][]byte{
		nil,
		[]byte("RW"),
		[]byte("XY\x01\x00"),
		{'R', 'W', 1}, // no count
		{'R', 'W', 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // count overflows
		{'R', 'W', 1, 1, 0xff, 0xff, 0xff, 0xff, 0x7f},                            // snappy claims ~34 GB
		{'R', 'W', 2, 1, 0}, // unknown version
	} {
		if _, _, err := decodeEntry(bad); err == nil {
			t.Errorf("decodeEntry(%q) accepted a bad entry", bad)
		}
	}
}

func TestSplit(t *testing.T) {
	var series []TimeSeries
	for i := range 7 {
		series = append(series, TimeSeries{Labels: []Label{{MetricNameLabel, "m"}}, Samples: []Sample{{float64(i), int64(i)}}})
	}
	// One series with several samples, to be cut in order.
	series = append(series, TimeSeries{Labels: []Label{{MetricNameLabel, "many"}}, Samples: []Sample{{1, 1}, {2, 2}, {3, 3}, {4, 4}}})
	batches := split(series, 3)
	total, lastMany := 0, int64(0)
	for _, b := range batches {
		n := 0
		for _, s := range b {
			n += len(s.Samples)
			if s.Labels[0].Value == "many" {
				for _, smp := range s.Samples {
					if smp.Timestamp <= lastMany {
						t.Fatalf("samples of one series out of order across batches")
					}
					lastMany = smp.Timestamp
				}
			}
		}
		if n == 0 || n > 3 {
			t.Fatalf("batch of %d samples, want 1..3", n)
		}
		total += n
	}
	if total != 11 || len(batches) != 4 {
		t.Fatalf("%d samples in %d batches, want 11 in 4", total, len(batches))
	}
	if len(split(nil, 3)) != 0 {
		t.Fatal("no series must make no batch")
	}
}
