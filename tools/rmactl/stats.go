package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/onerma/onerma/ctlmsg"
)

func stats(sock string, asJSON bool) error {
	resp, err := call(sock, ctlmsg.OpStats)
	if err != nil {
		return err
	}
	if resp.Stats == nil {
		return errors.New("engine sent no counters")
	}
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(resp.Stats)
	}
	printStats(os.Stdout, resp.Stats)
	return nil
}

// printStats writes st as text: one counter a line, named as in the JSON
// (then completions by status and op, the port's, the loop's and the fault
// injector's); on an engine of several cores a column per core follows
// the sum. Then the open portals and the tenants.
func printStats(w io.Writer, st *ctlmsg.Stats) {
	sum := lines(st)
	if len(st.Cores) == 0 {
		for _, l := range sum {
			fmt.Fprintf(w, "%-*s %s\n", l.width, l.name, l.value)
		}
	} else {
		cols := make([]map[string]string, len(st.Cores))
		fmt.Fprintf(w, "%-36s %14s", "counter", "sum")
		for i := range st.Cores {
			c := &st.Cores[i]
			cols[i] = map[string]string{}
			for _, l := range lines(&c.Stats) {
				cols[i][l.name] = l.value
			}
			fmt.Fprintf(w, " %14s", "core"+strconv.Itoa(c.Core))
		}
		fmt.Fprintln(w)
		for _, l := range sum {
			fmt.Fprintf(w, "%-36s %14s", l.name, l.value)
			for _, c := range cols {
				fmt.Fprintf(w, " %14s", c[l.name])
			}
			fmt.Fprintln(w)
		}
	}
	if n := st.NackThreshold; n != nil {
		how := "derived: " + n.Formula
		if n.Source != "derived" {
			how = fmt.Sprintf("%s; derived would be %d: %s", n.Source, n.Derived, n.Formula)
		}
		fmt.Fprintf(w, "\nnack_threshold %d (%s)\n  %s\n", n.Threshold, how, n.Inputs)
	}
	if st.TenantOnly {
		fmt.Fprintln(w, "\nthe portals and usage of this tenant only (an operator, uid 0 or ctl.operator_gid, sees every tenant's)")
	}
	fmt.Fprintf(w, "\n%-4s %-4s %-16s %10s %6s %-5s %9s %9s %13s %13s %7s %12s  %s\n", "core", "id", "portal", "pid", "uid", "class", "slots", "in_flight", "cmd_depth", "cpl_depth", "regions", "region_bytes", "tenant")
	for _, p := range st.Portals {
		name := p.Name
		if p.Closed {
			name += " (closed: corrupt rings)"
		}
		fmt.Fprintf(w, "%-4d %-4d %-16s %10d %6d %-5s %4d/%-4d %9d %6d/%-6d %6d/%-6d %7d %12d  %s\n", p.Core, p.ID, name, p.PID, p.UID, p.Class,
			p.Slots, p.MaxSlots, p.InFlight, p.CmdDepth, p.CmdCap, p.CplDepth, p.CplCap, p.Regions, p.RegionBytes, p.Tenant)
	}
	if len(st.Tenants) > 0 {
		// Each pool: held/guarantee/quota; memory in MiB.
		fmt.Fprintf(w, "\n%-24s %-11s %-11s %-14s %-14s %-20s %-20s  %s\n", "tenant (held/guarantee/quota)", "conns", "portals", "slots", "regions", "memory_mib", "hugepage_mib", "socket")
		for _, t := range st.Tenants {
			u, g, q := &t.TenantUsage, &t.Guarantee, &t.Quota
			cell := func(held, min, max uint64) string { return fmt.Sprintf("%d/%d/%d", held, min, max) }
			fmt.Fprintf(w, "%-29s %-11s %-11s %-14s %-14s %-20s %-20s  %s\n", t.Name,
				cell(uint64(u.Conns), uint64(g.Conns), uint64(q.Conns)),
				cell(uint64(u.Portals), uint64(g.Portals), uint64(q.Portals)),
				cell(uint64(u.Slots), uint64(g.Slots), uint64(q.Slots)),
				cell(uint64(u.Regions), uint64(g.Regions), uint64(q.Regions)),
				cell(u.MemoryBytes>>20, g.MemoryBytes>>20, q.MemoryBytes>>20),
				cell(u.HugepageBytes>>20, g.HugepageBytes>>20, q.HugepageBytes>>20), t.Socket)
		}
		printDatapath(w, st.Tenants)
	}
}

// printDatapath writes the tenants' data-path counters (those of an
// active tenant), a column per counter named as in the JSON.
func printDatapath(w io.Writer, ts []ctlmsg.TenantStats) {
	t := reflect.TypeOf(ctlmsg.TenantDatapath{})
	head := false
	for _, ten := range ts {
		if ten.Datapath == nil {
			continue
		}
		if !head {
			fmt.Fprintf(w, "\n%-29s", "tenant (data path)")
			for i := range t.NumField() {
				fmt.Fprintf(w, " %*s", colWidth(t.Field(i)), strings.Split(t.Field(i).Tag.Get("json"), ",")[0])
			}
			fmt.Fprintln(w)
			head = true
		}
		fmt.Fprintf(w, "%-29s", ten.Name)
		v := reflect.ValueOf(*ten.Datapath)
		for i := range t.NumField() {
			fmt.Fprintf(w, " %*d", colWidth(t.Field(i)), v.Field(i).Uint())
		}
		fmt.Fprintln(w)
	}
}

// colWidth is the width of a data-path column: its name's, at least 8.
func colWidth(f reflect.StructField) int {
	return max(8, len(strings.Split(f.Tag.Get("json"), ",")[0]))
}

// line is one named value of the text output, its name padded to width
// on an engine of one core (the widths rmactl has always printed).
type line struct {
	name, value string
	width       int
}

// lines are st's counters in print order: its own, completions by
// status and by op, the port's, the loop's, the fault injector's.
func lines(st *ctlmsg.Stats) []line {
	var out []line
	add := func(width int, name string, v any) { out = append(out, line{name, fmt.Sprint(v), width}) }
	v := reflect.ValueOf(*st)
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
		switch f := v.Field(i); {
		case f.Kind() == reflect.Uint64:
			add(19, name, f.Uint())
		case f.Kind() == reflect.String && f.String() != "": // frag_needed_dst
			add(19, name, f.String())
		}
	}
	for i := 0; i < t.NumField(); i++ {
		if m, ok := v.Field(i).Interface().(map[string]uint64); ok { // completed, completed_lookup
			name := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
			for _, k := range sortedKeys(m) {
				add(40, name+"."+k, m[k])
			}
		}
	}
	for _, op := range sortedKeys(st.CompletedByOp) {
		m := st.CompletedByOp[op]
		for _, s := range sortedKeys(m) {
			add(38, "completed_by_op."+op+"."+s, m[s])
		}
	}
	if p := st.Port; p != nil {
		add(24, "port.name", p.Name)
		out = counters(out, "port.driver.", reflect.ValueOf(p.Driver))
		out = counters(out, "port.dev.", reflect.ValueOf(p.Dev))
		if p.DevErr != "" {
			add(24, "port.dev_error", p.DevErr)
		}
		if x := p.XDP; x != nil {
			add(24, "port.xdp.iface", x.Iface)
			add(24, "port.xdp.prog_id", x.ProgID)
			add(24, "port.xdp.mode", x.Mode)
			add(24, "port.xdp.sockets", x.Sockets)
			add(24, "port.xdp.zero_copy", x.ZeroCopy)
			out = counters(out, "port.xdp.steer.", reflect.ValueOf(x.Steer))
			out = counters(out, "port.xdp.socket.", reflect.ValueOf(x.Socket))
			if x.Err != "" {
				add(24, "port.xdp.error", x.Err)
			}
		}
	}
	if l := st.Loop; l != nil {
		out = counters(out, "loop.", reflect.ValueOf(*l))
	}
	if f := st.Fault; f != nil { // a fault-injecting port wraps the engine's
		add(24, "fault.held", f.Held)
		out = counters(out, "fault.rx.", reflect.ValueOf(f.Rx))
		out = counters(out, "fault.tx.", reflect.ValueOf(f.Tx))
	}
	return out
}

// counters appends every uint64 field of the struct v, named prefix plus
// its JSON name.
func counters(out []line, prefix string, v reflect.Value) []line {
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).Kind() == reflect.Uint64 {
			out = append(out, line{prefix + strings.Split(v.Type().Field(i).Tag.Get("json"), ",")[0], strconv.FormatUint(v.Field(i).Uint(), 10), 24})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}
