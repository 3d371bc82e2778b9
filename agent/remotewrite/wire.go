package remotewrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/golang/snappy"
	"google.golang.org/protobuf/encoding/protowire"
)

// The few messages of remote-write 1.0 (prometheus/prompb/types.proto and
// remote.proto), encoded by hand so that the agent need not import the
// Prometheus server module:
//
//	message WriteRequest { repeated TimeSeries timeseries = 1; }
//	message TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }
//	message Label        { string name = 1; string value = 2; }
//	message Sample       { double value = 1; int64 timestamp = 2; }
const (
	fieldWriteRequestTimeseries = 1
	fieldSeriesLabels           = 1
	fieldSeriesSamples          = 2
	fieldLabelName              = 1
	fieldLabelValue             = 2
	fieldSampleValue            = 1
	fieldSampleTimestamp        = 2
)

// MarshalWriteRequest encodes series as a protobuf prometheus.WriteRequest,
// uncompressed. The caller is responsible for label order (see FromGatherer).
func MarshalWriteRequest(series []TimeSeries) []byte {
	var out, ts, msg []byte
	for _, s := range series {
		ts = ts[:0]
		for _, l := range s.Labels {
			msg = msg[:0]
			msg = protowire.AppendTag(msg, fieldLabelName, protowire.BytesType)
			msg = protowire.AppendString(msg, l.Name)
			msg = protowire.AppendTag(msg, fieldLabelValue, protowire.BytesType)
			msg = protowire.AppendString(msg, l.Value)
			ts = protowire.AppendTag(ts, fieldSeriesLabels, protowire.BytesType)
			ts = protowire.AppendBytes(ts, msg)
		}
		for _, smp := range s.Samples {
			msg = msg[:0]
			// Both fields are always written, even at their zero values:
			// valid protobuf, and -0.0 survives.
			msg = protowire.AppendTag(msg, fieldSampleValue, protowire.Fixed64Type)
			msg = protowire.AppendFixed64(msg, math.Float64bits(smp.Value))
			msg = protowire.AppendTag(msg, fieldSampleTimestamp, protowire.VarintType)
			msg = protowire.AppendVarint(msg, uint64(smp.Timestamp)) // #nosec G115 -- protobuf's int64 is the varint's two's complement
			ts = protowire.AppendTag(ts, fieldSeriesSamples, protowire.BytesType)
			ts = protowire.AppendBytes(ts, msg)
		}
		out = protowire.AppendTag(out, fieldWriteRequestTimeseries, protowire.BytesType)
		out = protowire.AppendBytes(out, ts)
	}
	return out
}

// UnmarshalWriteRequest decodes a protobuf prometheus.WriteRequest. It is
// the inverse of MarshalWriteRequest and skips fields it does not know
// (metadata, exemplars, histograms), so it also reads what Prometheus sends.
// Malformed input is an error, never a panic.
func UnmarshalWriteRequest(b []byte) ([]TimeSeries, error) {
	var out []TimeSeries
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != fieldWriteRequestTimeseries {
			return nil
		}
		if typ != protowire.BytesType {
			return errWireType
		}
		s, err := unmarshalSeries(v)
		if err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

var errWireType = errors.New("remotewrite: unexpected wire type")

func unmarshalSeries(b []byte) (TimeSeries, error) {
	var s TimeSeries
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch num {
		case fieldSeriesLabels:
			if typ != protowire.BytesType {
				return errWireType
			}
			var l Label
			err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != fieldLabelName && num != fieldLabelValue {
					return nil
				}
				if typ != protowire.BytesType {
					return errWireType
				}
				if num == fieldLabelName {
					l.Name = string(v)
				} else {
					l.Value = string(v)
				}
				return nil
			})
			if err != nil {
				return err
			}
			s.Labels = append(s.Labels, l)
		case fieldSeriesSamples:
			if typ != protowire.BytesType {
				return errWireType
			}
			var smp Sample
			err := eachField(v, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
				switch {
				case num == fieldSampleValue && typ == protowire.Fixed64Type:
					smp.Value = math.Float64frombits(n)
				case num == fieldSampleTimestamp && typ == protowire.VarintType:
					smp.Timestamp = int64(n) // #nosec G115 -- protobuf's int64 is the varint's two's complement: every value is a valid timestamp
				case num == fieldSampleValue || num == fieldSampleTimestamp:
					return errWireType
				}
				return nil
			})
			if err != nil {
				return err
			}
			s.Samples = append(s.Samples, smp)
		}
		return nil
	})
	return s, err
}

// eachField walks the fields of one message. For bytes fields v is the
// payload; for varint and fixed fields n is the value.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return fmt.Errorf("remotewrite: bad tag: %w", protowire.ParseError(l))
		}
		b = b[l:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			n, l = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var n32 uint32
			n32, l = protowire.ConsumeFixed32(b)
			n = uint64(n32)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return fmt.Errorf("remotewrite: bad field %d: %w", num, protowire.ParseError(l))
		}
		b = b[l:]
		if err := fn(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}

// Spool entry format: a 3-byte header ("RW" and a version), the sample
// count as a uvarint (for the delivered-samples counter, without decoding
// the body), then the request body exactly as it is POSTed: a snappy
// block-compressed WriteRequest.
var entryMagic = [3]byte{'R', 'W', 1}

// maxDecodedBody bounds what a spool entry may claim to decompress to, so a
// corrupt length never makes the agent allocate gigabytes.
const maxDecodedBody = 256 << 20

func encodeEntry(series []TimeSeries) (entry []byte, samples int) {
	for _, s := range series {
		samples += len(s.Samples)
	}
	pb := MarshalWriteRequest(series)
	entry = make([]byte, 0, len(entryMagic)+binary.MaxVarintLen64+snappy.MaxEncodedLen(len(pb)))
	entry = append(entry, entryMagic[:]...)
	entry = binary.AppendUvarint(entry, uint64(samples)) // #nosec G115 -- a sum of lengths, never negative
	entry = append(entry, snappy.Encode(nil, pb)...)
	return entry, samples
}

// decodeEntry checks a spool entry and returns the body to POST. It does
// not decompress the body, only checks that its snappy header is sane.
func decodeEntry(entry []byte) (body []byte, samples int, err error) {
	if len(entry) < len(entryMagic) || [3]byte(entry[:3]) != entryMagic {
		return nil, 0, errors.New("not a remote-write spool entry")
	}
	n, l := binary.Uvarint(entry[3:])
	if l <= 0 || n > math.MaxInt32 {
		return nil, 0, errors.New("bad sample count")
	}
	body = entry[3+l:]
	dl, err := snappy.DecodedLen(body)
	if err != nil || dl > maxDecodedBody {
		return nil, 0, fmt.Errorf("bad snappy body (decoded length %d): %v", dl, err)
	}
	return body, int(n), nil
}
