package dpdkport

import (
	"fmt"
	"sync/atomic"

	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port"
)

// Queues are the queue ports of one started device for an engine of
// several cores (engine.NewGroup): Ports[i] is queue pair i, core i's.
//
// Every frame names the core that must process it (engine.Steer), but the
// devices here cannot deliver it there: memif's queue i receives what the
// peer sent on its queue i, and net_tap, af_packet and AF_XDP queues get
// what the kernel hashed to them. So each core, in its Recv, steers the
// frames its queue received and hands those of other cores over to them:
//
//	core i's Recv (one poll step)
//	  PortIO.Do ── the last Recv's Fanout: every ring i→j (a full ring's
//	  │            share is freed and counted, HandOverFull); tx burst,
//	  │            free the last rx burst, rx burst from queue i, and up
//	  │            to a burst from the rings j→i (handed in): one crossing
//	  port.Steering (engine.Steer) each frame from queue i:
//	      core i, or SteerLocal        → kept
//	      core j                       → Fanout, for ring i→j (handed out)
//	      SteerAll (ARP)               → kept, and for every ring i→j, with
//	                                     a reference per ring (zero copy)
//
// The rings are rte_rings of mbuf pointers, one per ordered pair of cores,
// single-producer and single-consumer: N(N-1) rings, each written by one
// core and read by one. An MP/SC ring per destination would be N rings,
// but its producers serialise on a compare-and-swap and each waits for
// those before it to publish: a producer preempted in between (the
// polling threads share CPUs with the control plane and the kernel unless
// isolated) would hold up every other core's hand-over to that
// destination. With a ring per pair no core ever waits for another, and
// the consumer's cost per receive is one read of each ring's producer
// index, in the crossing the receive makes anyway.
//
// Nothing blocks, nothing is allocated per frame, and handing frames out
// costs no crossing: they leave in the handing core's next crossing (its
// next Recv, or the Flush its loop makes before it sleeps, yields or runs
// closures), after the rest of its iteration. A frame handed over is
// processed by its core in that core's next receive after that
// (microseconds in busy mode; up to poll.max_sleep when its loop sleeps
// in backoff, as for a frame on its own queue).
type Queues struct {
	Ports []*Port
	rings []*dpdk.Ring // rings[i*n+j]: core i to core j (nil when i == j)
}

// queuesSeq numbers the Queues of a process: ring names are global.
var queuesSeq atomic.Uint32

// NewQueues binds Ports to queues 0..cores-1 of the started device called
// name (set up with dpdk.PortConfig Queues: cores), taking tx mbufs from
// pool, for an engine of cores cores whose base UDP port is udpPort
// (engine.Config.UDPPort). With one core it is New's Port alone, and
// nothing is handed over.
func NewQueues(name string, pool *dpdk.Mempool, cores int, udpPort uint16, cfg Config) (*Queues, error) {
	if cores < 1 || cores > 1<<10 {
		return nil, fmt.Errorf("%w: %d cores", ErrConfig, cores)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	q := &Queues{}
	for i := range cores {
		p, err := New(name, pool, uint16(i), cfg)
		if err != nil {
			q.Close()
			return nil, fmt.Errorf("queue %d: %w", i, err)
		}
		q.Ports = append(q.Ports, p)
	}
	if cores == 1 {
		return q, nil
	}
	seq := queuesSeq.Add(1)
	q.rings = make([]*dpdk.Ring, cores*cores)
	for i := range cores {
		for j := range cores {
			if i == j {
				continue
			}
			r, err := dpdk.NewRing(fmt.Sprintf("oho%d_%d_%d", seq, i, j), uint32(cfg.HandOverRing), q.Ports[0].id.Socket(),
				dpdk.SingleProducer|dpdk.SingleConsumer)
			if err != nil {
				q.Close()
				return nil, fmt.Errorf("hand-over ring %d→%d: %w", i, j, err)
			}
			q.rings[i*cores+j] = r
		}
	}
	for i, p := range q.Ports {
		fan, err := dpdk.NewFanout(q.rings[i*cores:(i+1)*cores], cfg.Burst)
		if err != nil {
			q.Close()
			return nil, fmt.Errorf("queue %d: %w", i, err)
		}
		h := &handover{fan: fan}
		h.steer = port.NewSteering(i, cores, udpPort, h)
		p.ho = h
		in := make([]*dpdk.Ring, cores)
		for j := range cores {
			in[j] = q.rings[j*cores+i]
		}
		if err := p.io.SetInbound(in, cfg.Burst); err != nil {
			q.Close()
			return nil, fmt.Errorf("queue %d: %w", i, err)
		}
		p.io.SetOutbound(fan) // handed out in the next poll step's crossing
	}
	return q, nil
}

// Close closes every Port (Port.Close) and frees the rings with the frames
// still in them. After every core's runner has stopped.
func (q *Queues) Close() {
	for _, p := range q.Ports {
		p.Close()
	}
	for _, r := range q.rings {
		if r != nil {
			r.Free()
		}
	}
	q.rings = nil
}

// Txs are the Ports as the engine's transmit sides, in core order
// (engine.NewGroup's argument).
func (q *Queues) Txs() []engine.Tx {
	txs := make([]engine.Tx, len(q.Ports))
	for i, p := range q.Ports {
		txs[i] = p
	}
	return txs
}

// handover is a Port's part in its Queues: its Steering, and the Fanout
// to the other cores' rings through which it hands frames over (the rings
// from them are its PortIO's inbound).
type handover struct {
	steer port.Steering[*dpdk.Mbuf, *handover]
	fan   *dpdk.Fanout
}

// Hand queues m for core's ring (port.Handover).
func (h *handover) Hand(core int, m *dpdk.Mbuf) { h.fan.Add(core, m) }

// HandOthers queues m for every other core's ring, a reference each
// (port.Handover).
func (h *handover) HandOthers(m *dpdk.Mbuf) { h.fan.AddAll(m) }

// steer keeps the frames of rx (the last Do's burst: the port's first,
// then those handed in) this core processes, in rx's first entries, and
// queues the others on the Fanout, which the next crossing (the next
// Recv's, or a Flush's) sends first; it returns the views of the kept
// frames. Multi-segment frames are kept and not viewed (dropped,
// counted).
func (p *Port) steer(rx []*dpdk.Mbuf) [][]byte {
	h := p.ho
	views := p.views[:0] // cap 2*Burst >= len(rx)
	fromPort := p.io.RxPort()
	k := 0
	for _, m := range rx[:fromPort] {
		if m.Segs() != 1 {
			p.multiSeg++
			rx[k] = m
			k++
			continue
		}
		f := m.Data()
		if !h.steer.Deliver(f, m) {
			continue
		}
		rx[k] = m
		k++
		views = append(views, f)
	}
	for _, m := range rx[fromPort:] { // single-segment: steered here by their sender
		rx[k] = m
		k++
		views = append(views, m.Data())
	}
	p.io.TrimRx(k)
	return views
}
