package dpdk

/*
#include <stdlib.h>
#include "onerma_dpdk.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PortID is an ethdev port id.
type PortID uint16

// PortByName finds the port of a device by its name: for a vdev, the name
// given to --vdev, e.g. "net_ring0" for --vdev=net_ring0
// (rte_eth_dev_get_port_by_name).
func PortByName(name string) (PortID, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	r := C.onerma_eth_port_by_name(cname)
	if r < 0 {
		return 0, fmt.Errorf("port %q: %w", name, newError("rte_eth_dev_get_port_by_name", int(r)))
	}
	return PortID(r), nil
}

// NewRingPair creates two ethdev ports joined back to back by two
// rte_rings of size entries, a power of two (rte_eth_from_rings): frames sent on a are
// received on b and the other way round. Each has one queue pair and must
// still be set up (Setup) like any port. net_ring names the devices
// "net_ring_"+nameA and "net_ring_"+nameB (PortByName finds them by those
// names). Names must be unique and short (the rings are named after
// nameA). For tests and single-process
// topologies; the ports live until the process ends.
func NewRingPair(nameA, nameB string, size uint32, socket int) (a, b PortID, err error) {
	return NewRingPairQueues(nameA, nameB, size, 1, socket)
}

// NewRingPairQueues is NewRingPair with queues queue pairs (1..16) on each
// port: what a sends on its queue q, b receives on its queue q, and the
// other way round, as over memif. Set both up with Queues: queues.
func NewRingPairQueues(nameA, nameB string, size uint32, queues uint16, socket int) (a, b PortID, err error) {
	ca, cb := C.CString(nameA), C.CString(nameB)
	defer C.free(unsafe.Pointer(ca))
	defer C.free(unsafe.Pointer(cb))
	var pa, pb C.uint16_t
	if err := check("rte_eth_from_rings", C.onerma_ring_pair(ca, cb, C.uint(size), C.uint16_t(queues), C.int(socket), &pa, &pb)); err != nil {
		return 0, 0, fmt.Errorf("ring pair %q-%q (%d queues of %d entries): %w", nameA, nameB, queues, size, err)
	}
	return PortID(pa), PortID(pb), nil
}

// PortCount is the number of ports available to the application
// (rte_eth_dev_count_avail).
func PortCount() int { return int(C.onerma_eth_count_avail()) }

// Valid reports whether p names an attached port.
func (p PortID) Valid() bool { return C.onerma_eth_valid(C.uint16_t(p)) != 0 }

// Name is the device name of the port (rte_eth_dev_get_name_by_port).
func (p PortID) Name() (string, error) {
	var buf [C.ONERMA_ETH_NAME_MAX_LEN]C.char
	if err := check("rte_eth_dev_get_name_by_port", C.onerma_eth_port_name(C.uint16_t(p), &buf[0])); err != nil {
		return "", fmt.Errorf("port %d: %w", p, err)
	}
	return C.GoString(&buf[0]), nil
}

// Socket is the NUMA socket of the port, or SocketAny when unknown
// (virtual devices).
func (p PortID) Socket() int { return int(C.onerma_eth_socket(C.uint16_t(p))) }

// Configure sets the number of rx and tx queues of a stopped port and its
// maximum rx frame size as an MTU (0: the driver's default)
// (rte_eth_dev_configure; all offloads off).
func (p PortID) Configure(rxQueues, txQueues uint16, mtu uint32) error {
	_, err := p.configure(rxQueues, txQueues, mtu, false)
	return err
}

// configure is Configure, with RSS when rss is set, more than one rx
// queue is asked for and the driver hashes IP or UDP (then the hash
// functions in force are returned).
func (p PortID) configure(rxQueues, txQueues uint16, mtu uint32, rss bool) (uint64, error) {
	var on C.int
	if rss {
		on = 1
	}
	var hf C.uint64_t
	if err := check("rte_eth_dev_configure", C.onerma_eth_configure(C.uint16_t(p), C.uint16_t(rxQueues), C.uint16_t(txQueues), C.uint32_t(mtu), on, &hf)); err != nil {
		return 0, fmt.Errorf("port %d: configure %d rx, %d tx queues, mtu %d, rss %v: %w", p, rxQueues, txQueues, mtu, rss, err)
	}
	return uint64(hf), nil
}

// RxQueueSetup sets up rx queue q with desc descriptors, filled from pool
// (rte_eth_rx_queue_setup, default rxconf).
func (p PortID) RxQueueSetup(q, desc uint16, socket int, pool *Mempool) error {
	if err := check("rte_eth_rx_queue_setup", C.onerma_eth_rxq_setup(C.uint16_t(p), C.uint16_t(q), C.uint16_t(desc), C.int(socket), pool.p)); err != nil {
		return fmt.Errorf("port %d: rx queue %d (%d descriptors): %w", p, q, desc, err)
	}
	return nil
}

// TxQueueSetup sets up tx queue q with desc descriptors
// (rte_eth_tx_queue_setup, default txconf).
func (p PortID) TxQueueSetup(q, desc uint16, socket int) error {
	if err := check("rte_eth_tx_queue_setup", C.onerma_eth_txq_setup(C.uint16_t(p), C.uint16_t(q), C.uint16_t(desc), C.int(socket))); err != nil {
		return fmt.Errorf("port %d: tx queue %d (%d descriptors): %w", p, q, desc, err)
	}
	return nil
}

// Start starts a configured port (rte_eth_dev_start).
func (p PortID) Start() error {
	if err := check("rte_eth_dev_start", C.onerma_eth_start(C.uint16_t(p))); err != nil {
		return fmt.Errorf("port %d: start: %w", p, err)
	}
	return nil
}

// Stop stops a port (rte_eth_dev_stop). No queue of it may be polled
// concurrently.
func (p PortID) Stop() error {
	if err := check("rte_eth_dev_stop", C.onerma_eth_stop(C.uint16_t(p))); err != nil {
		return fmt.Errorf("port %d: stop: %w", p, err)
	}
	return nil
}

// Close releases a stopped port (rte_eth_dev_close); for vdevs the port id
// is gone afterwards.
func (p PortID) Close() error {
	if err := check("rte_eth_dev_close", C.onerma_eth_close(C.uint16_t(p))); err != nil {
		return fmt.Errorf("port %d: close: %w", p, err)
	}
	return nil
}

// MACAddr is the port's Ethernet address (rte_eth_macaddr_get).
func (p PortID) MACAddr() ([6]byte, error) {
	var mac [6]C.uint8_t
	if err := check("rte_eth_macaddr_get", C.onerma_eth_macaddr(C.uint16_t(p), &mac[0])); err != nil {
		return [6]byte{}, fmt.Errorf("port %d: mac address: %w", p, err)
	}
	var out [6]byte
	for i, b := range mac {
		out[i] = byte(b)
	}
	return out, nil
}

// Link is a port's link status.
type Link struct {
	SpeedMbps  uint32
	Up         bool
	FullDuplex bool
	Autoneg    bool
}

// Link reads the link status without waiting (rte_eth_link_get_nowait).
func (p PortID) Link() (Link, error) {
	var l C.struct_onerma_link
	if err := check("rte_eth_link_get_nowait", C.onerma_eth_link(C.uint16_t(p), &l)); err != nil {
		return Link{}, fmt.Errorf("port %d: link: %w", p, err)
	}
	return Link{SpeedMbps: uint32(l.speed_mbps), Up: l.up != 0, FullDuplex: l.full_duplex != 0, Autoneg: l.autoneg != 0}, nil
}

// SetMTU sets the port's MTU (rte_eth_dev_set_mtu). Drivers that cannot
// change it return an error wrapping unix.ENOTSUP.
func (p PortID) SetMTU(mtu uint16) error {
	if err := check("rte_eth_dev_set_mtu", C.onerma_eth_set_mtu(C.uint16_t(p), C.uint16_t(mtu))); err != nil {
		return fmt.Errorf("port %d: set mtu %d: %w", p, mtu, err)
	}
	return nil
}

// MTU is the port's MTU (rte_eth_dev_get_mtu).
func (p PortID) MTU() (uint16, error) {
	var mtu C.uint16_t
	if err := check("rte_eth_dev_get_mtu", C.onerma_eth_get_mtu(C.uint16_t(p), &mtu)); err != nil {
		return 0, fmt.Errorf("port %d: mtu: %w", p, err)
	}
	return uint16(mtu), nil
}

// SetPromiscuous turns promiscuous mode on or off
// (rte_eth_promiscuous_enable/disable).
func (p PortID) SetPromiscuous(on bool) error {
	en := C.int(0)
	if on {
		en = 1
	}
	if err := check("rte_eth_promiscuous_enable", C.onerma_eth_promiscuous(C.uint16_t(p), en)); err != nil {
		return fmt.Errorf("port %d: promiscuous %v: %w", p, on, err)
	}
	return nil
}

// EthStats are a port's basic counters (struct rte_eth_stats, without the
// per-queue arrays). Some drivers count wrongly (memif in 22.11): prefer
// the application's own counters.
type EthStats struct {
	RxPackets, TxPackets uint64
	RxBytes, TxBytes     uint64
	RxMissed             uint64
	RxErrors, TxErrors   uint64
	RxNoMbuf             uint64
}

// Stats reads the port's counters (rte_eth_stats_get).
func (p PortID) Stats() (EthStats, error) {
	var s C.struct_onerma_eth_stats
	if err := check("rte_eth_stats_get", C.onerma_eth_stats(C.uint16_t(p), &s)); err != nil {
		return EthStats{}, fmt.Errorf("port %d: stats: %w", p, err)
	}
	return EthStats{
		RxPackets: uint64(s.ipackets), TxPackets: uint64(s.opackets),
		RxBytes: uint64(s.ibytes), TxBytes: uint64(s.obytes),
		RxMissed: uint64(s.imissed),
		RxErrors: uint64(s.ierrors), TxErrors: uint64(s.oerrors),
		RxNoMbuf: uint64(s.rx_nombuf),
	}, nil
}

// QueueStats are one queue's counters (the q_* arrays of struct
// rte_eth_stats), as far as the driver fills them.
type QueueStats struct {
	RxPackets, TxPackets uint64
	RxBytes, TxBytes     uint64
	RxErrors             uint64
}

// QueueStats reads queue q's counters (rte_eth_stats_get); queues past
// RTE_ETHDEV_QUEUE_STAT_CNTRS (16) have none (EINVAL).
func (p PortID) QueueStats(q uint16) (QueueStats, error) {
	var s C.struct_onerma_eth_stats
	if err := check("rte_eth_stats_get", C.onerma_eth_queue_stats(C.uint16_t(p), C.uint16_t(q), &s)); err != nil {
		return QueueStats{}, fmt.Errorf("port %d: queue %d stats: %w", p, q, err)
	}
	return QueueStats{
		RxPackets: uint64(s.ipackets), TxPackets: uint64(s.opackets),
		RxBytes: uint64(s.ibytes), TxBytes: uint64(s.obytes), RxErrors: uint64(s.ierrors),
	}, nil
}

// DevInfo is the part of struct rte_eth_dev_info the engine uses.
type DevInfo struct {
	Driver                   string
	MinMTU, MaxMTU           uint32
	MaxRxPktLen              uint32
	MaxRxQueues, MaxTxQueues uint16
	// RSSOffloads are the hash functions the device can spread flows
	// over its rx queues by (flow_type_rss_offloads, RTE_ETH_RSS_*); 0:
	// no RSS (virtual devices but net_tap).
	RSSOffloads uint64
}

// Info reads the device's capabilities (rte_eth_dev_info_get).
func (p PortID) Info() (DevInfo, error) {
	var di C.struct_onerma_dev_info
	if err := check("rte_eth_dev_info_get", C.onerma_eth_info(C.uint16_t(p), &di)); err != nil {
		return DevInfo{}, fmt.Errorf("port %d: info: %w", p, err)
	}
	return DevInfo{
		Driver: C.GoString(&di.driver[0]),
		MinMTU: uint32(di.min_mtu), MaxMTU: uint32(di.max_mtu),
		MaxRxPktLen: uint32(di.max_rx_pktlen),
		MaxRxQueues: uint16(di.max_rx_queues), MaxTxQueues: uint16(di.max_tx_queues),
		RSSOffloads: uint64(di.rss_offloads),
	}, nil
}

// PortConfig is the usual set-up of a port: Queues rx/tx queue pairs (one
// per polling core), each rx queue filled from Pool.
type PortConfig struct {
	Queues uint16 // rx and tx queues (>= 1)
	// RSS spreads received flows over the rx queues by a hash of their
	// IP addresses and UDP ports, where the driver can (DevInfo.
	// RSSOffloads; RSSHashes reports those in force). No virtual
	// device here hashes in DPDK (memif queue i receives what the peer
	// sent on its queue i; net_tap, af_packet and AF_XDP queues get what
	// the kernel hashed to them).
	RSS    bool
	RxDesc uint16   // rx descriptors per queue (0: 1024)
	TxDesc uint16   // tx descriptors per queue (0: 1024)
	MTU    uint32   // 0: the driver's default
	Pool   *Mempool // rx buffers
	// Promiscuous: accept frames for any destination MAC (drivers that do
	// not support it are tolerated).
	Promiscuous bool
}

// Setup configures the queues of a stopped port and starts it: Configure,
// RxQueueSetup and TxQueueSetup for each queue, SetPromiscuous, Start.
func (p PortID) Setup(cfg PortConfig) error {
	if cfg.Queues == 0 || cfg.Pool == nil {
		return fmt.Errorf("port %d: setup: need >= 1 queue and a pool", p)
	}
	rxd, txd := cfg.RxDesc, cfg.TxDesc
	if rxd == 0 {
		rxd = 1024
	}
	if txd == 0 {
		txd = 1024
	}
	if _, err := p.configure(cfg.Queues, cfg.Queues, cfg.MTU, cfg.RSS); err != nil {
		return err
	}
	sock := p.Socket()
	for q := uint16(0); q < cfg.Queues; q++ {
		if err := p.RxQueueSetup(q, rxd, sock, cfg.Pool); err != nil {
			return err
		}
		if err := p.TxQueueSetup(q, txd, sock); err != nil {
			return err
		}
	}
	if err := p.Start(); err != nil {
		return err
	}
	if cfg.Promiscuous {
		// Best effort: virtual devices often accept everything anyway.
		_ = p.SetPromiscuous(true)
	}
	return nil
}

// RSSHashes are the hash functions the port spreads received flows over
// its rx queues by (RTE_ETH_RSS_*, rte_eth_dev_rss_hash_conf_get): 0 when
// it does not, or cannot (ENOTSUP).
func (p PortID) RSSHashes() (uint64, error) {
	var hf C.uint64_t
	if err := check("rte_eth_dev_rss_hash_conf_get", C.onerma_eth_rss_hashes(C.uint16_t(p), &hf)); err != nil {
		if errors.Is(err, unix.ENOTSUP) {
			return 0, nil
		}
		return 0, fmt.Errorf("port %d: rss hash functions: %w", p, err)
	}
	return uint64(hf), nil
}
