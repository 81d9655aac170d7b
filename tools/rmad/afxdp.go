package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/engine/port/dpdkport/xdp"
	"github.com/onerma/onerma/wire"
)

// xdpHeadroom is XDP_PACKET_HEADROOM: the kernel writes a received frame
// this far past the buffer's start, which net_af_xdp (DPDK 22.11) sets
// after the mbuf's headroom.
const xdpHeadroom = 256

// afxdp is rmad's part in an AF_XDP port (port.vdev net_af_xdp...): the
// steering program DPDK attaches to the interface in place of its
// default, which would take every frame of the queue from the kernel,
// and the mbuf pool's shape.
type afxdp struct {
	vdev    xdp.Vdev
	objPath string      // the program's object, written for xdp_prog ("": the operator named a program)
	filter  *xdp.Filter // the steering program once attached (nil: the operator's program)
	fds     []int       // the port's AF_XDP sockets
}

// newAFXDP prepares an AF_XDP port before the EAL starts and returns the
// --vdev argument that creates it: the configured one plus xdp_prog, the
// steering program's object written to a temporary file, unless the
// operator named a program. A steering program a killed engine left on
// the interface is removed (DPDK attaches its own only to an interface
// without one).
func newAFXDP(vdev string, cores int, log zerolog.Logger) (*afxdp, string, error) {
	v, err := parseAFXDPVdev(vdev, cores)
	if err != nil {
		return nil, "", err
	}
	a := &afxdp{vdev: v}
	if v.Prog != "" {
		log.Warn().Str("xdp_prog", v.Prog).Str("iface", v.Iface).
			Msg("AF_XDP port with the operator's XDP program: it alone decides which frames reach the engine and which the kernel; rmad neither configures nor counts it")
		return a, vdev, nil
	}
	if id, err := xdp.RemoveStale(v.Iface); err != nil {
		return nil, "", err
	} else if id != 0 {
		log.Warn().Str("iface", v.Iface).Uint32("prog_id", uint32(id)).
			Msg("removed the steering program an engine that is gone left attached")
	}
	if a.objPath, err = xdp.WriteObject(""); err != nil {
		return nil, "", err
	}
	arg, err := v.WithProg(a.objPath)
	if err != nil {
		a.removeObject()
		return nil, "", err
	}
	return a, arg, nil
}

// parseAFXDPVdev parses and checks an AF_XDP port's port.vdev for an
// engine of cores polling cores: a socket per core (queue_count).
func parseAFXDPVdev(vdev string, cores int) (xdp.Vdev, error) {
	v, err := xdp.ParseVdev(vdev)
	if err != nil {
		return v, fmt.Errorf("%w: port.vdev: %v", errConfig, err)
	}
	if v.QueueCount != cores {
		return v, fmt.Errorf("%w: port.vdev %q: queue_count %d, but the engine has %d polling cores, a queue each (give the interface that many queues from start_queue, and queue_count=%d)", errConfig, vdev, v.QueueCount, cores, cores)
	}
	return v, nil
}

// afxdpDataRoom is the mbuf data room of an AF_XDP port's mbufs
// (newPool): a page less the mempool's object header and the struct
// rte_mbuf (64 and 128 bytes in DPDK 22.11).
func afxdpDataRoom() int { return os.Getpagesize() - 64 - 128 }

// afxdpMaxMTU is the largest engine.mtu of an AF_XDP port: the kernel
// writes a received frame xdpHeadroom past the mbuf's headroom.
func afxdpMaxMTU() int { return afxdpDataRoom() - dpdk.Headroom - xdpHeadroom - wire.EthLen }

// newPool makes the port's mbuf pool, of one page per mbuf. net_af_xdp
// (DPDK 22.11) registers the pool's memory with the kernel as an AF_XDP
// umem in unaligned-chunk mode, one chunk per mbuf, assuming the mbufs
// lie back to back from the first one (rte_eth_af_xdp.c:
// xdp_umem_configure). A pool whose mbufs each stay within a page without
// filling it (rte_pktmbuf_pool_create's) leaves a gap at each page's end,
// the kernel refuses the mbufs beyond the umem's end, and they never come
// back: half of them in 4 KB pages. And a zero-copy driver refuses chunks
// that cross a page its DMA mapping does not continue. Page-sized,
// page-aligned mbufs have neither problem.
func (a *afxdp) newPool(name string, n, cache uint32, frameBytes int) (*dpdk.Mempool, error) {
	pool, err := dpdk.NewPagedPktmbufPool(name, n, cache, dpdk.SocketAny)
	if err != nil {
		return nil, err
	}
	if k := pool.OutsideArray(); k != 0 {
		pool.Free()
		return nil, fmt.Errorf("mempool %q: %d of %d mbufs outside the AF_XDP umem net_af_xdp would register", name, k, n)
	}
	if room := pool.DataRoom(); dpdk.Headroom+xdpHeadroom+frameBytes > room {
		pool.Free()
		return nil, fmt.Errorf("%w: frames of %d bytes do not fit an AF_XDP port's mbufs of one page (%d-byte data room, %d-byte headroom, %d bytes the kernel keeps before a frame): lower engine.mtu",
			errConfig, frameBytes, room, dpdk.Headroom, xdpHeadroom)
	}
	return pool, nil
}

// started finishes the port's set-up once it has started (DPDK has
// attached the program and put the sockets in its map): the program's
// object file goes, the engine's address goes into the program's
// configuration (until then it passes every frame to the kernel), and
// the mode of the sockets is logged.
func (a *afxdp) started(ip netip.Addr, log zerolog.Logger) error {
	a.removeObject()
	socks, err := xdp.Sockets()
	if err != nil {
		return err
	}
	if len(socks) != a.vdev.QueueCount {
		return fmt.Errorf("AF_XDP port on %s: %d AF_XDP sockets in the process, want %d", a.vdev.Iface, len(socks), a.vdev.QueueCount)
	}
	zc := true
	for _, s := range socks {
		a.fds = append(a.fds, s.FD)
		zc = zc && s.ZeroCopy
	}
	ev := log.Info().Str("iface", a.vdev.Iface).Int("start_queue", a.vdev.StartQueue).Int("queues", a.vdev.QueueCount).Bool("zero_copy", zc)
	if !zc {
		ev = ev.Str("copy_mode", "the kernel copies each frame between the driver and the socket (drivers without AF_XDP zero-copy, veth among them)")
	}
	if a.vdev.Prog != "" {
		ev.Str("xdp_prog", a.vdev.Prog).Msg("AF_XDP port ready")
		return nil
	}
	if a.filter, err = xdp.Find(a.vdev.Iface); err != nil {
		return err
	}
	if err := a.filter.SetAddr(ip); err != nil {
		return err
	}
	ev.Uint32("prog_id", uint32(a.filter.ID())).Str("xdp_mode", a.filter.Mode).Stringer("steered_ip", ip).
		Msg("AF_XDP port ready: frames for the engine's address go to the engine, the rest to the kernel")
	return nil
}

// stats are the port's XDP counters for the control socket.
func (a *afxdp) stats() *ctlmsg.PortXDPStats {
	m := &ctlmsg.PortXDPStats{Iface: a.vdev.Iface, Sockets: len(a.fds), ZeroCopy: len(a.fds) > 0}
	var errs []error
	var steer xdp.Stats
	if a.filter != nil {
		m.ProgID, m.Mode = uint32(a.filter.ID()), a.filter.Mode
		var err error
		if steer, err = a.filter.Stats(); err != nil {
			errs = append(errs, err)
		}
	}
	var socks []xdp.Socket
	for _, fd := range a.fds {
		s, err := xdp.ReadSocket(fd)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		socks = append(socks, s)
	}
	xdpStatsMsg(m, steer, socks)
	if err := errors.Join(errs...); err != nil {
		m.Err = err.Error()
	}
	return m
}

// xdpStatsMsg fills m's counters from the steering program's and the
// sockets' (summed). TestXDPStatsMsgCoversEveryField keeps it in step
// with xdp.Stats and unix.XDPStatistics.
func xdpStatsMsg(m *ctlmsg.PortXDPStats, steer xdp.Stats, socks []xdp.Socket) {
	m.Steer = ctlmsg.XDPSteerStats{ToEngine: steer.ToEngine, NoSocket: steer.NoSocket, ToKernel: steer.ToKernel}
	m.Socket = ctlmsg.XDPSocketStats{}
	for _, s := range socks {
		m.ZeroCopy = m.ZeroCopy && s.ZeroCopy
		st := &s.Stats
		m.Socket.RxDropped += st.Rx_dropped
		m.Socket.RxInvalidDescs += st.Rx_invalid_descs
		m.Socket.TxInvalidDescs += st.Tx_invalid_descs
		m.Socket.RxRingFull += st.Rx_ring_full
		m.Socket.RxFillRingEmptyDescs += st.Rx_fill_ring_empty_descs
		m.Socket.TxRingEmptyDescs += st.Tx_ring_empty_descs
	}
}

// close logs the final counters and releases the program (DPDK detaches
// it when it closes the port).
func (a *afxdp) close(log zerolog.Logger) error {
	a.removeObject()
	m := a.stats()
	log.Info().Str("iface", m.Iface).Interface("steer", m.Steer).Interface("socket", m.Socket).Str("error", m.Err).
		Msg("final AF_XDP counters")
	if a.filter == nil {
		return nil
	}
	return a.filter.Close()
}

func (a *afxdp) removeObject() {
	if a.objPath != "" {
		os.Remove(a.objPath)
		a.objPath = ""
	}
}
