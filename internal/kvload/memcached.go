package kvload

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// clientTimeout bounds every peer client's socket reads and writes: long
// enough that a saturated server is measured slow, not failed.
const clientTimeout = 10 * time.Second

// Memcached is a Store of a memcached server through gomemcache, the Go
// client most users run, over one TCP connection of its own (a Client
// keeps one idle connection per server and one goroutine uses one at a
// time).
type Memcached struct {
	c    *memcache.Client
	addr string
	raw  net.Conn // SetMany's pipelined connection, dialed on first use
	rw   *bufio.ReadWriter
}

var _ Loader = (*Memcached)(nil)

// DialMemcached returns a Dialer of memcached at addr (host:port).
func DialMemcached(addr string) Dialer {
	return func() (Store, error) {
		c := memcache.New(addr)
		c.Timeout = clientTimeout
		c.MaxIdleConns = 1
		if err := c.Ping(); err != nil {
			return nil, fmt.Errorf("memcached %s: %w", addr, err)
		}
		return &Memcached{c: c, addr: addr}, nil
	}
}

// Get implements Store.
func (m *Memcached) Get(key, dst []byte) ([]byte, error) {
	it, err := m.c.Get(string(key))
	if errors.Is(err, memcache.ErrCacheMiss) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return append(dst[:0], it.Value...), nil
}

// Set implements Store.
func (m *Memcached) Set(key, value []byte) error {
	return m.c.Set(&memcache.Item{Key: string(key), Value: value})
}

// SetMany implements Loader: every SET with noreply in one write, then a
// meta no-op ("mn", memcached 1.6) whose answer ("MN") comes after every
// SET before it has been applied.
func (m *Memcached) SetMany(keys, values [][]byte) error {
	if m.raw == nil {
		c, err := net.DialTimeout("tcp", m.addr, clientTimeout)
		if err != nil {
			return err
		}
		m.raw, m.rw = c, bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriterSize(c, 64<<10))
	}
	m.raw.SetDeadline(time.Now().Add(clientTimeout))
	w := m.rw.Writer
	for i, k := range keys {
		w.WriteString("set ")
		w.Write(k)
		w.WriteString(" 0 0 ")
		w.WriteString(strconv.Itoa(len(values[i])))
		w.WriteString(" noreply\r\n")
		w.Write(values[i])
		w.WriteString("\r\n")
	}
	w.WriteString("mn\r\n")
	if err := w.Flush(); err != nil {
		return err
	}
	line, err := m.rw.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "MN\r\n" {
		return fmt.Errorf("memcached %s: pipelined SETs answered %q", m.addr, line)
	}
	return nil
}

// Close implements Store.
func (m *Memcached) Close() error {
	if m.raw != nil {
		m.raw.Close()
	}
	return m.c.Close()
}
