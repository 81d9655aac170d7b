package ctlmsg

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeRequestValid(t *testing.T) {
	tests := []struct {
		in   string
		want Request
	}{
		{`{"v":1,"op":"open","name":"kv-store.1"}`, Request{V: 1, Op: OpOpen, Name: "kv-store.1"}},
		{`{"v":1,"id":7,"op":"open","name":"a","cmd_cap":256,"cpl_cap":1024,"class":"high"}`,
			Request{V: 1, ID: 7, Op: OpOpen, Name: "a", CmdCap: 256, CplCap: 1024, Class: "high"}},
		{` { "op" : "alloc_slots" , "n" : 16 , "v" : 1 } `, Request{V: 1, Op: OpAllocSlots, N: 16}},
		{`{"v":1,"op":"register_region","size":4096,"perm":31}`, Request{V: 1, Op: OpRegisterRegion, Size: 4096, Perm: PermAll}},
		{`{"v":1,"op":"register_region","size":1099511627776,"perm":2}`, Request{V: 1, Op: OpRegisterRegion, Size: 1 << 40, Perm: 2}},
		{`{"v":1,"op":"deregister_region","region":65537}`, Request{V: 1, Op: OpDeregisterRegion, Region: 65537}},
		{`{"v":1,"op":"identity","id":18446744073709551615}`, Request{V: 1, ID: 1<<64 - 1, Op: OpIdentity}},
		{`{"v":1,"op":"stats"}`, Request{V: 1, Op: OpStats}},
		{`{"v":1,"op":"doorbell"}`, Request{V: 1, Op: OpDoorbell}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := DecodeRequest([]byte(tt.in))
			if err != nil {
				t.Fatalf("DecodeRequest: %v", err)
			}
			if got != tt.want {
				t.Fatalf("(-want +got)\n-%+v\n+%+v", tt.want, got)
			}
			again, err := DecodeRequest(EncodeRequest(&got))
			if err != nil || again != got {
				t.Fatalf("round trip of %s: %+v, %v", EncodeRequest(&got), again, err)
			}
		})
	}
}

func TestDecodeRequestInvalid(t *testing.T) {
	tests := []struct {
		in, wantErr string
	}{
		{``, "not JSON"},
		{`[]`, "not a JSON object"},
		{`"x"`, "not a JSON object"},
		{`{"v":1,"op":"stats"`, "unterminated"},
		{`{"v":1,"op":"stats"}{}`, "trailing data"},
		{`{"v":1,"op":"stats"} x`, "trailing data"},
		{`{"op":"stats"}`, `missing key "v"`},
		{`{"v":2,"op":"stats"}`, "version 2"},
		{`{"v":1}`, `missing key "op"`},
		{`{"v":1,"op":"format_disk"}`, "unknown op"},
		{`{"v":1,"op":"stats","x":1}`, `unknown key "x"`},
		{`{"v":1,"op":"stats","V":1}`, `unknown key "V"`},
		{`{"v":1,"v":1,"op":"stats"}`, `duplicate key "v"`},
		{`{"v":1,"op":"stats","n":1}`, `key "n" is not allowed in op "stats"`},
		{`{"v":1,"op":"open"}`, `op "open" needs key "name"`},
		{`{"v":1,"op":"open","name":""}`, "name must be 1..64 bytes"},
		{`{"v":1,"op":"open","name":"a b"}`, "name has byte 0x20 at 1"},
		{`{"v":1,"op":"open","name":"` + strings.Repeat("a", 65) + `"}`, "name must be 1..64 bytes, got 65"},
		{`{"v":1,"op":"open","name":"a","cmd_cap":3}`, "not a power of two"},
		{`{"v":1,"op":"open","name":"a","cmd_cap":1}`, "out of range"},
		{`{"v":1,"op":"open","name":"a","cpl_cap":131072}`, "out of range"},
		{`{"v":1,"op":"open","name":"a","class":"gold"}`, `class "gold"`},
		{`{"v":1,"op":"open","name":7}`, "want a string"},
		{`{"v":1,"op":"alloc_slots"}`, `needs key "n"`},
		{`{"v":1,"op":"alloc_slots","n":0}`, "out of range"},
		{`{"v":1,"op":"alloc_slots","n":-1}`, "unsigned decimal integer"},
		{`{"v":1,"op":"alloc_slots","n":1.5}`, "unsigned decimal integer"},
		{`{"v":1,"op":"alloc_slots","n":1e3}`, "unsigned decimal integer"},
		{`{"v":1,"op":"alloc_slots","n":"4"}`, "unsigned decimal integer"},
		{`{"v":1,"op":"alloc_slots","n":[4]}`, "unsigned decimal integer"},
		{`{"v":1,"op":"alloc_slots","n":{"a":1}}`, "unsigned decimal integer"},
		{`{"v":1,"op":"alloc_slots","n":null}`, "unsigned decimal integer"},
		{`{"v":1,"op":"alloc_slots","n":65537}`, "out of range"},
		{`{"v":1,"op":"alloc_slots","n":99999999999999999999999}`, "unsigned decimal integer"},
		{`{"v":1,"op":"register_region","size":4096}`, `needs key "perm"`},
		{`{"v":1,"op":"register_region","size":0,"perm":1}`, "out of range"},
		{`{"v":1,"op":"register_region","size":1099511627777,"perm":1}`, "out of range"},
		{`{"v":1,"op":"register_region","size":1,"perm":32}`, "out of range"},
		{`{"v":1,"op":"register_region","size":1,"perm":0}`, "out of range"},
		{`{"v":1,"op":"deregister_region","region":0}`, "out of range"},
		{`{"v":1,"op":"deregister_region","region":4294967296}`, "out of range"},
		{`{"v":4294967296,"op":"stats"}`, "out of range"},
		{`{"v":1,"op":"stats",}`, "invalid character"},
		{strings.Repeat(" ", MaxRequestBytes+1), "limit 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := DecodeRequest([]byte(tt.in))
			if err == nil {
				t.Fatalf("accepted: %+v", got)
			}
			if !errors.Is(err, ErrRequest) {
				t.Errorf("error %v does not wrap ErrRequest", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantErr)
			}
			if got != (Request{}) {
				t.Errorf("non-zero request on error: %+v", got)
			}
		})
	}
}

// TestDecodeRequestFlipOne breaks each valid vector one byte at a time: no
// result may be accepted with a different meaning unless it re-encodes to
// itself (the decoder never half-accepts).
func TestDecodeRequestFlipOne(t *testing.T) {
	valid := `{"v":1,"id":9,"op":"register_region","size":4096,"perm":3}`
	for i := range len(valid) {
		b := []byte(valid)
		b[i] ^= 0x01
		r, err := DecodeRequest(b)
		if err != nil {
			continue
		}
		again, err := DecodeRequest(EncodeRequest(&r))
		if err != nil || again != r {
			t.Errorf("flip at %d: %q decoded to %+v but does not round-trip", i, b, r)
		}
	}
}

func TestResponseRoundTrip(t *testing.T) {
	in := Response{V: Version, ID: 3, Op: OpOpen, Open: &OpenReply{
		Portal: 2, Size: 8192, MapSize: 8192, CmdCap: 64, CplCap: 128, MaxSlots: 32,
		Identity: Identity{Addr: "10.0.0.1", PID: 42, UID: 1000, GID: 1000, Name: "x"},
	}}
	b, err := EncodeResponse(&in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("(-want +got)\n-%+v\n+%+v", in, out)
	}
	for _, bad := range []string{`{"v":2}`, `{"v":1,"error":"x"}`, `{"v":1,"code":"x"}`, `{"v":1}{}`, `nope`} {
		if _, err := DecodeResponse([]byte(bad)); err == nil {
			t.Errorf("DecodeResponse(%s) accepted", bad)
		}
	}
}
