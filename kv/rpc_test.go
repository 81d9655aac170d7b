package kv

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"
)

// Requests whose lengths disagree with their size are refused before
// anything is read through them; well-formed ones parse to their parts.
func TestParseRequest(t *testing.T) {
	var h [6]byte
	set := append(setHeader(&h, []byte("key"), []byte("value")), "keyvalue"...)
	hints := []byte{opHints, 0, 2}
	hints = binary.BigEndian.AppendUint64(hints, 1)
	hints = binary.BigEndian.AppendUint64(hints, 2)
	for _, b := range [][]byte{{opDescribe}, {opStats}, set, {opDelete, 3, 'k', 'e', 'y'}, hints} {
		r, err := parseRequest(b)
		if err != nil || r.op != b[0] {
			t.Fatalf("%x: %+v %v", b, r, err)
		}
	}
	if r, _ := parseRequest(set); string(r.key) != "key" || string(r.value) != "value" {
		t.Fatalf("SET parsed as %q %q", r.key, r.value)
	}
	bad := map[string][]byte{
		"describe with arguments":   {opDescribe, 0},
		"SET shorter than a header": {opSet, 3, 0, 0},
		"SET value beyond the body": append(setHeader(&h, []byte("key"), make([]byte, 6)), "keyvalue"...),
		"SET without a key":         {opSet, 0, 0, 0, 0, 1, 'v'},
		"SET of 4 GB":               {opSet, 1, 0xff, 0xff, 0xff, 0xff, 'k'},
		"DELETE key length":         {opDelete, 4, 'k', 'e', 'y'},
		"DELETE without a key":      {opDelete},
		"HINTS count":               {opHints, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1},
		"HINTS above MaxHints":      append([]byte{opHints, 0x04, 0x01}, make([]byte, 8*1025)...),
		"unknown op":                {9},
	}
	for name, b := range bad {
		if r, err := parseRequest(b); err == nil {
			t.Errorf("%s: parsed as %+v", name, r)
		}
	}
}

// A layout round-trips; one that cannot describe an index is refused.
func TestLayout(t *testing.T) {
	l := Layout{Instance: 7, Buckets: 1 << 10, Ways: 8, MaxValue: 64 << 10, IndexRegion: 0x10001, IndexBytes: 1 << 19,
		SlabRegion: 0x10002, SlabBytes: 1 << 20, Owner: netip.MustParseAddr("10.0.0.1"), KeyxPort: 4000}
	b := l.marshal(nil)
	if got, err := parseLayout(b); err != nil || got != l {
		t.Fatalf("%+v %v", got, err)
	}
	for name, edit := range map[string]func(*Layout){
		"buckets not a power of two": func(l *Layout) { l.Buckets = 1000 },
		"bucket above 4 KB":          func(l *Layout) { l.Ways = 65 },
		"index too small":            func(l *Layout) { l.IndexBytes = 1 << 18 },
		"values above 1 MB":          func(l *Layout) { l.MaxValue = MaxValueBytes + 1 },
		"owner not unicast":          func(l *Layout) { l.Owner = netip.MustParseAddr("0.0.0.0") },
	} {
		x := l
		edit(&x)
		if _, err := parseLayout(x.marshal(nil)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := parseLayout(bytes.Repeat([]byte{1}, layoutBytes-1)); err == nil {
		t.Error("a short layout accepted")
	}
}

// alive over a TCP connection: true while nothing is pending (and then it
// allocates nothing), false once bytes no request asked for arrive, and
// false after the peer's FIN.
func TestAlive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func() (*rpcConn, net.Conn) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); s.Close() })
		return newRPCConn(c), s
	}
	rc, s := dial()
	if !rc.alive() {
		t.Fatal("an idle connection is not alive")
	}
	if n := testing.AllocsPerRun(100, func() { rc.alive() }); n != 0 {
		t.Fatalf("alive: %v allocations", n)
	}
	s.Write([]byte{1})
	for deadline := time.Now().Add(5 * time.Second); rc.alive(); {
		if time.Now().After(deadline) {
			t.Fatal("alive with a byte no request asked for")
		}
		time.Sleep(time.Millisecond)
	}
	rc, s = dial()
	s.Close()
	for deadline := time.Now().Add(5 * time.Second); rc.alive(); {
		if time.Now().After(deadline) {
			t.Fatal("alive after the peer's FIN")
		}
		time.Sleep(time.Millisecond)
	}
}
