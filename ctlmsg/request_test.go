package ctlmsg

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/onerma/onerma/abi"
)

// testKeyHex is a region key as it travels; testKey the same bytes.
const testKeyHex = "00112233445566778899aabbccddeeff"

var testKey = Key{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}

func TestDecodeRequestValid(t *testing.T) {
	tests := []struct {
		in   string
		want Request
	}{
		{`{"v":1,"op":"open","name":"kv-store.1"}`, Request{V: 1, Op: OpOpen, Name: "kv-store.1"}},
		{`{"v":1,"id":7,"op":"open","name":"a","cmd_cap":256,"cpl_cap":1024,"class":"high"}`,
			Request{V: 1, ID: 7, Op: OpOpen, Name: "a", CmdCap: 256, CplCap: 1024, Class: "high"}},
		{`{"v":1,"op":"open","name":"a","core":0}`, Request{V: 1, Op: OpOpen, Name: "a", PinCore: true}},
		{`{"v":1,"op":"open","core":63,"name":"a"}`, Request{V: 1, Op: OpOpen, Name: "a", PinCore: true, Core: 63}},
		{` { "op" : "alloc_slots" , "n" : 16 , "v" : 1 } `, Request{V: 1, Op: OpAllocSlots, N: 16}},
		{`{"v":1,"op":"attach"}`, Request{V: 1, Op: OpAttach}},
		{`{"v":1,"op":"create_region","size":4096}`, Request{V: 1, Op: OpCreateRegion, Size: 4096}},
		{`{"v":1,"op":"create_region","size":1099511627776}`, Request{V: 1, Op: OpCreateRegion, Size: 1 << 40}},
		{`{"v":1,"op":"register_region","memory":1,"perm":31,"key":"` + testKeyHex + `"}`,
			Request{V: 1, Op: OpRegisterRegion, Memory: 1, Perm: abi.PermAll, Key: testKey}},
		{`{"key":"00000000000000000000000000000001","v":1,"op":"register_region","memory":4294967295,"perm":2}`,
			Request{V: 1, Op: OpRegisterRegion, Memory: 1<<32 - 1, Perm: 2, Key: Key{15: 1}}},
		{`{"v":1,"op":"register_region","memory":1,"perm":36,"key":"` + testKeyHex + `","layout":[256,32,0,8,8,8,6,16,4,65538]}`,
			Request{V: 1, Op: OpRegisterRegion, Memory: 1, Perm: abi.PermRemoteLookup | abi.PermRemoteRead, Key: testKey,
				Layout: abi.BucketLayout{BucketBytes: 256, EntryBytes: 32, TagWidth: 8, PtrOff: 8, PtrWidth: 8, PtrShift: 6, LenOff: 16, LenWidth: 4, Linked: 65538}}},
		{`{"v":1,"op":"register_region","layout":[ 4096 , 8, 0,1, 2,2, 0, 4,4, 0 ],"memory":2,"perm":32,"key":"` + testKeyHex + `"}`,
			Request{V: 1, Op: OpRegisterRegion, Memory: 2, Perm: abi.PermRemoteLookup, Key: testKey,
				Layout: abi.BucketLayout{BucketBytes: 4096, EntryBytes: 8, TagWidth: 1, PtrOff: 2, PtrWidth: 2, LenOff: 4, LenWidth: 4}}},
		{`{"v":1,"op":"deregister_region","region":65537}`, Request{V: 1, Op: OpDeregisterRegion, Region: 65537}},
		{`{"v":1,"id":3,"op":"rekey","region":65537,"key":"` + testKeyHex + `"}`,
			Request{V: 1, ID: 3, Op: OpRekey, Region: 65537, Key: testKey}},
		{`{"v":1,"op":"rekey","key":"ffffffffffffffffffffffffffffffff","region":4294967295}`,
			Request{V: 1, Op: OpRekey, Region: 1<<32 - 1, Key: Key{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}},
		{`{"v":1,"op":"identity","id":18446744073709551615}`, Request{V: 1, ID: 1<<64 - 1, Op: OpIdentity}},
		{`{"v":1,"op":"stats"}`, Request{V: 1, Op: OpStats}},
		{`{"v":1,"op":"doorbell"}`, Request{V: 1, Op: OpDoorbell}},
		{`{"v":1,"op":"moderate","count":16,"period_us":50}`, Request{V: 1, Op: OpModerate, Count: 16, PeriodUs: 50}},
		{`{"v":1,"op":"moderate","period_us":0,"count":1}`, Request{V: 1, Op: OpModerate, Count: 1}},
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
		{`{"v":1,"op":"open","name":"a","core":64}`, `key "core": 64 out of range [0, 63]`},
		{`{"v":1,"op":"open","name":"a","core":-1}`, `key "core": want an unsigned decimal integer`},
		{`{"v":1,"op":"attach","core":1}`, `key "core" is not allowed in op "attach"`},
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
		{`{"v":1,"op":"attach","name":"a"}`, `key "name" is not allowed in op "attach"`},
		{`{"v":1,"op":"create_region"}`, `needs key "size"`},
		{`{"v":1,"op":"create_region","size":0}`, "out of range"},
		{`{"v":1,"op":"create_region","size":1099511627777}`, "out of range"},
		{`{"v":1,"op":"create_region","size":4096,"perm":1}`, `key "perm" is not allowed in op "create_region"`},
		{`{"v":1,"op":"create_region","size":4096,"key":"` + testKeyHex + `"}`, `key "key" is not allowed in op "create_region"`},
		{`{"v":1,"op":"register_region","memory":1,"key":"` + testKeyHex + `"}`, `needs key "perm"`},
		{`{"v":1,"op":"register_region","memory":1,"perm":1}`, `needs key "key"`},
		{`{"v":1,"op":"register_region","perm":1,"key":"` + testKeyHex + `"}`, `needs key "memory"`},
		{`{"v":1,"op":"register_region","memory":0,"perm":1,"key":"` + testKeyHex + `"}`, "out of range"},
		{`{"v":1,"op":"register_region","memory":4294967296,"perm":1,"key":"` + testKeyHex + `"}`, "out of range"},
		// The register_region of before create_region existed.
		{`{"v":1,"op":"register_region","size":4096,"perm":1,"key":"` + testKeyHex + `"}`, `key "size" is not allowed in op "register_region"`},
		{`{"v":1,"op":"register_region","memory":1,"perm":64,"key":"` + testKeyHex + `"}`, "out of range"},
		{`{"v":1,"op":"register_region","memory":1,"perm":32,"key":"` + testKeyHex + `","layout":[256,32,0,8,8,8,0,16,4]}`, "element 9: want an unsigned integer"},
		{`{"v":1,"op":"register_region","memory":1,"perm":32,"key":"` + testKeyHex + `","layout":[256,32,0,8,8,8,0,16,4,0,1]}`, "no more"},
		{`{"v":1,"op":"register_region","memory":1,"perm":32,"key":"` + testKeyHex + `","layout":256}`, "want an array"},
		{`{"v":1,"op":"register_region","memory":1,"perm":32,"key":"` + testKeyHex + `","layout":[256,32,0,8,8,8,0,16,-4,0]}`, "element 8"},
		{`{"v":1,"op":"register_region","memory":1,"perm":32,"key":"` + testKeyHex + `","layout":[256,32,0,8,8,8,0,16,4,4294967296]}`, "element 9: want an unsigned 32-bit integer"},
		{`{"v":1,"op":"register_region","memory":1,"perm":32,"key":"` + testKeyHex + `","layout":[256,32,0,8,8,8,0,16,"4",0]}`, "element 8"},
		{`{"v":1,"op":"register_region","memory":1,"perm":32,"key":"` + testKeyHex + `","layout":[8192,32,0,8,8,8,0,16,4,0]}`, "bucket size not in 1..4096"},
		{`{"v":1,"op":"register_region","memory":1,"perm":32,"key":"` + testKeyHex + `","layout":[256,32,0,3,8,8,0,16,4,0]}`, "field width not 1, 2, 4 or 8"},
		{`{"v":1,"op":"register_region","memory":1,"perm":32,"key":"` + testKeyHex + `","layout":[256,32,0,8,28,8,0,16,4,0]}`, "field outside the entry"},
		{`{"v":1,"op":"register_region","memory":1,"perm":32,"key":"` + testKeyHex + `","layout":[256,32,0,8,8,8,33,16,4,0]}`, "pointer shift above 32"},
		{`{"v":1,"op":"create_region","size":4096,"layout":[256,32,0,8,8,8,0,16,4,0]}`, `key "layout" is not allowed in op "create_region"`},
		{`{"v":1,"op":"register_region","memory":1,"perm":0,"key":"` + testKeyHex + `"}`, "out of range"},
		{`{"v":1,"op":"rekey","region":1}`, `needs key "key"`},
		{`{"v":1,"op":"moderate","count":16}`, `op "moderate" needs key "period_us"`},
		{`{"v":1,"op":"moderate","period_us":50}`, `op "moderate" needs key "count"`},
		{`{"v":1,"op":"moderate","count":0,"period_us":50}`, `key "count": 0 out of range [1, 65536]`},
		{`{"v":1,"op":"moderate","count":16,"period_us":1001}`, `key "period_us": 1001 out of range [0, 1000]`},
		{`{"v":1,"op":"doorbell","count":16}`, `key "count" is not allowed in op "doorbell"`},
		{`{"v":1,"op":"rekey","key":"` + testKeyHex + `"}`, `needs key "region"`},
		{`{"v":1,"op":"rekey","region":0,"key":"` + testKeyHex + `"}`, "out of range"},
		{`{"v":1,"op":"rekey","region":1,"key":"` + testKeyHex[:31] + `"}`, "want 32 lowercase hex digits, got 31 bytes"},
		{`{"v":1,"op":"rekey","region":1,"key":"` + testKeyHex + `0"}`, "got 33 bytes"},
		{`{"v":1,"op":"rekey","region":1,"key":""}`, "got 0 bytes"},
		{`{"v":1,"op":"rekey","region":1,"key":"00112233445566778899AABBCCDDEEFF"}`, "lowercase hex digits only"},
		{`{"v":1,"op":"rekey","region":1,"key":"0011223344556677 899aabbccddeeff"}`, "lowercase hex digits only"},
		{`{"v":1,"op":"rekey","region":1,"key":"0x112233445566778899aabbccddeeff"}`, "lowercase hex digits only"},
		{`{"v":1,"op":"rekey","region":1,"key":"00000000000000000000000000000000"}`, "all-zero key"},
		{`{"v":1,"op":"rekey","region":1,"key":1234}`, "want a string"},
		{`{"v":1,"op":"rekey","region":1,"key":["` + testKeyHex + `"]}`, "want a string"},
		{`{"v":1,"op":"rekey","region":1,"key":"` + testKeyHex + `","key":"` + testKeyHex + `"}`, `duplicate key "key"`},
		{`{"v":1,"op":"stats","key":"` + testKeyHex + `"}`, `key "key" is not allowed in op "stats"`},
		{`{"v":1,"op":"deregister_region","region":1,"key":"` + testKeyHex + `"}`, `key "key" is not allowed`},
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
	valid := `{"v":1,"id":9,"op":"register_region","memory":4096,"perm":3,"key":"` + testKeyHex + `"}`
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

// TestKeyNeverShown: a request holding a key, and every decode error
// about a key, show none of the key's digits: requests and errors are
// safe to log.
func TestKeyNeverShown(t *testing.T) {
	r, err := DecodeRequest([]byte(`{"v":1,"op":"rekey","region":7,"key":"` + testKeyHex + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Key != testKey {
		t.Fatalf("key decoded to %x", [KeySize]byte(r.Key))
	}
	js, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	shown := []string{
		fmt.Sprint(r), fmt.Sprintf("%v", r), fmt.Sprintf("%+v", r), fmt.Sprintf("%#v", r),
		fmt.Sprintf("%x", r.Key), fmt.Sprintf("%X", r.Key), fmt.Sprintf("%s", r.Key), fmt.Sprintf("%d", r.Key),
		fmt.Sprintf("%q", r.Key), r.Key.String(), string(js),
		fmt.Errorf("wrapped: %v", r).Error(),
	}
	for _, s := range shown {
		if strings.Contains(strings.ToLower(s), testKeyHex[4:20]) || strings.Contains(s, "17 34 51") || strings.Contains(s, "0x11") {
			t.Errorf("key shown: %s", s)
		}
		if !strings.Contains(s, "[redacted]") {
			t.Errorf("no redaction mark: %s", s)
		}
	}
	// Malformed keys: the error names the problem, never the value.
	for _, bad := range []string{
		testKeyHex[:30], testKeyHex + "00", strings.ToUpper(testKeyHex), "g" + testKeyHex[1:],
		testKeyHex[:16] + " " + testKeyHex[17:],
	} {
		for _, req := range []string{
			`{"v":1,"op":"rekey","region":7,"key":"` + bad + `"}`,
			`{"v":1,"op":"register_region","memory":64,"perm":1,"key":"` + bad + `"}`,
		} {
			_, err := DecodeRequest([]byte(req))
			if err == nil {
				t.Fatalf("accepted %s", req)
			}
			if strings.Contains(strings.ToLower(err.Error()), testKeyHex[2:10]) {
				t.Errorf("error quotes the key: %v", err)
			}
		}
	}
	// A well-formed key where none is allowed: refused without quoting it.
	_, err = DecodeRequest([]byte(`{"v":1,"op":"stats","key":"` + testKeyHex + `"}`))
	if err == nil || strings.Contains(err.Error(), testKeyHex[2:10]) {
		t.Errorf("stats with a key: %v", err)
	}
}

func TestEncodeRequestKey(t *testing.T) {
	r := Request{V: 1, ID: 2, Op: OpRegisterRegion, Memory: 64, Perm: 4, Key: testKey}
	want := `{"v":1,"id":2,"op":"register_region","memory":64,"perm":4,"key":"` + testKeyHex + `"}`
	if got := string(EncodeRequest(&r)); got != want {
		t.Fatalf("EncodeRequest = %s, want %s", got, want)
	}
	r = Request{V: 1, Op: OpRekey, Region: 9, Key: testKey}
	want = `{"v":1,"op":"rekey","region":9,"key":"` + testKeyHex + `"}`
	if got := string(EncodeRequest(&r)); got != want {
		t.Fatalf("EncodeRequest = %s, want %s", got, want)
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for _, in := range []Response{
		{V: Version, ID: 3, Op: OpOpen, Open: &OpenReply{
			Size: 8192, MapSize: 8192, CmdCap: 64, CplCap: 128, Class: abi.ClassHigh.String(), MaxSlots: 32,
			Identity: Identity{Addr: "10.0.0.1", PID: 4194304, UID: 1000, GID: 1000, Name: "x", Tenant: "main uid 1000"},
		}},
		{V: Version, ID: 7, Op: OpAttach, Attach: &AttachReply{Portal: 2}},
		{V: Version, ID: 8, Op: OpCreateRegion, Memory: &MemoryReply{Memory: 3, Size: 5000, MapSize: 8192}},
		{V: Version, ID: 9, Op: OpCreateRegion, Code: CodeQuota, Quota: QuotaMemoryBytes, Error: `create_region: tenant "main uid 1000" holds ...`},
		{V: Version, ID: 11, Op: OpCreateRegion, Code: CodeQuota, Quota: QuotaRegions, Error: `create_region: tenant "main uid 1000" holds 14 regions; ...`},
		{V: Version, ID: 4, Op: OpOpen, Code: CodeClass, Error: `open: portal "x" asks for class high`},
		{V: Version, ID: 5, Op: OpStats, Stats: &Stats{Posted: 9, Completed: map[string]uint64{"OK": 9}, Fault: &FaultStats{
			Rx:   FaultDirStats{Frames: 100, Passed: 90, Dropped: 5, Duplicated: 2, Delayed: 3, Reordered: 2, Released: 7, PoolEmpty: 1},
			Tx:   FaultDirStats{Frames: 50, Passed: 50, Deferred: 1, Overflow: 2, NoBuffer: 3},
			Held: 4,
		}}},
		{V: Version, ID: 6, Op: OpStats, Stats: &Stats{Posted: 1, Completed: map[string]uint64{}}},
		{V: Version, ID: 10, Op: OpStats, Stats: &Stats{Completed: map[string]uint64{}, Tenants: []TenantStats{
			{Name: "main uid 0", Socket: "/run/onerma/rmad.sock", UID: new(int64),
				TenantUsage: TenantUsage{Conns: 2, MemoryBytes: 4 << 20, HugepageBytes: 2 << 20, Portals: 1, Slots: 16, Regions: 3},
				Quota:       TenantUsage{Conns: 64, MemoryBytes: 1 << 30, HugepageBytes: 256 << 20, Portals: 32, Slots: 512, Regions: 512},
				Guarantee:   TenantUsage{Conns: 4, MemoryBytes: 64 << 20, HugepageBytes: 8 << 20, Portals: 2, Slots: 64, Regions: 16},
				Datapath: &TenantDatapath{Posted: 100, ShareWaits: 3, ShareDispatchTimeouts: 1, Borrowed: 20, BorrowedBytes: 81920,
					WindowHeld: 8192, WindowShare: 131072, Queued: 2}},
			{Name: "web", Socket: "/run/onerma/web.sock"},
		}}},
	} {
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
	}
	// An engine without a fault-injecting port sends no "fault" key (and
	// clients that predate it ignore the key when it is there).
	if b, _ := EncodeResponse(&Response{V: Version, Stats: &Stats{}}); strings.Contains(string(b), `"fault"`) {
		t.Errorf("stats without fault counters: %s", b)
	}
	if b, _ := EncodeResponse(&Response{V: Version, Stats: &Stats{Fault: &FaultStats{Rx: FaultDirStats{Dropped: 7}}}}); !strings.Contains(string(b), `"fault":{"rx":{"frames":0,"passed":0,"dropped":7,`) {
		t.Errorf("fault counters render as %s", b)
	}
	b, _ := EncodeResponse(&Response{V: Version, Open: &OpenReply{Class: abi.ClassLow.String()}})
	if !strings.Contains(string(b), `"class":"low"`) {
		t.Errorf("open reply %s: class not under its key", b)
	}
	if b, _ := EncodeResponse(&Response{V: Version, Code: CodeClass, Error: "e"}); !strings.Contains(string(b), `"code":"class"`) {
		t.Errorf("CodeClass renders as %s", b)
	}
	for _, bad := range []string{`{"v":2}`, `{"v":1,"error":"x"}`, `{"v":1,"code":"x"}`, `{"v":1}{}`, `nope`} {
		if _, err := DecodeResponse([]byte(bad)); err == nil {
			t.Errorf("DecodeResponse(%s) accepted", bad)
		}
	}
}

// BenchmarkDecodeRequest: a rekey request (the driver path's), decoded by
// DecodeRequest (its flat path) and by the tokenizer's path alone.
func BenchmarkDecodeRequest(b *testing.B) {
	enc := EncodeRequest(&Request{V: Version, ID: 7, Op: OpRekey, Region: 65537, Key: Key{1, 2, 3}})
	for _, c := range []struct {
		name string
		dec  func([]byte) (Request, error)
	}{{"flat", DecodeRequest}, {"tokens", decodeTokens}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.dec(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeResponse: a rekey's reply, decoded by DecodeResponse
// (its flat path) and by encoding/json alone.
func BenchmarkDecodeResponse(b *testing.B) {
	enc, err := EncodeResponse(&Response{V: Version, ID: 7, Op: OpRekey})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		dec  func([]byte) (Response, error)
	}{{"flat", DecodeResponse}, {"json", decodeResponse}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.dec(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
