package stage

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// fake is a counter the test moves by hand.
type fake struct{ t uint64 }

func (f *fake) read() uint64 { return f.t }

func TestMarkEnterBecome(t *testing.T) {
	f := &fake{t: 1000}
	s := New(f.read)
	if s.Current() != Loop {
		t.Fatalf("starts in %v, want loop", s.Current())
	}
	f.t += 5 // Loop
	s.Enter(Receive)
	f.t += 10 // Receive
	if prev := s.Enter(Open); prev != Receive {
		t.Fatalf("Enter returned %v, want receive", prev)
	}
	f.t += 20 // Open, then a nested Seal section returns to it
	prev := s.Enter(Seal)
	f.t += 7
	s.Enter(prev)
	f.t += 1                  // still Open
	s.Mark(EmptyRx, Protocol) // charged to EmptyRx whatever was entered
	f.t += 3
	s.Become(Build) // the Protocol section turns out to be Build's
	f.t += 4
	sn := s.Snapshot(42) // charges the 7 cycles to Build, no section yet
	want := map[Stage][2]uint64{Loop: {5, 1}, Receive: {10, 1}, Open: {20, 1}, Seal: {7, 1}, EmptyRx: {1, 1}, Build: {7, 0}}
	for st := Stage(0); st < NumStages; st++ {
		if got := [2]uint64{sn.Cycles[st], sn.Sections[st]}; got != want[st] {
			t.Errorf("%v: cycles, sections %v, want %v", st, got, want[st])
		}
	}
	if sn.Total() != 50 || sn.At != 1050 || sn.Now != 42 {
		t.Errorf("total %d at %d now %d", sn.Total(), sn.At, sn.Now)
	}
	f.t += 2
	s.Enter(Transmit) // the Build section ends: 2 more cycles, one section
	if a := s.Snapshot(43); a.Cycles[Build] != 9 || a.Sections[Build] != 1 {
		t.Errorf("build after the snapshot: %d cycles, %d sections", a.Cycles[Build], a.Sections[Build])
	}
	s.Reset()
	if r := s.Snapshot(0); r.Total() != 0 || s.Current() != Loop {
		t.Errorf("after Reset: %d cycles, in %v", r.Total(), s.Current())
	}
}

// TestProvisional: marks between Provisional and Settle go to the
// stages they name, or all to one when the iteration turned out idle.
func TestProvisional(t *testing.T) {
	f := &fake{}
	s := New(f.read)
	for _, idle := range []bool{false, true} {
		s.Reset()
		f.t += 3
		s.Mark(EmptyRx, Protocol)
		s.Provisional()
		f.t += 10
		s.Enter(Build)
		f.t += 20
		mid := s.Snapshot(0) // provisional charges are not in a snapshot
		f.t += 5
		s.Enter(Transmit)
		f.t += 1
		s.Enter(Clock)
		s.Settle(idle, EmptyPoll)
		f.t += 2
		sn := s.Snapshot(0)
		if mid.Cycles[Protocol]+mid.Cycles[Build] != 0 || mid.Cycles[EmptyRx] != 3 {
			t.Errorf("idle %v: snapshot in the provisional part: %+v", idle, mid.Cycles)
		}
		want := map[Stage][2]uint64{EmptyRx: {3, 1}, Protocol: {10, 1}, Build: {25, 1}, Transmit: {1, 1}, Clock: {2, 0}}
		if idle {
			want = map[Stage][2]uint64{EmptyRx: {3, 1}, EmptyPoll: {36, 3}, Clock: {2, 0}}
		}
		for st := Stage(0); st < NumStages; st++ {
			if got := [2]uint64{sn.Cycles[st], sn.Sections[st]}; got != want[st] {
				t.Errorf("idle %v: %v: %v, want %v", idle, st, got, want[st])
			}
		}
		s.Settle(true, Loop) // not provisional: nothing moves
		if again := s.Snapshot(0); again.Cycles != sn.Cycles {
			t.Errorf("a second Settle moved %+v", again.Cycles)
		}
	}
}

// TestCharge: spans measured apart inside a running section (a crossing's
// seal and transmit parts) are charged to their stages and taken off that
// section, which goes on and is charged the rest to what it turns out to
// be; a span longer than the section so far is cut to it, and the run
// given with a span is measured and charged with it, as one section.
func TestCharge(t *testing.T) {
	f := &fake{}
	s := New(f.read)
	s.Enter(Receive) // the rx poll
	f.t += 100       // a crossing: 30 of seals, 20 of tx
	s.Charge(Seal, 30, func() { f.t += 4 })
	s.Charge(Transmit, 20, nil)
	f.t += 6 // the steering after it
	s.Mark(EmptyRx, Protocol)
	sn := s.Snapshot(0)
	want := map[Stage][2]uint64{Loop: {0, 1}, Seal: {34, 1}, Transmit: {20, 1}, EmptyRx: {56, 1}}
	for st := Stage(0); st < NumStages; st++ {
		if got := [2]uint64{sn.Cycles[st], sn.Sections[st]}; got != want[st] {
			t.Errorf("%v: cycles, sections %v, want %v", st, got, want[st])
		}
	}
	f.t += 10
	s.Charge(Transmit, 1000, nil) // more than the section has run: cut
	f.t += 5
	s.Enter(Clock)
	if sn := s.Snapshot(0); sn.Cycles[Transmit] != 30 || sn.Cycles[Protocol] != 5 || sn.Total() != f.t {
		t.Errorf("after a span too long: transmit %d, protocol %d, total %d of %d", sn.Cycles[Transmit], sn.Cycles[Protocol], sn.Total(), f.t)
	}
}

func TestSnapshotSubAdd(t *testing.T) {
	f := &fake{}
	s := New(f.read)
	s.Frames(3)
	f.t += 10
	a := s.Snapshot(100)
	f.t += 30
	s.Enter(Receive)
	s.Frames(32)
	f.t += 5
	b := s.Snapshot(150)
	d := b.Sub(a)
	if d.Now != 50 || d.At != 35 || d.Frames != 32 || d.Cycles[Loop] != 30 || d.Sections[Loop] != 1 || d.Cycles[Receive] != 5 || d.Total() != 35 {
		t.Fatalf("delta %+v", d)
	}
	var sum Snapshot
	sum.Add(d)
	sum.Add(d)
	if sum.Now != 100 || sum.Frames != 64 || sum.Cycles[Loop] != 60 || sum.Sections[Loop] != 2 || sum.Total() != 70 {
		t.Fatalf("sum %+v", sum)
	}
}

func TestStageNames(t *testing.T) {
	seen := map[string]bool{}
	for st := Stage(0); st < NumStages; st++ {
		n := st.String()
		if n == "" || seen[n] || n == RowOverhead || n == RowTotal || n == RowUnattributed {
			t.Errorf("stage %d: name %q", st, n)
		}
		seen[n] = true
		if got, ok := stageNamed(n); !ok || got != st {
			t.Errorf("stageNamed(%q) = %v, %v", n, got, ok)
		}
	}
	if NumStages.String() != "stage?" || Clock.Overhead() != true || Completion.Overhead() {
		t.Error("names or overhead")
	}
}

func TestBudget(t *testing.T) {
	b := Budget{TargetNs: 250, SealNs: 40, OpenNs: 30}
	for st, want := range map[Stage]float64{Seal: 40, Open: 30, Receive: 30, Protocol: 30, Build: 30, Transmit: 30, Completion: 30, Loop: 30} {
		if got, ok := b.For(st); !ok || got != want {
			t.Errorf("%v: %v %v, want %v", st, got, ok, want)
		}
	}
	if _, ok := b.For(Idle); ok {
		t.Error("idle has a budget")
	}
	if _, ok := b.For(Check); ok {
		t.Error("check has a budget")
	}
	if _, ok := (Budget{SealNs: 1}).For(Receive); ok {
		t.Error("a budget without a target")
	}
}

// TestReport: the rows divide by ops, add up to the window, and the
// budgets and the stage most over its budget come out as the rule says.
func TestReport(t *testing.T) {
	var d Snapshot
	const hz = 2e9 // 2 cycles a ns
	d.Cycles[Receive], d.Sections[Receive] = 4000, 10
	d.Cycles[Open] = 1000
	d.Cycles[Protocol] = 2000
	d.Cycles[Build] = 3000
	d.Cycles[Seal] = 1000
	d.Cycles[Transmit] = 500
	d.Cycles[Clock], d.Sections[Clock] = 200, 10
	d.Cycles[EmptyRx] = 300
	d.Cycles[Idle] = 1000
	d.Frames = 20
	d.Now = 6600 // ns: 13200 cycles, 13000 charged
	r := NewReport(d, 10, hz, Budget{TargetNs: 400, Target: "test", SealNs: 40, OpenNs: 60})
	if r.Ops != 10 || r.FramesPerOp != 2 {
		t.Fatalf("report %+v", r)
	}
	row := func(name string) Row {
		x, ok := r.Row(name)
		if !ok {
			t.Fatalf("no row %q", name)
		}
		return x
	}
	if x := row("receive"); x.Cycles != 400 || x.Ns != 200 || x.Sections != 1 || *x.BudgetNs != 50 || math.Abs(x.Share-4000.0/13200) > 1e-12 {
		t.Errorf("receive %+v", x)
	}
	if x := row("open"); *x.BudgetNs != 60 || x.Ns != 50 {
		t.Errorf("open %+v", x)
	}
	if x := row(RowOverhead); x.Cycles != 50 || *x.BudgetNs != 50 || x.Sections != 1 { // clock and empty rx, not idle
		t.Errorf("overhead %+v", x)
	}
	if x := row("idle"); x.BudgetNs != nil || x.Cycles != 100 {
		t.Errorf("idle %+v", x)
	}
	if x := row(RowUnattributed); x.Cycles != 20 {
		t.Errorf("unattributed %+v", x)
	}
	if x := row(RowTotal); x.Cycles != 1320 || x.Ns != 660 || *x.BudgetNs != 400 || x.Share != 1 {
		t.Errorf("total %+v", x)
	}
	var sum float64
	for _, x := range r.Rows {
		if x.Stage != RowOverhead && x.Stage != RowTotal {
			sum += x.Cycles
		}
	}
	if sum != 1320 {
		t.Errorf("stages and unattributed add up to %v cycles per op, want the total's 1320", sum)
	}
	x, over, ok := r.MostOver()
	if !ok || x.Stage != "receive" || over != 150 {
		t.Errorf("most over: %+v by %v, %v", x, over, ok)
	}
	// Charges beyond the window (an hz a little low): nothing unattributed,
	// and the rows still add up to the total, the charges.
	d.Now = 6400 // ns: 12800 cycles, 13000 charged
	r = NewReport(d, 10, hz, Budget{TargetNs: 400, Target: "test", SealNs: 40, OpenNs: 60})
	if x := row(RowUnattributed); x.Cycles != 0 {
		t.Errorf("charges beyond the window: unattributed %+v", x)
	}
	if x := row(RowTotal); x.Cycles != 1300 || x.Share != 1 {
		t.Errorf("charges beyond the window: total %+v", x)
	}
	var out bytes.Buffer
	r.Fprint(&out)
	for _, want := range []string{"budget 400.0 ns per op (test)", "receive", "+150.0", "  clock", "most over its budget: receive, by 150.0 ns per op"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	// JSON: what rmabench reads back.
	b, _ := json.Marshal(r)
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || len(back.Rows) != len(r.Rows) || *back.Rows[0].BudgetNs != 50 {
		t.Errorf("json round trip: %v %+v", err, back)
	}
	// No target: no budget, nothing over.
	r = NewReport(d, 10, hz, Budget{})
	if _, _, ok := r.MostOver(); ok {
		t.Error("most over without budgets")
	}
	if x := row(RowTotal); x.BudgetNs != nil {
		t.Error("a total budgeted without a target")
	}
	// No ops: no rows.
	if r := NewReport(d, 0, hz, Budget{}); len(r.Rows) != 0 {
		t.Errorf("rows without ops: %+v", r.Rows)
	}
}

func BenchmarkMark(b *testing.B) {
	var c uint64
	s := New(func() uint64 { c++; return c })
	for b.Loop() {
		s.Enter(Receive)
		s.Enter(Open)
	}
}
