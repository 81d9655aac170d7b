// Package pattern is the content of the regions OneRMA's measuring tools
// read: rmaperf's server and its -self target fill their regions with it
// and check what they read against it, and so does the engine's op
// generator (rmad -selftest, engine/opgen.SelfTest) for a peer's region
// an rmaperf server owns. Byte off of a region is byte(off*31 + 7): 31 is
// odd, so two ranges whose offsets differ by anything but a multiple of
// 256 differ in every byte (a READ that left stale data behind shows at
// once).
package pattern

// At is the pattern's byte at offset off of a region.
func At(off uint64) byte { return byte(off*31 + 7) }

// Fill writes the pattern of a region's bytes from offset off on into b.
func Fill(b []byte, off uint64) {
	for i := range b {
		b[i] = At(off + uint64(i))
	}
}
