package wire

import "testing"

func benchEncode(b *testing.B, plen int) {
	f := sampleFields()
	buf := make([]byte, 2048)
	b.ReportAllocs()
	for b.Loop() {
		Encode(buf, &f, plen)
	}
}

func benchDecode(b *testing.B, plen int) {
	fr := sampleFrame(b, plen)
	var f Fields
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(fr, &f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode0(b *testing.B)    { benchEncode(b, 0) }
func BenchmarkEncode64(b *testing.B)   { benchEncode(b, 64) }
func BenchmarkEncode1408(b *testing.B) { benchEncode(b, 1408) }
func BenchmarkDecode0(b *testing.B)    { benchDecode(b, 0) }
func BenchmarkDecode64(b *testing.B)   { benchDecode(b, 64) }
func BenchmarkDecode1408(b *testing.B) { benchDecode(b, 1408) }
