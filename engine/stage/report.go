package stage

import (
	"fmt"
	"io"
	"math"
)

// Budget is what one op may cost on one core, stage by stage: the speed
// target of the run as ns per op, and the run's own crypto cost.
//
// The rule (For): Open and Seal are budgeted what the AEADs of one op
// cost on this CPU, measured in the same process with the same backend
// and the op's own messages, batched as the engine batches them (SealNs,
// OpenNs); the rest of the target, TargetNs - SealNs - OpenNs, is split
// in equal parts over the six other budgets: Receive, Protocol, Build,
// Transmit, Completion and the per-iteration overhead (Clock, EmptyRx,
// EmptyRings and Loop together). Equal parts do not claim the stages
// cost alike: a run that misses its target shows its largest stages over
// their part, and the stage most over it is the one a cut helps most.
// Idle and Check are never budgeted.
type Budget struct {
	// TargetNs is the speed target as ns per op on one core (0: the run
	// has none: no budgets).
	TargetNs float64 `json:"target_ns"`
	// Target says where TargetNs comes from.
	Target string `json:"target,omitempty"`
	// SealNs and OpenNs: the seals and opens of one op, measured.
	SealNs float64 `json:"seal_ns"`
	OpenNs float64 `json:"open_ns"`
}

// budgetParts is how many parts the non-crypto budget is split into.
const budgetParts = 6

// For is st's budget in ns per op (false: none): Seal and Open their
// measured cost, the other stages and the overhead group (any overhead
// stage but Idle) an equal part of the rest.
func (b Budget) For(st Stage) (float64, bool) {
	if b.TargetNs <= 0 || st == Idle || st == Check {
		return 0, false
	}
	switch st {
	case Seal:
		return b.SealNs, true
	case Open:
		return b.OpenNs, true
	}
	return (b.TargetNs - b.SealNs - b.OpenNs) / budgetParts, true
}

// Report is a run's stage table: the cycles of its cores' loops over the
// measured window by stage, per op completed in it.
type Report struct {
	Ops         uint64  `json:"ops"`           // ops completed in the window, all cores
	FramesPerOp float64 `json:"frames_per_op"` // received frames per op
	Hz          float64 `json:"tsc_hz"`        // the counter's frequency
	Budget      Budget  `json:"budget"`
	Rows        []Row   `json:"rows"`
}

// Row is one line of the table.
type Row struct {
	// Stage is a Stage's name, or "overhead" (the per-iteration
	// overhead's stages together), "unattributed" (the window's cycles,
	// on the loop's clock, that no stage was charged: what the marks do
	// not cover, and the error of Hz) or "total".
	Stage string `json:"stage"`
	// Cycles and Ns per op; Share of the window's cycles.
	Cycles float64 `json:"cycles_per_op"`
	Ns     float64 `json:"ns_per_op"`
	Share  float64 `json:"share"`
	// Sections per op: of Clock, clock reads; EmptyRx, empty rx polls;
	// Transmit, crossings that transmit; Open and Seal, batches run.
	Sections float64 `json:"sections_per_op"`
	// BudgetNs is the row's budget (nil: none).
	BudgetNs *float64 `json:"budget_ns,omitempty"`
}

// Over is how far the row is over its budget in ns per op (negative:
// under); false without a budget.
func (r *Row) Over() (float64, bool) {
	if r.BudgetNs == nil {
		return 0, false
	}
	return r.Ns - *r.BudgetNs, true
}

// Stage rows of a report that are not a Stage.
const (
	RowOverhead     = "overhead"
	RowUnattributed = "unattributed"
	RowTotal        = "total"
)

// NewReport makes the table of d, the window's counts (all cores added
// up: Snapshot.Add), for ops ops, the counter at hz, under budget b.
// The unattributed row is the window's length on the loop's clock (d.Now,
// core-ns) at hz minus every cycle charged, or 0 when the charges exceed
// it (by the error of hz); the total row is the larger of the two, the
// sum of every other row but overhead, and shares are of it.
func NewReport(d Snapshot, ops uint64, hz float64, b Budget) Report {
	r := Report{Ops: ops, Hz: hz, Budget: b}
	if ops == 0 || hz <= 0 {
		return r
	}
	fops := float64(ops)
	r.FramesPerOp = float64(d.Frames) / fops
	wall := float64(d.Now) * hz / 1e9
	charged := float64(d.Total())
	total := math.Max(wall, charged)
	row := func(name string, cycles float64, sections uint64, budget float64, hasBudget bool) Row {
		x := Row{Stage: name, Cycles: cycles / fops, Ns: cycles / fops / hz * 1e9, Sections: float64(sections) / fops}
		if total > 0 {
			x.Share = cycles / total
		}
		if hasBudget {
			x.BudgetNs = &budget
		}
		return x
	}
	var over, overN uint64
	for st := Stage(0); st < NumStages; st++ {
		if st.Overhead() && st != Idle {
			over += d.Cycles[st]
			overN += d.Sections[st]
		}
	}
	for st := Stage(0); st < Clock; st++ {
		bn, ok := b.For(st)
		r.Rows = append(r.Rows, row(st.String(), float64(d.Cycles[st]), d.Sections[st], bn, ok))
	}
	bn, ok := b.For(Loop)
	r.Rows = append(r.Rows, row(RowOverhead, float64(over), overN, bn, ok))
	for st := Clock; st < NumStages; st++ {
		r.Rows = append(r.Rows, row(st.String(), float64(d.Cycles[st]), d.Sections[st], 0, false))
	}
	r.Rows = append(r.Rows, row(RowUnattributed, total-charged, 0, 0, false))
	r.Rows = append(r.Rows, row(RowTotal, total, 0, b.TargetNs, b.TargetNs > 0))
	return r
}

// Row returns the row named name (a Stage's name, "overhead",
// "unattributed" or "total").
func (r *Report) Row(name string) (Row, bool) {
	for _, x := range r.Rows {
		if x.Stage == name {
			return x, true
		}
	}
	return Row{}, false
}

// MostOver is the budgeted row (not the total) furthest over its budget,
// and by how much in ns per op; false when no row has a budget.
func (r *Report) MostOver() (Row, float64, bool) {
	var best Row
	bestOver, found := 0.0, false
	for _, x := range r.Rows {
		if x.Stage == RowTotal {
			continue
		}
		if o, ok := x.Over(); ok && (!found || o > bestOver) {
			best, bestOver, found = x, o, true
		}
	}
	return best, bestOver, found
}

// Fprint prints the table: stage, cycles per op, ns per op, share,
// sections per op, budget and how far over (+) or under (-) it.
func (r *Report) Fprint(w io.Writer) {
	fmt.Fprintf(w, "stages: %d ops, %.2f frames received per op, counter at %.3f GHz", r.Ops, r.FramesPerOp, r.Hz/1e9)
	if b := r.Budget; b.TargetNs > 0 {
		fmt.Fprintf(w, "; budget %.1f ns per op (%s), measured crypto: seal %.1f ns, open %.1f ns per op", b.TargetNs, b.Target, b.SealNs, b.OpenNs)
	} else {
		fmt.Fprint(w, "; no speed target for this run: no budgets")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-14s %12s %10s %7s %9s %10s %10s\n", "stage", "cycles/op", "ns/op", "share", "count/op", "budget_ns", "over_ns")
	for _, x := range r.Rows {
		name := x.Stage
		if st, ok := stageNamed(name); ok && st.Overhead() {
			name = "  " + name
		}
		budget, over := "", ""
		if o, ok := x.Over(); ok {
			budget, over = fmt.Sprintf("%.1f", *x.BudgetNs), fmt.Sprintf("%+.1f", o)
		}
		count := ""
		if x.Sections > 0 {
			count = fmt.Sprintf("%.3f", x.Sections)
		}
		fmt.Fprintf(w, "%-14s %12.1f %10.1f %6.1f%% %9s %10s %10s\n", name, x.Cycles, x.Ns, 100*x.Share, count, budget, over)
	}
	if x, o, ok := r.MostOver(); ok && o > 0 {
		fmt.Fprintf(w, "most over its budget: %s, by %.1f ns per op\n", x.Stage, o)
	}
}

func stageNamed(name string) (Stage, bool) {
	for st := Stage(0); st < NumStages; st++ {
		if names[st] == name {
			return st, true
		}
	}
	return 0, false
}
