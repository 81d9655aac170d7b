package ctlmsg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/onerma/onerma/abi"
)

// Version is the protocol version every request and response carries.
const Version = 1

// DefaultSocket is the engine's control socket unless its configuration
// names another: rmad listens on it, and the tools and applications dial
// it by default.
const DefaultSocket = "/run/onerma/rmad.sock"

// Size limits of one datagram.
const (
	// MaxRequestBytes bounds a request; the engine rejects (and reports)
	// longer datagrams.
	MaxRequestBytes = 4096
	// MaxResponseBytes bounds a response (stats is the largest).
	MaxResponseBytes = 64 << 10
)

// Value limits a request is checked against.
const (
	// MaxNameBytes bounds a portal name.
	MaxNameBytes = 64
	// MaxAllocSlots bounds one alloc_slots request (the engine's policy
	// usually caps far lower).
	MaxAllocSlots = 1 << 16
	// MaxRingCap bounds the command and completion ring capacities an
	// application may ask for.
	MaxRingCap = 1 << 16
	// MaxRegionBytes bounds one region (the engine's RRT limit is 2^40).
	MaxRegionBytes = 1 << 40
	// MaxCores bounds an engine's cores (wire.MaxCores): open's core is
	// below it.
	MaxCores = 64
	// MaxModerationUs bounds moderate's period_us (engine.MaxModerationPeriod).
	MaxModerationUs = 1000
)

// Op names a control operation.
type Op string

const (
	// OpOpen opens this connection's portal (at most one per connection):
	// the engine applies its policy to the peer's credentials, creates the
	// portal segment and returns it as a file descriptor. The portal is
	// usable once the application has mapped the segment and sent
	// OpAttach.
	OpOpen Op = "open"
	// OpAttach tells the engine the application has mapped the portal
	// segment: the engine seals it against hole punching, maps it, starts
	// serving its rings and writes the segment header.
	OpAttach Op = "attach"
	// OpAllocSlots gives the portal N more command slots.
	OpAllocSlots Op = "alloc_slots"
	// OpCreateRegion creates Size bytes of shared memory for a region,
	// charged to the tenant's quota, and returns them as a file
	// descriptor. The application maps them and faults every page in (it
	// is charged for them), then registers them with OpRegisterRegion. A
	// connection holds at most one such memory at a time: a second
	// create_region discards the first.
	OpCreateRegion Op = "create_region"
	// OpRegisterRegion registers the memory of the last create_region
	// (named by its Memory handle) as a region: the engine seals it
	// against hole punching, checks every page is in memory, maps and
	// locks it, and enters it in its region table.
	OpRegisterRegion Op = "register_region"
	// OpDeregisterRegion invalidates a region; the engine never touches
	// its memory again.
	OpDeregisterRegion Op = "deregister_region"
	// OpIdentity returns the address and PID the engine stamps on this
	// connection's requests.
	OpIdentity Op = "identity"
	// OpStats returns the engine's counters.
	OpStats Op = "stats"
	// OpRekey replaces the region key K_r of one of this portal's regions
	// (the local rekey of paper §5.2): requests that arrive afterwards
	// authenticate only with keys derived from the new K_r.
	OpRekey Op = "rekey"
	// OpDoorbell attaches a completion doorbell to the portal and returns
	// it as an eventfd: the engine writes to it when it publishes
	// completions and the application has armed the segment's arm word
	// (abi.SegmentArmOff), so the application can sleep instead of spin.
	OpDoorbell Op = "doorbell"
	// OpSummary returns the summary doorbell of the core that serves the
	// portal as a memfd (abi.Summary: one bit per portal of the core, in
	// a page every application of the core maps): an application that
	// maps it, stores abi.SummaryOn in its segment's summary flag word
	// (abi.SegmentSummaryOff) and rings its bit after every publication
	// of its command ring has that ring read only when it rang (and in
	// the engine's fallback scans). An engine older than it refuses it
	// (bad_request), and the application goes on without it.
	OpSummary Op = "summary"
	// OpModerate moderates the portal's completion doorbell (OpDoorbell),
	// as ibv_modify_cq moderates a completion queue's events: once armed,
	// the engine rings when count completions are unread, or period_us
	// after the first completion it held the ring back for, whichever is
	// first. count 1 and period_us 0 ring at every publication (the
	// default). An engine older than it refuses it (bad_request).
	OpModerate Op = "moderate"
)

// Request is one control request. Which fields are allowed, and required,
// depends on Op:
//
//	open               name (required), cmd_cap, cpl_cap, class, core (optional)
//	attach             nothing else
//	alloc_slots        n (required)
//	create_region      size (required)
//	register_region    memory, perm, key (required), layout (optional)
//	deregister_region  region (required)
//	rekey              region, key (required)
//	identity, stats    nothing else
//	doorbell, summary  nothing else
//	moderate           count, period_us (required)
//
// v (== Version) and op are required in every request; id is optional and
// echoed in the response.
//
// layout is a region's bucket layout, for LOOKUPs: an array of the ten
// unsigned integers of abi.BucketLayout in its field order (bucket_bytes,
// entry_bytes, tag_off, tag_width, ptr_off, ptr_width, ptr_shift, len_off,
// len_width, linked), valid (abi.BucketLayout.Validate). The engine
// registers a region with a layout exactly when its perm holds
// abi.PermRemoteLookup, and checks the layout against the regions.
//
// key is a region key K_r: exactly KeyHexLen lowercase hex digits, not all
// zero. It is secret: Key formats as "[redacted]" (fmt, JSON), and no
// decode error quotes it, so a Request or an error may be logged.
type Request struct {
	V  uint32
	ID uint64
	Op Op

	Name   string // open: [A-Za-z0-9._-], 1..MaxNameBytes bytes
	CmdCap uint32 // open: command ring capacity, power of two 2..MaxRingCap; 0: engine default
	CplCap uint32 // open: completion ring capacity, like CmdCap
	Class  string // open: "low" or "high"; "": low. The engine's policy must grant it (else CodeClass)
	// open: PinCore asks for the engine core Core (0 .. MaxCores-1; the
	// engine refuses one it does not have) to serve the portal, key
	// "core"; without it the engine picks its least loaded core. An
	// application that wants several cores opens several portals.
	PinCore bool
	Core    uint32

	N uint32 // alloc_slots: 1..MaxAllocSlots

	Size   uint64   // create_region: 1..MaxRegionBytes
	Memory uint32   // register_region: the handle create_region returned, non-zero
	Perm   abi.Perm // register_region: non-zero subset of abi.PermAny
	// Layout is register_region's bucket layout (zero: none; a valid one
	// has BucketBytes >= 1).
	Layout abi.BucketLayout

	Region uint32 // deregister_region, rekey: non-zero region id

	Key Key // register_region, rekey: the region key K_r, not all zero

	Count    uint32 // moderate: completions unread before the doorbell rings, 1..MaxRingCap
	PeriodUs uint32 // moderate: the longest the ring is held back, 0..MaxModerationUs
}

// KeySize is the size of a region key K_r in bytes (AES-128), and
// KeyHexLen its length on the wire.
const (
	KeySize   = 16
	KeyHexLen = 2 * KeySize
)

// Key is a region key K_r (the same bytes as aesni.Key). It never shows
// in logs: every fmt verb and JSON render it as "[redacted]". EncodeRequest
// is the one place that writes its value.
type Key [KeySize]byte

const redacted = "[redacted]"

// String hides the key.
func (Key) String() string { return redacted }

// GoString hides the key (%#v).
func (Key) GoString() string { return redacted }

// Format hides the key under every verb (%x, %v, %d, ...).
func (Key) Format(f fmt.State, verb rune) { io.WriteString(f, redacted) }

// MarshalJSON hides the key (zerolog's Interface, json.Marshal).
func (Key) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText hides the key.
func (Key) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// IsZero reports an all-zero key (never a valid K_r on the wire).
func (k Key) IsZero() bool { return k == Key{} }

// ErrRequest wraps every DecodeRequest failure.
var ErrRequest = errors.New("ctl: bad request")

// key bits, to detect duplicates and keys foreign to an op.
const (
	kV uint32 = 1 << iota
	kID
	kOp
	kName
	kCmdCap
	kCplCap
	kClass
	kN
	kSize
	kPerm
	kRegion
	kKey
	kMemory
	kCore
	kLayout
	kCount
	kPeriodUs
)

var keyBits = map[string]uint32{
	"v": kV, "id": kID, "op": kOp, "name": kName, "cmd_cap": kCmdCap, "cpl_cap": kCplCap,
	"class": kClass, "n": kN, "size": kSize, "perm": kPerm, "region": kRegion,
	"key": kKey, "memory": kMemory, "core": kCore, "layout": kLayout,
	"count": kCount, "period_us": kPeriodUs,
}

// opKeys: keys allowed (beyond v, id, op) and required per op.
var opKeys = map[Op]struct{ allowed, required uint32 }{
	OpOpen:             {kName | kCmdCap | kCplCap | kClass | kCore, kName},
	OpAttach:           {0, 0},
	OpAllocSlots:       {kN, kN},
	OpCreateRegion:     {kSize, kSize},
	OpRegisterRegion:   {kMemory | kPerm | kKey | kLayout, kMemory | kPerm | kKey},
	OpDeregisterRegion: {kRegion, kRegion},
	OpRekey:            {kRegion | kKey, kRegion | kKey},
	OpIdentity:         {0, 0},
	OpStats:            {0, 0},
	OpDoorbell:         {0, 0},
	OpSummary:          {0, 0},
	OpModerate:         {kCount | kPeriodUs, kCount | kPeriodUs},
}

func keyName(bit uint32) string {
	for k, b := range keyBits {
		if b == bit {
			return k
		}
	}
	return "?"
}

// DecodeRequest parses and validates one request datagram. On error the
// returned request is the zero value and the error (wrapping ErrRequest)
// names the offending key or byte offset.
func DecodeRequest(b []byte) (Request, error) {
	r, err := decodeRequest(b)
	if err != nil {
		return Request{}, fmt.Errorf("%w: %v", ErrRequest, err)
	}
	return r, nil
}

func decodeRequest(b []byte) (Request, error) {
	var r Request
	if len(b) > MaxRequestBytes {
		return r, fmt.Errorf("%d bytes, limit %d", len(b), MaxRequestBytes)
	}
	if r, ok := decodeFlat(b); ok {
		return r, nil
	}
	return decodeTokens(b)
}

// decodeTokens decodes a request with encoding/json's tokenizer: any JSON
// object, every error named.
func decodeTokens(b []byte) (Request, error) {
	var r Request
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		return r, fmt.Errorf("not JSON: %v", err)
	}
	if tok != json.Delim('{') {
		return r, errors.New("not a JSON object")
	}
	var seen uint32
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return r, fmt.Errorf("at byte %d: %v", d.InputOffset(), err)
		}
		key, ok := tok.(string)
		if !ok {
			return r, fmt.Errorf("at byte %d: key is not a string", d.InputOffset())
		}
		bit, ok := keyBits[key]
		if !ok {
			return r, fmt.Errorf("unknown key %q", trunc(key))
		}
		if seen&bit != 0 {
			return r, fmt.Errorf("duplicate key %q", key)
		}
		seen |= bit
		if bit == kLayout {
			if err := r.setLayout(d); err != nil {
				return r, fmt.Errorf("key %q: %v", key, err)
			}
			continue
		}
		val, err := d.Token()
		if err != nil {
			return r, fmt.Errorf("key %q: %v", key, err)
		}
		if err := r.set(bit, val); err != nil {
			return r, fmt.Errorf("key %q: %v", key, err)
		}
	}
	if tok, err := d.Token(); err != nil || tok != json.Delim('}') {
		return r, fmt.Errorf("at byte %d: unterminated object", d.InputOffset())
	}
	if _, err := d.Token(); err != io.EOF {
		return r, fmt.Errorf("trailing data after the object at byte %d", d.InputOffset())
	}
	return r, r.check(seen)
}

// check validates a request whose keys (seen) were each set: the version,
// and the keys its op allows and needs.
func (r *Request) check(seen uint32) error {
	if seen&kV == 0 {
		return errors.New(`missing key "v"`)
	}
	if r.V != Version {
		return fmt.Errorf(`key "v": version %d, this engine speaks %d`, r.V, Version)
	}
	if seen&kOp == 0 {
		return errors.New(`missing key "op"`)
	}
	keys := opKeys[r.Op] // set() already rejected unknown ops
	if extra := seen &^ (kV | kID | kOp | keys.allowed); extra != 0 {
		return fmt.Errorf("key %q is not allowed in op %q", keyName(extra&-extra), r.Op)
	}
	if missing := keys.required &^ seen; missing != 0 {
		return fmt.Errorf("op %q needs key %q", r.Op, keyName(missing&-missing))
	}
	return nil
}

// decodeFlat decodes the requests clients send (EncodeRequest's form: one
// flat object of strings and unsigned numbers, strings of printable ASCII
// without escapes, JSON's whitespace between tokens) without
// encoding/json's tokenizer, which costs a control call microseconds. It
// reports false for anything else and for any error, leaving both to the
// tokenizer's path, so that what it accepts, and every error's text, are
// that path's (FuzzDecodeFlat compares them).
func decodeFlat(b []byte) (Request, bool) {
	if r, ok := scanFlat(b); ok {
		return r, true
	}
	return Request{}, false
}

// scanFlat is decodeFlat; the request it returns with false is partial.
func scanFlat(b []byte) (Request, bool) {
	var r Request
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return r, false
	}
	i = skipSpace(b, i+1)
	var seen uint32
	for first := true; ; first = false {
		if i < len(b) && b[i] == '}' && first {
			break
		}
		k0, k1, ok := flatString(b, i)
		if !ok {
			return r, false
		}
		bit, known := keyBits[string(b[k0:k1])]
		if !known || seen&bit != 0 {
			return r, false
		}
		seen |= bit
		i = skipSpace(b, k1+1)
		if i == len(b) || b[i] != ':' {
			return r, false
		}
		i = skipSpace(b, i+1)
		var val json.Token
		if v0, v1, ok := flatString(b, i); ok {
			val, i = string(b[v0:v1]), v1+1
		} else if n := flatNumber(b, i); n > i {
			val, i = json.Number(b[i:n]), n
		} else {
			return r, false
		}
		if r.set(bit, val) != nil {
			return r, false
		}
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			break
		}
		return r, false
	}
	return r, skipSpace(b, i+1) == len(b) && r.check(seen) == nil
}

// skipSpace returns the index of the first byte at or after i that is
// not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// flatString reports the bounds of the contents of the string that starts
// at b[i], for a string of printable ASCII other than a backslash.
func flatString(b []byte, i int) (start, end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return i + 1, j, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return 0, 0, false
		}
	}
	return 0, 0, false
}

// flatNumber returns the end of the JSON number that starts at b[i] (-?,
// an integer part without leading zeros, an optional fraction and
// exponent), or i if none does.
func flatNumber(b []byte, i int) int {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	digits := func(j int) int {
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
		return j
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && '1' <= b[j] && b[j] <= '9':
		j = digits(j)
	default:
		return i
	}
	if j < len(b) && b[j] == '.' {
		k := digits(j + 1)
		if k == j+1 {
			return i
		}
		j = k
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		k := digits(j)
		if k == j {
			return i
		}
		j = k
	}
	return j
}

// setLayout reads the layout array (ten unsigned integers) from d and
// checks it.
func (r *Request) setLayout(d *json.Decoder) error {
	if tok, err := d.Token(); err != nil || tok != json.Delim('[') {
		return errors.New("want an array of 10 unsigned integers")
	}
	var v [10]uint32
	for i := range v {
		tok, err := d.Token()
		num, ok := tok.(json.Number)
		if err != nil || !ok {
			return fmt.Errorf("element %d: want an unsigned integer", i)
		}
		x, err := strconv.ParseUint(string(num), 10, 32)
		if err != nil {
			return fmt.Errorf("element %d: want an unsigned 32-bit integer, got %s", i, trunc(string(num)))
		}
		v[i] = uint32(x)
	}
	if tok, err := d.Token(); err != nil || tok != json.Delim(']') {
		return errors.New("want an array of 10 unsigned integers, no more")
	}
	l := abi.BucketLayout{BucketBytes: v[0], EntryBytes: v[1], TagOff: v[2], TagWidth: v[3], PtrOff: v[4], PtrWidth: v[5],
		PtrShift: v[6], LenOff: v[7], LenWidth: v[8], Linked: abi.RegionID(v[9])}
	if err := l.Validate(); err != nil {
		return err
	}
	r.Layout = l
	return nil
}

// set stores one value after checking its type and range.
func (r *Request) set(bit uint32, val json.Token) error {
	if bit == kOp || bit == kName || bit == kClass || bit == kKey {
		s, ok := val.(string)
		if !ok {
			return errors.New("want a string")
		}
		switch bit {
		case kKey:
			// The error never quotes the value: it is a secret.
			k, err := parseKey(s)
			if err != nil {
				return err
			}
			r.Key = k
		case kOp:
			if _, ok := opKeys[Op(s)]; !ok {
				return fmt.Errorf("unknown op %q", trunc(s))
			}
			r.Op = Op(s)
		case kName:
			if err := ValidName(s); err != nil {
				return err
			}
			r.Name = s
		case kClass:
			if cl, ok := abi.ParseClass(s); !ok || s != cl.String() {
				return fmt.Errorf("class %q, want %q or %q", trunc(s), abi.ClassLow, abi.ClassHigh)
			}
			r.Class = s
		}
		return nil
	}
	num, ok := val.(json.Number)
	if !ok {
		return errors.New("want an unsigned decimal integer")
	}
	v, err := strconv.ParseUint(string(num), 10, 64)
	if err != nil {
		return fmt.Errorf("want an unsigned decimal integer, got %s", trunc(string(num)))
	}
	inRange := func(lo, hi uint64) error {
		if v < lo || v > hi {
			return fmt.Errorf("%d out of range [%d, %d]", v, lo, hi)
		}
		return nil
	}
	switch bit {
	case kV:
		if err := inRange(0, 1<<32-1); err != nil {
			return err
		}
		r.V = uint32(v)
	case kID:
		r.ID = v
	case kCmdCap, kCplCap:
		if err := inRange(2, MaxRingCap); err != nil {
			return err
		}
		if v&(v-1) != 0 {
			return fmt.Errorf("%d is not a power of two", v)
		}
		if bit == kCmdCap {
			r.CmdCap = uint32(v)
		} else {
			r.CplCap = uint32(v)
		}
	case kN:
		if err := inRange(1, MaxAllocSlots); err != nil {
			return err
		}
		r.N = uint32(v)
	case kCore:
		if err := inRange(0, MaxCores-1); err != nil {
			return err
		}
		r.PinCore, r.Core = true, uint32(v)
	case kSize:
		if err := inRange(1, MaxRegionBytes); err != nil {
			return err
		}
		r.Size = v
	case kPerm:
		if err := inRange(1, uint64(abi.PermAny)); err != nil {
			return err
		}
		r.Perm = abi.Perm(v)
	case kCount:
		if err := inRange(1, MaxRingCap); err != nil {
			return err
		}
		r.Count = uint32(v)
	case kPeriodUs:
		if err := inRange(0, MaxModerationUs); err != nil {
			return err
		}
		r.PeriodUs = uint32(v)
	case kRegion, kMemory:
		if err := inRange(1, 1<<32-1); err != nil {
			return err
		}
		if bit == kRegion {
			r.Region = uint32(v)
		} else {
			r.Memory = uint32(v)
		}
	default: // a key whose value is not a number (decodeFlat falls back)
		return errors.New("want a value of another kind")
	}
	return nil
}

// parseKey decodes a key: exactly KeyHexLen lowercase hex digits, not all
// zero. Errors describe the value without quoting any of it.
func parseKey(s string) (Key, error) {
	var k Key
	if len(s) != KeyHexLen {
		return k, fmt.Errorf("want %d lowercase hex digits, got %d bytes", KeyHexLen, len(s))
	}
	for i := 0; i < KeyHexLen; i += 2 {
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return Key{}, errors.New("want lowercase hex digits only (0-9 a-f)")
		}
		k[i/2] = hi<<4 | lo
	}
	if k.IsZero() {
		return Key{}, errors.New("an all-zero key is not accepted")
	}
	return k, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// ValidName checks a portal name: 1..MaxNameBytes of [A-Za-z0-9._-].
func ValidName(s string) error {
	if len(s) == 0 || len(s) > MaxNameBytes {
		return fmt.Errorf("name must be 1..%d bytes, got %d", MaxNameBytes, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("name has byte %#02x at %d; allowed: A-Z a-z 0-9 . _ -", c, i)
		}
	}
	return nil
}

// trunc keeps error strings bounded when they quote untrusted input.
func trunc(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// EncodeRequest renders r as the canonical datagram: v, id, op, then the
// op's fields, zero-valued optional fields left out. The result holds the
// key in clear (register_region, rekey): send it, never log it; clear it
// after use where that matters. It does not validate;
// DecodeRequest(EncodeRequest(r)) == r for every r DecodeRequest accepts.
func EncodeRequest(r *Request) []byte {
	b := make([]byte, 0, 128)
	b = append(b, `{"v":`...)
	b = strconv.AppendUint(b, uint64(r.V), 10)
	if r.ID != 0 {
		b = append(b, `,"id":`...)
		b = strconv.AppendUint(b, r.ID, 10)
	}
	b = append(b, `,"op":`...)
	b = strconv.AppendQuote(b, string(r.Op))
	num := func(k string, v uint64) {
		b = append(b, ',', '"')
		b = append(b, k...)
		b = append(b, '"', ':')
		b = strconv.AppendUint(b, v, 10)
	}
	key := func() {
		b = append(b, `,"key":"`...)
		b = appendKeyHex(b, &r.Key)
		b = append(b, '"')
	}
	switch r.Op {
	case OpOpen:
		b = append(b, `,"name":`...)
		b = strconv.AppendQuote(b, r.Name)
		if r.CmdCap != 0 {
			num("cmd_cap", uint64(r.CmdCap))
		}
		if r.CplCap != 0 {
			num("cpl_cap", uint64(r.CplCap))
		}
		if r.Class != "" {
			b = append(b, `,"class":`...)
			b = strconv.AppendQuote(b, r.Class)
		}
		if r.PinCore {
			num("core", uint64(r.Core))
		}
	case OpAllocSlots:
		num("n", uint64(r.N))
	case OpCreateRegion:
		num("size", r.Size)
	case OpRegisterRegion:
		num("memory", uint64(r.Memory))
		num("perm", uint64(r.Perm))
		key()
		if l := &r.Layout; l.BucketBytes != 0 {
			b = append(b, `,"layout":[`...)
			for i, v := range [...]uint32{l.BucketBytes, l.EntryBytes, l.TagOff, l.TagWidth, l.PtrOff, l.PtrWidth, l.PtrShift, l.LenOff, l.LenWidth, uint32(l.Linked)} {
				if i > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendUint(b, uint64(v), 10)
			}
			b = append(b, ']')
		}
	case OpModerate:
		num("count", uint64(r.Count))
		num("period_us", uint64(r.PeriodUs))
	case OpDeregisterRegion:
		num("region", uint64(r.Region))
	case OpRekey:
		num("region", uint64(r.Region))
		key()
	}
	return append(b, '}')
}

// appendKeyHex appends k as KeyHexLen lowercase hex digits.
func appendKeyHex(b []byte, k *Key) []byte {
	const digits = "0123456789abcdef"
	for _, c := range k {
		b = append(b, digits[c>>4], digits[c&15])
	}
	return b
}
