package memport_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/runner"
)

var (
	_ runner.Port = (*memport.Port)(nil)
)

func send(t *testing.T, p *memport.Port, payload []byte) {
	t.Helper()
	b := p.Buffer()
	if b == nil {
		t.Fatal("Buffer() = nil")
	}
	copy(b, payload)
	p.Send(len(payload))
}

func TestPair(t *testing.T) {
	a, b, err := memport.Pair(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	send(t, a, []byte("hello"))
	send(t, a, []byte("world!"))
	if got := b.Recv(); len(got) != 0 {
		t.Fatalf("frames visible before Flush: %q", got)
	}
	a.Flush()
	if got := a.Recv(); len(got) != 0 {
		t.Fatalf("sender received its own frames: %q", got)
	}
	got := b.Recv()
	if len(got) != 2 || string(got[0]) != "hello" || string(got[1]) != "world!" {
		t.Fatalf("Recv() = %q", got)
	}
	send(t, b, []byte("back"))
	b.Flush()
	if got := a.Recv(); len(got) != 1 || string(got[0]) != "back" {
		t.Fatalf("reverse Recv() = %q", got)
	}
	if s := a.Stats(); s.TxFrames != 2 || s.RxFrames != 1 {
		t.Errorf("a stats %+v", s)
	}
}

func TestBufferStableUntilSend(t *testing.T) {
	p, err := memport.Loopback(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	b1, b2 := p.Buffer(), p.Buffer()
	if &b1[0] != &b2[0] {
		t.Error("Buffer() changed before Send")
	}
	if len(b1) != memport.DefaultConfig().FrameBytes {
		t.Errorf("len(Buffer()) = %d", len(b1))
	}
	p.Send(10)
	if b3 := p.Buffer(); &b3[0] == &b1[0] {
		t.Error("Buffer() after Send returned the sent buffer")
	}
}

func TestLoopbackBurstAndExhaustion(t *testing.T) {
	cfg := memport.Config{Frames: 8, FrameBytes: 128, Burst: 4}
	p, err := memport.Loopback(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		send(t, p, []byte{byte(i)})
	}
	if p.Buffer() != nil {
		t.Fatal("Buffer() with every buffer in flight is not nil")
	}
	p.Flush()
	var seen []byte
	for range 2 {
		for _, f := range p.Recv() { // bursts of at most 4
			seen = append(seen, f[0])
		}
	}
	if !bytes.Equal(seen, []byte{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("received %v", seen)
	}
	// The first burst was released by the second Recv: 4 buffers free.
	for i := range 4 {
		if p.Buffer() == nil {
			t.Fatalf("buffer %d not returned", i)
		}
		p.Send(1)
	}
	if p.Buffer() != nil {
		t.Fatal("more buffers than were released")
	}
	if s := p.Stats(); s.TxNoBuffer != 2 {
		t.Errorf("TxNoBuffer = %d, want 2", s.TxNoBuffer)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []memport.Config{
		{Frames: 0, FrameBytes: 100, Burst: 1},
		{Frames: 4, FrameBytes: 10, Burst: 1},
		{Frames: 4, FrameBytes: 100, Burst: 5},
		{Frames: 4, FrameBytes: 100, Burst: 0},
	} {
		if _, err := memport.Loopback(c); err == nil {
			t.Errorf("Loopback(%+v) succeeded", c)
		}
	}
}

func TestSendPanics(t *testing.T) {
	p, _ := memport.Loopback(memport.DefaultConfig())
	defer func() {
		if recover() == nil {
			t.Error("Send without Buffer did not panic")
		}
	}()
	p.Send(1)
}

// TestConcurrentPair streams frames both ways between two goroutines (run
// with -race).
func TestConcurrentPair(t *testing.T) {
	a, b, err := memport.Pair(memport.Config{Frames: 16, FrameBytes: 64, Burst: 8})
	if err != nil {
		t.Fatal(err)
	}
	const frames = 20000
	var wg sync.WaitGroup
	run := func(p *memport.Port, errs *[]string) {
		defer wg.Done()
		sent, want := 0, 0
		for want < frames || sent < frames {
			for sent < frames {
				buf := p.Buffer()
				if buf == nil {
					break
				}
				buf[0], buf[1] = byte(sent), byte(sent>>8)
				p.Send(2 + sent%50)
				sent++
			}
			p.Flush()
			for _, f := range p.Recv() {
				if len(f) != 2+want%50 || f[0] != byte(want) || f[1] != byte(want>>8) {
					*errs = append(*errs, "out of order or corrupt frame")
					return
				}
				want++
			}
		}
	}
	var ea, eb []string
	wg.Add(2)
	go run(a, &ea)
	go run(b, &eb)
	wg.Wait()
	if len(ea)+len(eb) > 0 {
		t.Fatal(ea, eb)
	}
}

func TestAllocs(t *testing.T) {
	p, _ := memport.Loopback(memport.DefaultConfig())
	allocs := testing.AllocsPerRun(100, func() {
		for range 32 {
			b := p.Buffer()
			b[0] = 1
			p.Send(64)
		}
		p.Flush()
		for _, f := range p.Recv() {
			_ = f[0]
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per burst, want 0", allocs)
	}
}

func BenchmarkLoopbackBurst(b *testing.B) {
	p, _ := memport.Loopback(memport.DefaultConfig())
	b.ReportAllocs()
	for n := 0; n < b.N; n += 32 {
		for range 32 {
			buf := p.Buffer()
			buf[0] = byte(n)
			p.Send(64)
		}
		p.Flush()
		p.Recv()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mpps")
}
