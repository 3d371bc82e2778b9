// Package users resolves uids to user names, from a passwd-format file or
// from the system's user database (NSS, so LDAP/SSSD clusters work).
package users

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
)

// Lookup maps a uid to a user name.
type Lookup interface {
	Name(uid int) (string, bool)
}

// Passwd is a passwd(5) file loaded into memory. It exists for fixtures and
// for nodes whose NSS the agent should not call.
type Passwd map[int]string

// LoadPasswd reads a passwd-format file. Malformed lines are skipped and
// counted, so one bad line does not blind the agent to every user.
func LoadPasswd(path string) (Passwd, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	return ParsePasswd(io.LimitReader(f, 256<<20))
}

// ParsePasswd parses passwd(5) lines: name:password:uid:gid:gecos:home:shell.
func ParsePasswd(r io.Reader) (Passwd, int, error) {
	p := Passwd{}
	bad := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 4 || f[0] == "" {
			bad++
			continue
		}
		uid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			bad++
			continue
		}
		if _, dup := p[int(uid)]; !dup { // first entry wins, as getpwuid does
			p[int(uid)] = f[0]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, bad, fmt.Errorf("reading passwd: %w", err)
	}
	return p, bad, nil
}

// Name implements Lookup.
func (p Passwd) Name(uid int) (string, bool) { n, ok := p[uid]; return n, ok }

// System looks users up through the C library (NSS) and caches the answers,
// including misses, since a lookup can reach a directory server.
type System struct {
	mu    sync.Mutex
	cache map[int]string
}

// Name implements Lookup.
func (s *System) Name(uid int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.cache[uid]; ok {
		return n, n != ""
	}
	if s.cache == nil {
		s.cache = map[int]string{}
	}
	var name string
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		name = u.Username
	}
	s.cache[uid] = name
	return name, name != ""
}

// NameOrID returns the user name, or the decimal uid when the uid has no
// name (as ls does), so a job is never left without an owner.
func NameOrID(l Lookup, uid int) string {
	if uid < 0 {
		return ""
	}
	if n, ok := l.Name(uid); ok {
		return n
	}
	return strconv.Itoa(uid)
}
