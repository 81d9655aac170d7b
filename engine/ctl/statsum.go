package ctl

import (
	"reflect"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// Sums over the cores of an engine, for the stats reply's engine-wide
// fields (control path: reflection keeps them in step with the structs).

// addStats adds src's counters and gauges to dst. The deepest inbound
// queue is the deepest of any core's; the latest fragmentation-needed
// report is the one of the core that counted the most (cores report on
// their own; none knows the others' order).
func addStats(dst, src *engine.Stats) {
	dstDst, dstMTU, dstN, qmax := dst.FragNeededDst, dst.FragNeededMTU, dst.ICMPFragNeeded, dst.ReqQueueMax
	addUints(reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem())
	dst.FragNeededDst, dst.FragNeededMTU, dst.ReqQueueMax = dstDst, dstMTU, max(qmax, src.ReqQueueMax)
	if src.ICMPFragNeeded > dstN {
		dst.FragNeededDst, dst.FragNeededMTU = src.FragNeededDst, src.FragNeededMTU
	}
}

// addUints adds every unsigned integer of src (in structs and arrays,
// recursively) to the same field of dst; other kinds are left alone.
func addUints(dst, src reflect.Value) {
	switch dst.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		dst.SetUint(dst.Uint() + src.Uint())
	case reflect.Array:
		for i := range dst.Len() {
			addUints(dst.Index(i), src.Index(i))
		}
	case reflect.Struct:
		for i := range dst.NumField() {
			addUints(dst.Field(i), src.Field(i))
		}
	}
}

// sumCores sums the cores' fault injectors and loops, and their ports'
// driver and device counters (each core's device counters are its queue
// pair's, core 0's also the device's own; core 0's name and AF_XDP state
// are the device's); nil where no core has one.
func sumCores(cores []ctlmsg.CoreStats) (*ctlmsg.FaultStats, *ctlmsg.PortStats, *ctlmsg.LoopStats) {
	var (
		fault *ctlmsg.FaultStats
		port  *ctlmsg.PortStats
		loop  *ctlmsg.LoopStats
	)
	for i := range cores {
		c := &cores[i]
		if c.Fault != nil {
			if fault == nil {
				fault = new(ctlmsg.FaultStats)
			}
			addUints(reflect.ValueOf(fault).Elem(), reflect.ValueOf(c.Fault).Elem())
		}
		if c.Loop != nil {
			if loop == nil {
				loop = new(ctlmsg.LoopStats)
			}
			most := max(loop.CrossingsMax, c.Loop.CrossingsMax)
			addUints(reflect.ValueOf(loop).Elem(), reflect.ValueOf(c.Loop).Elem())
			loop.CrossingsMax = most // a maximum, not a count
		}
		if c.Port != nil {
			if port == nil {
				p := *c.Port
				p.Driver, p.Dev = ctlmsg.PortDriverStats{}, ctlmsg.PortDevStats{}
				port = &p
			}
			addUints(reflect.ValueOf(&port.Driver).Elem(), reflect.ValueOf(&c.Port.Driver).Elem())
			addUints(reflect.ValueOf(&port.Dev).Elem(), reflect.ValueOf(&c.Port.Dev).Elem())
		}
	}
	return fault, port, loop
}
