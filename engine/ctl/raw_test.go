package ctl_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
)

// A raw client speaks the control protocol itself, as a misbehaving
// application would, where the portal library would not let a test.

// rawSendFD is rawSend returning the file descriptor that came with the
// response (-1: none); the caller closes it.
func rawSendFD(t *testing.T, c *net.UnixConn, req string) (ctlmsg.Response, int, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, ctlmsg.MaxResponseBytes), make([]byte, 64)
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for i := range msgs {
			fds, _ := unix.ParseUnixRights(&msgs[i])
			for _, f := range fds {
				if fd < 0 {
					fd = f
				} else {
					unix.Close(f)
				}
			}
		}
	}
	resp, err := ctlmsg.DecodeResponse(buf[:n])
	if err != nil {
		t.Fatalf("undecodable response %q: %v", buf[:n], err)
	}
	if resp.Error != "" {
		return resp, fd, fmt.Errorf("%s: %s", resp.Code, resp.Error)
	}
	return resp, fd, nil
}

// rawMap maps fd (size bytes) writable, faulting it in, and closes fd.
func rawMap(t *testing.T, fd int, size uint64) []byte {
	t.Helper()
	m, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

// rawDial opens a raw connection to sock.
func rawDial(t *testing.T, sock string) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawOpen opens and attaches a portal named name on c, as the portal
// library does, and returns its segment and layout.
func rawOpen(t *testing.T, c *net.UnixConn, name string) ([]byte, abi.Layout, ctlmsg.Response) {
	t.Helper()
	resp, fd, err := rawSendFD(t, c, `{"v":1,"op":"open","name":"`+name+`"}`)
	if err != nil || resp.Open == nil || fd < 0 {
		t.Fatalf("open: %+v %v", resp, err)
	}
	seg := rawMap(t, fd, resp.Open.MapSize)
	if _, _, err := rawSendFD(t, c, `{"v":1,"op":"attach"}`); err != nil {
		t.Fatalf("attach: %v", err)
	}
	l, err := abi.DecodeLayout(seg)
	if err != nil {
		t.Fatal(err)
	}
	return seg, l, resp
}

// rawCreate sends create_region and maps what comes back (unless the
// engine refused), returning the memory handle and mapping.
func rawCreate(t *testing.T, c *net.UnixConn, size uint64) (uint32, []byte, error) {
	t.Helper()
	resp, fd, err := rawSendFD(t, c, fmt.Sprintf(`{"v":1,"op":"create_region","size":%d}`, size))
	if err != nil {
		return 0, nil, err
	}
	if resp.Memory == nil || fd < 0 {
		t.Fatalf("create_region: %+v", resp)
	}
	return resp.Memory.Memory, rawMap(t, fd, resp.Memory.MapSize), nil
}

// rawRegister registers memory handle mem under keyHex.
func rawRegister(t *testing.T, c *net.UnixConn, mem uint32, perm abi.Perm) (*ctlmsg.RegionReply, error) {
	t.Helper()
	resp, fd, err := rawSendFD(t, c, fmt.Sprintf(`{"v":1,"op":"register_region","memory":%d,"perm":%d,"key":"%s"}`, mem, perm, keyHex))
	if fd >= 0 {
		unix.Close(fd)
		t.Error("register_region answered with a file descriptor")
	}
	return resp.Region, err
}

// rawRegion creates, maps and registers a region.
func rawRegion(t *testing.T, c *net.UnixConn, size uint64, perm abi.Perm) (*ctlmsg.RegionReply, []byte) {
	t.Helper()
	mem, m, err := rawCreate(t, c, size)
	if err != nil {
		t.Fatalf("create_region %d: %v", size, err)
	}
	r, err := rawRegister(t, c, mem, perm)
	if err != nil {
		t.Fatalf("register_region: %v", err)
	}
	return r, m
}
