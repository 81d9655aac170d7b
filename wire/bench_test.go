package wire

import "testing"

func benchEncodeSeal(b *testing.B, plen int) {
	f := sampleFields()
	buf := make([]byte, 2048)
	b.ReportAllocs()
	for b.Loop() {
		Encode(buf, &f, plen)
		SealICRC(buf, plen)
	}
}

func benchDecodeCheck(b *testing.B, plen int) {
	fr := sampleFrame(b, plen)
	var f Fields
	b.ReportAllocs()
	for b.Loop() {
		p, err := Decode(fr, &f)
		if err != nil || CheckICRC(fr, len(p)) != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeSeal0(b *testing.B)     { benchEncodeSeal(b, 0) }
func BenchmarkEncodeSeal64(b *testing.B)    { benchEncodeSeal(b, 64) }
func BenchmarkEncodeSeal1408(b *testing.B)  { benchEncodeSeal(b, 1408) }
func BenchmarkDecodeCheck0(b *testing.B)    { benchDecodeCheck(b, 0) }
func BenchmarkDecodeCheck64(b *testing.B)   { benchDecodeCheck(b, 64) }
func BenchmarkDecodeCheck1408(b *testing.B) { benchDecodeCheck(b, 1408) }
