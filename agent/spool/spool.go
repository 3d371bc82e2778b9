// Package spool is a bounded, durable, on-disk FIFO queue.
//
// The agent writes every encoded push request (and metric batch) here before
// anything tries to send it, so a backend outage or an agent restart loses
// nothing while the spool has room. When it has no room, the oldest entries go
// first and are counted: data is never lost silently.
//
// Layout: one file per entry, named by a zero-padded, strictly increasing
// sequence number (00000000000000000042.entry), so a directory listing sorted
// by name is the queue order and a restart continues where it left off. Each
// file is written to a temporary name, fsynced, renamed into place and the
// directory fsynced, so an entry is either wholly present or absent after a
// crash. A file that is nevertheless truncated or corrupt (its checksum does
// not match) is moved to the quarantine/ subdirectory and counted, never
// returned and never fatal.
//
// Delivery: the consumer takes the oldest entry with Peek or Next and removes
// it with Ack only after it was delivered. A crash between delivery and Ack
// replays that entry after the restart, so delivery is at-least-once across a
// crash and exactly-once otherwise.
//
// A Spool is safe for concurrent use. It expects one consumer; several
// producers are fine. Open locks the directory (flock of its .lock file), so
// a second reader, in this process or another, is refused with ErrLocked.
package spool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// File format of one entry: magic (4 bytes), payload length (uint32, big
// endian), CRC-32C of the payload (uint32), payload.
const (
	headerSize = 12
	entryExt   = ".entry"
	tmpPrefix  = ".tmp-"
	lockName   = ".lock"
	// QuarantineDir is the subdirectory that corrupt entries are moved to.
	QuarantineDir = "quarantine"
)

var magic = [4]byte{'S', 'S', 'P', '1'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	// ErrEmpty is returned by Peek when the spool holds no entry.
	ErrEmpty = errors.New("spool: empty")
	// ErrTooLarge is returned by Append for a payload that could never fit,
	// since it is bigger than the spool's whole bound.
	ErrTooLarge = errors.New("spool: entry larger than the spool bound")
	// ErrFull is returned by Append in the one case where dropping old
	// entries cannot make room: the only entry left is the one the consumer
	// is delivering right now, and both together exceed the bound.
	ErrFull = errors.New("spool: full")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("spool: closed")
	// ErrLocked is returned by Open for a directory that another open
	// Spool, in this process or another, reads.
	ErrLocked = errors.New("spool: directory in use by another reader (another agent, or another backend's spool flag naming it)")
)

// Entry is one queued payload. Seq orders entries within one Open; a run
// that starts with an empty spool numbers from 1 again.
type Entry struct {
	Seq     uint64
	Payload []byte
}

// Stats are the spool's counters since Open. Counters of dropped data are
// what the agent exports, so that nothing is dropped silently.
type Stats struct {
	Entries       int    // entries now queued
	Bytes         int64  // bytes now queued, file headers included
	Appended      uint64 // entries accepted by Append
	Acked         uint64 // entries removed by Ack
	DroppedOldest uint64 // entries evicted to make room for newer ones
	DroppedBytes  uint64 // bytes of those entries
	RejectedLarge uint64 // payloads refused because they exceed the bound
	RejectedFull  uint64 // payloads refused with ErrFull
	Corrupt       uint64 // entries found truncated or corrupt and quarantined
}

type item struct {
	seq  uint64
	size int64 // file size: header + payload
}

// Spool is a bounded on-disk FIFO queue. Create one with Open.
type Spool struct {
	dir      string
	maxBytes int64
	log      *slog.Logger
	noSync   bool
	lock     *os.File // flocked while open

	mu     sync.Mutex
	items  []item // queue order, oldest first
	bytes  int64
	next   uint64 // sequence number of the next Append
	leased uint64 // seq handed out by Peek and not yet acked; 0 = none
	closed bool
	stats  Stats
	// wake is signalled (without blocking) whenever an entry is appended,
	// so that Next need not poll.
	wake chan struct{}
	done chan struct{} // closed by Close, to release Next
}

// Option configures Open.
type Option func(*Spool)

// WithLogger sets the logger for quarantined entries and other rare events.
func WithLogger(l *slog.Logger) Option { return func(s *Spool) { s.log = l } }

// WithoutFsync skips fsync. Only for tests and tmpfs: it gives up durability
// across a power loss, not across a process crash.
func WithoutFsync() Option { return func(s *Spool) { s.noSync = true } }

// MinBytes is what a bound must exceed: one entry's header.
const MinBytes = headerSize

// Open opens the spool in dir, creating dir if needed, and indexes the
// entries a previous run left there. maxBytes bounds the total size of the
// entry files.
func Open(dir string, maxBytes int64, opts ...Option) (*Spool, error) {
	if maxBytes <= headerSize {
		return nil, fmt.Errorf("spool: bound of %d bytes is too small", maxBytes)
	}
	s := &Spool{dir: dir, maxBytes: maxBytes, log: slog.Default(), next: 1, wake: make(chan struct{}, 1), done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if err := s.lockDir(); err != nil {
		return nil, err
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		s.lock.Close()
		return nil, fmt.Errorf("spool: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			// An Append that crashed before its rename: never acknowledged
			// to the producer, so removing it loses nothing promised.
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		if de.IsDir() || !strings.HasSuffix(name, entryExt) {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(name, entryExt), 10, 64)
		if err != nil || seq == 0 {
			continue // not ours
		}
		fi, err := de.Info()
		if err != nil {
			continue // vanished under us
		}
		if fi.Size() < headerSize {
			s.quarantineLocked(seq, "truncated header")
			continue
		}
		s.items = append(s.items, item{seq: seq, size: fi.Size()})
		s.bytes += fi.Size()
		if seq >= s.next {
			s.next = seq + 1
		}
	}
	sort.Slice(s.items, func(i, j int) bool { return s.items[i].seq < s.items[j].seq })
	// A previous run may have had a larger bound: enforce this one now.
	for s.bytes > s.maxBytes && len(s.items) > 0 {
		s.dropLocked(0)
	}
	return s, nil
}

// lockDir takes the directory's lock: two readers of one spool would
// deliver its entries twice and ack each other's.
func (s *Spool) lockDir() error {
	f, err := os.OpenFile(filepath.Join(s.dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	// flock locks belong to the open file, so a second Open in this
	// process is refused like another process.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("%w: %s", ErrLocked, s.dir)
		}
		return fmt.Errorf("spool: lock %s: %w", s.dir, err)
	}
	s.lock = f
	return nil
}

// Dir returns the spool's directory.
func (s *Spool) Dir() string { return s.dir }

// MaxBytes returns the spool's bound.
func (s *Spool) MaxBytes() int64 { return s.maxBytes }

func (s *Spool) path(seq uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d%s", seq, entryExt))
}

// Append queues payload durably. If the spool would exceed its bound, the
// oldest entries are dropped (and counted) to make room. A payload larger than
// the bound is refused with ErrTooLarge and counted.
func (s *Spool) Append(payload []byte) error {
	size := int64(headerSize + len(payload))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if size > s.maxBytes || len(payload) > int(^uint32(0)) {
		s.stats.RejectedLarge++
		return fmt.Errorf("%w: %d bytes, bound %d", ErrTooLarge, size, s.maxBytes)
	}
	// Make room, oldest first, but never evict the entry the consumer is
	// delivering right now: it would be counted as dropped and delivered.
	for s.bytes+size > s.maxBytes {
		i := 0
		if len(s.items) > 0 && s.items[0].seq == s.leased {
			i = 1
		}
		if i >= len(s.items) {
			s.stats.RejectedFull++
			return fmt.Errorf("%w: the entry being delivered leaves no room for %d bytes", ErrFull, size)
		}
		s.dropLocked(i)
	}
	seq := s.next
	if err := s.writeLocked(seq, payload); err != nil {
		return err
	}
	s.next++
	s.items = append(s.items, item{seq: seq, size: size})
	s.bytes += size
	s.stats.Appended++
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

func (s *Spool) writeLocked(seq uint64, payload []byte) (err error) {
	tmp := filepath.Join(s.dir, fmt.Sprintf("%s%020d", tmpPrefix, seq))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	var h [headerSize]byte
	copy(h[:4], magic[:])
	binary.BigEndian.PutUint32(h[4:8], uint32(len(payload))) // #nosec G115 -- Put refuses a payload over 2^32-1 bytes
	binary.BigEndian.PutUint32(h[8:12], crc32.Checksum(payload, castagnoli))
	if _, err = f.Write(h[:]); err != nil {
		return fmt.Errorf("spool: write: %w", err)
	}
	if _, err = f.Write(payload); err != nil {
		return fmt.Errorf("spool: write: %w", err)
	}
	if !s.noSync {
		if err = f.Sync(); err != nil {
			return fmt.Errorf("spool: fsync: %w", err)
		}
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("spool: close: %w", err)
	}
	if err = os.Rename(tmp, s.path(seq)); err != nil {
		return fmt.Errorf("spool: rename: %w", err)
	}
	if !s.noSync {
		// The rename is durable only once the directory is.
		if d, derr := os.Open(s.dir); derr == nil {
			_ = d.Sync()
			d.Close()
		}
	}
	return nil
}

// dropLocked evicts items[i] to make room, counting it.
func (s *Spool) dropLocked(i int) {
	it := s.items[i]
	_ = os.Remove(s.path(it.seq))
	s.items = append(s.items[:i], s.items[i+1:]...)
	s.bytes -= it.size
	s.stats.DroppedOldest++
	s.stats.DroppedBytes += uint64(it.size) // #nosec G115 -- a file size, never negative
}

// quarantineLocked moves a bad entry aside for a human to look at.
func (s *Spool) quarantineLocked(seq uint64, why string) {
	s.stats.Corrupt++
	qdir := filepath.Join(s.dir, QuarantineDir)
	src := s.path(seq)
	if err := os.MkdirAll(qdir, 0o750); err == nil {
		// Numbering restarts at 1 when a run starts with an empty spool, so
		// a name can recur here: never overwrite an earlier quarantined file.
		dst := filepath.Join(qdir, filepath.Base(src))
		for n := 1; ; n++ {
			if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
				break
			}
			dst = filepath.Join(qdir, fmt.Sprintf("%s.%d", filepath.Base(src), n))
		}
		if err := os.Rename(src, dst); err == nil {
			s.log.Warn("spool: quarantined a corrupt entry", "seq", seq, "reason", why, "dir", qdir)
			return
		}
	}
	// Could not move it: remove it, so that it cannot block the queue.
	_ = os.Remove(src)
	s.log.Warn("spool: removed a corrupt entry", "seq", seq, "reason", why)
}

// Peek returns the oldest entry without removing it, or ErrEmpty. Corrupt
// entries met on the way are quarantined and skipped. The returned entry
// is protected from eviction until it is acked or another Peek.
func (s *Spool) Peek() (Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Entry{}, ErrClosed
	}
	for len(s.items) > 0 {
		it := s.items[0]
		payload, err := s.read(it)
		if err != nil {
			s.items = s.items[1:]
			s.bytes -= it.size
			if errors.Is(err, os.ErrNotExist) {
				// Removed behind our back; nothing to quarantine.
				s.stats.Corrupt++
				s.log.Warn("spool: an entry vanished", "seq", it.seq)
				continue
			}
			s.quarantineLocked(it.seq, err.Error())
			continue
		}
		s.leased = it.seq
		return Entry{Seq: it.seq, Payload: payload}, nil
	}
	s.leased = 0
	return Entry{}, ErrEmpty
}

func (s *Spool) read(it item) ([]byte, error) {
	f, err := os.Open(s.path(it.seq))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var h [headerSize]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return nil, fmt.Errorf("truncated header: %v", err)
	}
	if [4]byte(h[:4]) != magic {
		return nil, errors.New("bad magic")
	}
	n := binary.BigEndian.Uint32(h[4:8])
	if int64(n)+headerSize != it.size {
		return nil, fmt.Errorf("length %d does not match file size %d", n, it.size)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(f, payload); err != nil {
		return nil, fmt.Errorf("truncated payload: %v", err)
	}
	if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(h[8:12]) {
		return nil, errors.New("checksum mismatch")
	}
	return payload, nil
}

// Next is Peek that waits for an entry until ctx is done.
func (s *Spool) Next(ctx context.Context) (Entry, error) {
	for {
		e, err := s.Peek()
		if !errors.Is(err, ErrEmpty) {
			return e, err
		}
		select {
		case <-ctx.Done():
			return Entry{}, ctx.Err()
		case <-s.wake:
		case <-s.done:
			return Entry{}, ErrClosed
		}
	}
}

// Ack removes the entry seq after its delivery. Acking an entry that is no
// longer queued (already acked) is a no-op.
func (s *Spool) Ack(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.leased == seq {
		s.leased = 0
	}
	for i, it := range s.items {
		if it.seq != seq {
			continue
		}
		if err := os.Remove(s.path(seq)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("spool: ack %d: %w", seq, err)
		}
		s.items = append(s.items[:i], s.items[i+1:]...)
		s.bytes -= it.size
		s.stats.Acked++
		return nil
	}
	return nil
}

// Len returns the number of queued entries.
func (s *Spool) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// Stats returns a snapshot of the counters.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Entries = len(s.items)
	st.Bytes = s.bytes
	return st
}

// Close releases the spool and its directory's lock. Queued entries stay on
// disk for the next Open.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.done)
	return s.lock.Close() // releases the flock
}
