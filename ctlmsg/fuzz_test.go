package ctlmsg

import (
	"reflect"
	"testing"
)

// FuzzDecodeRequest: DecodeRequest never panics; an error means a zero
// request; an accepted request re-encodes to a datagram that decodes to the
// same request and stays within MaxRequestBytes. Seeds live in
// testdata/fuzz/FuzzDecodeRequest.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"op":"open","name":"app","cmd_cap":256,"cpl_cap":512,"class":"low"}`,
		`{"v":1,"op":"open","name":"app","core":3}`,
		`{"v":1,"id":1,"op":"alloc_slots","n":8}`,
		`{"v":1,"op":"create_region","size":65536}`,
		`{"v":1,"op":"register_region","memory":1,"perm":7,"key":"00112233445566778899aabbccddeeff"}`,
		`{"v":1,"op":"attach"}`,
		`{"v":1,"op":"deregister_region","region":65537}`,
		`{"v":1,"id":5,"op":"rekey","region":65537,"key":"0123456789abcdef0123456789abcdef"}`,
		`{"v":1,"op":"rekey","region":65537,"key":"0123456789ABCDEF0123456789abcdef"}`,
		`{"v":1,"op":"identity"}`,
		`{"v":1,"op":"stats"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			if r != (Request{}) {
				t.Fatalf("error %v with non-zero request %+v", err, r)
			}
			return
		}
		enc := EncodeRequest(&r)
		if len(enc) > MaxRequestBytes {
			t.Fatalf("re-encoding is %d bytes", len(enc))
		}
		again, err := DecodeRequest(enc)
		if err != nil {
			t.Fatalf("re-encoding %s of %q rejected: %v", enc, b, err)
		}
		if again != r {
			t.Fatalf("round trip of %q: %+v != %+v", b, again, r)
		}
	})
}

// FuzzDecodeFlat: the fast path accepts only what the tokenizer's path
// accepts, as the same request (it leaves every error to that path).
func FuzzDecodeFlat(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"id":5,"op":"rekey","region":65537,"key":"0123456789abcdef0123456789abcdef"}`,
		` { "v" : 1 , "op" : "open" , "name" : "a-b.c_d" , "core" : 0 } `,
		`{"v":1,"op":"open","name":"app","cmd_cap":256,"cpl_cap":512,"class":"high"}`,
		`{"v":1,"op":"alloc_slots","n":8,"n":8}`,
		`{"v":1,"op":"alloc_slots","n":08}`,
		`{"v":1,"op":"alloc_slots","n":8.0}`,
		`{"v":1,"op":"alloc_slots","n":8e0}`,
		`{"v":1,"op":"alloc_slots","n":-0}`,
		`{"v":1,"op":"alloc_slots","n":8,}`,
		`{"v":1,"op":"alloc_slots","n":8}x`,
		`{"v":1,"op":"alloc_slots","n":"8"}`,
		`{"v":1,"op":"al\u006coc_slots","n":8}`,
		`{"v":1,"op":"attach","name":"x"}`,
		`{}`,
		`{"v":2,"op":"stats"}`,
		`{"v":1,"op":"register_region","memory":1,"perm":32,"key":"00112233445566778899aabbccddeeff","layout":[64,16,0,8,8,4,12,4,0]}`,
		`{"v":1,"op":"register_region","memory":1,"perm":32,"key":"00112233445566778899aabbccddeeff","layout":256}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > MaxRequestBytes {
			return
		}
		slow, err := decodeTokens(b)
		fast, ok := decodeFlat(b)
		if !ok {
			if fast != (Request{}) {
				t.Fatalf("%q: refused with a non-zero request %+v", b, fast)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: the fast path accepts %+v, the tokenizer refuses: %v", b, fast, err)
		}
		if fast != slow {
			t.Fatalf("%q: fast %+v, tokenizer %+v", b, fast, slow)
		}
	})
}

// FuzzDecodeFlatResponse: the fast path accepts only what encoding/json's
// path accepts, as the same response.
func FuzzDecodeFlatResponse(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"id":7,"op":"rekey"}`,
		` { "v" : 1 , "id" : 18446744073709551615 } `,
		`{"v":1,"op":"open","code":"quota","error":"over quota","quota":"portals"}`,
		`{"v":1,"code":"quota"}`,
		`{"v":1,"V":2}`,
		`{"v":1,"id":7,"id":8}`,
		`{"v":1,"id":07}`,
		`{"v":1,"id":7.0}`,
		`{"v":4294967296}`,
		`{"v":1,"op":"re\u006bey"}`,
		`{"v":1,"region":{"id":65537}}`,
		`{"v":1}{}`,
		`{"v":1,}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > MaxResponseBytes {
			return
		}
		slow, err := decodeResponse(b)
		fast, ok := decodeFlatResponse(b)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("%q: the fast path accepts %+v, encoding/json refuses: %v", b, fast, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", b, fast, slow)
		}
	})
}
