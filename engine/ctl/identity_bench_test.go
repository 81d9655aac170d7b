package ctl

import (
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// benchIdentities opens a durable identity state in the benchmark's
// temporary directory (on its file system: fsyncs are real).
func benchIdentities(b *testing.B) *identities {
	s, err := openIdentities(identConfig{path: filepath.Join(b.TempDir(), "ids"), boot: testBoot, max: 4096})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.close() })
	return s
}

// BenchmarkIdentityBurst is one tenant's burst of 1000 new processes, one
// after the other, each taking its identity and letting it go (a process
// that opens a portal and exits): an op is the burst.
func BenchmarkIdentityBurst(b *testing.B) {
	s := benchIdentities(b)
	ino := uint64(0)
	for i := 0; i < b.N; i++ {
		for range 1000 {
			ino++
			if _, err := s.acquire(ino); err != nil {
				b.Fatal(err)
			}
			s.release(ino)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/identity")
}

// BenchmarkIdentityPinBesideBurst is another tenant's process opening a
// connection beside one it holds (pin and release) while one tenant's
// processes take new identities one after the other, as fast as the
// scheduler's shortest sleep lets processes come (not a loop on the mutex,
// which no connection is). Its pins come at arbitrary moments of the
// burst (a pause between them), as another tenant's opens do: it reports
// each pin's mean latency, its 99th percentile and its maximum.
func BenchmarkIdentityPinBesideBurst(b *testing.B) {
	s := benchIdentities(b)
	known := burstIno(0)
	if _, err := s.acquire(known); err != nil { // its first connection, held
		b.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for ino := uint64(1); ; ino++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.acquire(ino); err != nil {
				b.Error(err)
				return
			}
			s.release(ino)
			time.Sleep(time.Microsecond)
		}
	}()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		time.Sleep(100 * time.Microsecond)
		t0 := time.Now()
		if _, ok := s.pin(known); !ok {
			b.Fatal("known process forgotten")
		}
		s.release(known)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	close(stop)
	<-done
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(lat)), "ns/pin")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns/pin")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns/pin")
}
