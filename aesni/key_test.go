package aesni

import (
	"bytes"
	"crypto/aes"
	"testing"
)

// The AES-128 example of FIPS-197 Appendix C.1: the block cipher K_d
// derivation rests on.
func TestAES128FIPS197(t *testing.T) {
	b, err := aes.NewCipher(unhex(t, "000102030405060708090a0b0c0d0e0f"))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 16)
	b.Encrypt(out, unhex(t, "00112233445566778899aabbccddeeff"))
	if want := unhex(t, "69c4e0d86a7b0430d8cdb78070b4c55a"); !bytes.Equal(out, want) {
		t.Fatalf("AES-128: got %x, want %x", out, want)
	}
}

// TestDeriveKey checks K_d against AES computed directly on the documented
// 16-byte block, spelled out here byte by byte.
func TestDeriveKey(t *testing.T) {
	cases := []struct {
		kr        string
		initiator [4]byte
		pid       uint32
		op        uint8
		block     string // address ‖ PID ‖ op ‖ zero padding
	}{
		{"000102030405060708090a0b0c0d0e0f", [4]byte{10, 0, 0, 1}, 4242, 1,
			"0a000001" + "00001092" + "01" + "00000000000000"},
		{"feffe9928665731c6d6a8f9467308308", [4]byte{192, 168, 200, 7}, 0xdeadbeef, 2,
			"c0a8c807" + "deadbeef" + "02" + "00000000000000"},
		{"00000000000000000000000000000000", [4]byte{}, 0, 0,
			"00000000" + "00000000" + "00" + "00000000000000"},
		{"ffffffffffffffffffffffffffffffff", [4]byte{255, 255, 255, 255}, 0xffffffff, 255,
			"ffffffff" + "ffffffff" + "ff" + "00000000000000"},
	}
	for _, c := range cases {
		kr := Key(unhex(t, c.kr))
		b, err := aes.NewCipher(kr[:])
		if err != nil {
			t.Fatal(err)
		}
		var want Key
		b.Encrypt(want[:], unhex(t, c.block))

		if got := DeriveKey(kr, c.initiator, c.pid, c.op); got != want {
			t.Errorf("DeriveKey(%s, %v, %d, %d) = %x, want %x", c.kr, c.initiator, c.pid, c.op, got, want)
		}
		if got := NewDeriver(kr).Derive(c.initiator, c.pid, c.op); got != want {
			t.Errorf("Deriver.Derive(%v, %d, %d) = %x, want %x", c.initiator, c.pid, c.op, got, want)
		}
	}
}

// Every input field changes K_d.
func TestDeriveKeySeparates(t *testing.T) {
	d := NewDeriver(Key(pattern(16, 1)))
	base := d.Derive([4]byte{10, 0, 0, 1}, 100, 1)
	for name, k := range map[string]Key{
		"address": d.Derive([4]byte{10, 0, 0, 2}, 100, 1),
		"pid":     d.Derive([4]byte{10, 0, 0, 1}, 101, 1),
		"op":      d.Derive([4]byte{10, 0, 0, 1}, 100, 2),
		"K_r":     NewDeriver(Key(pattern(16, 2))).Derive([4]byte{10, 0, 0, 1}, 100, 1),
	} {
		if k == base {
			t.Errorf("changing the %s leaves K_d unchanged", name)
		}
	}
}

func TestDeriverAllocs(t *testing.T) {
	d := NewDeriver(Key(pattern(16, 1)))
	var k Key
	if a := testing.AllocsPerRun(100, func() { k = d.Derive([4]byte{10, 0, 0, 1}, 7, 1) }); a != 0 {
		t.Errorf("Derive: %v allocs per run, want 0", a)
	}
	_ = k
}

func TestReservedKey(t *testing.T) {
	if len(ReservedKeyText) != KeySize {
		t.Fatalf("ReservedKeyText has %d bytes", len(ReservedKeyText))
	}
	if k := ReservedKey(); string(k[:]) != ReservedKeyText {
		t.Fatalf("ReservedKey = %q", k[:])
	}
}
