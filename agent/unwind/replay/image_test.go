package replay

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"
)

// TestImage: an image reads as the whole file (zeros between chunks,
// io.EOF at its end), refuses unrecorded bytes where memory is replayed,
// and survives Save and Load.
func TestImage(t *testing.T) {
	im := &Image{Size: 32, Chunks: []Chunk{{Off: 4, Data: []byte("abcd")}, {Off: 12, Data: []byte("xy")}}}
	b := make([]byte, 16)
	n, err := im.ReadAt(b, 2)
	want := []byte("\x00\x00abcd\x00\x00\x00\x00xy\x00\x00\x00\x00")
	if n != 16 || err != nil || !bytes.Equal(b, want) {
		t.Fatalf("ReadAt(16 at 2) = %d, %v, %q; want 16, nil, %q", n, err, b, want)
	}
	if n, err := im.ReadAt(b, 24); n != 8 || err != io.EOF {
		t.Fatalf("ReadAt past the end = %d, %v; want 8, EOF", n, err)
	}
	if err := im.Read(b[:4], 4); err != nil || string(b[:4]) != "abcd" {
		t.Fatalf("Read(4 at 4) = %v, %q", err, b[:4])
	}
	if err := im.Read(b[:4], 6); err == nil {
		t.Fatal("Read of bytes partly unrecorded succeeded")
	}
	if got := (&Image{Size: 32, Chunks: []Chunk{{Off: 0, Data: im.Bytes()}}}).SHA256(); got != im.SHA256() {
		t.Fatalf("the hash depends on the chunking: %s, %s", got, im.SHA256())
	}
	s := &Snapshot{Name: "t", Frames: []Frame{{PC: 1, SP: 2}}, Files: []File{{Path: "/f", Size: 32}}}
	s.SetImages(&Image{Chunks: []Chunk{{Off: 0x7ff0, Data: []byte{1, 2, 3}}}}, nil, []*Image{im})
	dir := filepath.Join(t.TempDir(), "t")
	if err := s.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.FileImage(0).SHA256() != im.SHA256() || got.StackImage().Chunks[0].Off != 0x7ff0 || got.MemoryImage() != nil || got.Frames[0] != s.Frames[0] {
		t.Fatalf("loaded %+v", got)
	}
}
