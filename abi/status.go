package abi

// Status is the outcome carried by every Completion. The first five are the
// paper's Table 3; the rest are precise local and remote access errors for
// commands that name memory or resources they may not use.
type Status uint8

const (
	// StatusOK: the op completed and its data was transferred.
	StatusOK Status = 0
	// StatusRemoteAuthFailure: the serving engine could not authenticate
	// the request with the derived key (paper Table 3).
	StatusRemoteAuthFailure Status = 1
	// StatusNack: the serving engine's inbound request queue was above its
	// threshold; the window was refunded at once.
	StatusNack Status = 2
	// StatusTimeout: the op did not finish within TIMEOUT after entering
	// service (drop, partition, dead peer, congestion).
	StatusTimeout Status = 3
	// StatusDispatchTimeout: the op waited longer than DISPATCH_TIMEOUT for
	// room in the local solicitation window and never entered service.
	StatusDispatchTimeout Status = 4

	// StatusBadCommand: unknown op code or zero length.
	StatusBadCommand Status = 16
	// StatusTooLarge: length above MaxOpBytes.
	StatusTooLarge Status = 17
	// StatusBadSlot: the slot is not owned by this portal or already busy.
	// The completion names the slot and cookie as posted.
	StatusBadSlot Status = 18
	// StatusLocalRegion: the local region id is unknown, stale, or owned by
	// another portal.
	StatusLocalRegion Status = 19
	// StatusLocalBounds: local offset+length lies outside the local region.
	StatusLocalBounds Status = 20
	// StatusLocalPermission: the local region does not allow the access
	// the op needs (a READ must be able to write its sink).
	StatusLocalPermission Status = 21
	// StatusUnreachable: the remote engine's address could not be resolved
	// (no ARP answer, no static entry) within the resolve timeout.
	StatusUnreachable Status = 22
	// StatusAborted: the engine is shutting down; the op did not run.
	StatusAborted Status = 23
	// StatusEngineGone: the local engine went away (it exited, was
	// killed or restarted) before the op completed. No engine writes
	// it: the portal library reports it, once, for each op it posted
	// that got no completion from the engine. A READ's sink holds
	// undefined bytes, as after any failure. A WRITE or REKEY may have
	// been committed, as after TIMEOUT, and unlike after TIMEOUT it may
	// still be: data the dead engine had sent can reach the serving
	// engine, which commits until its own TIMEOUT after the pull.
	StatusEngineGone Status = 24

	// StatusRemoteRegion: the serving engine has no such region (unknown id
	// or stale generation). For a REKEY also: the region's key changed
	// (its owner's rekey, or another REKEY) after the request
	// authenticated, so the key it was asked under is no longer the
	// region's; its new key was not installed and never will be.
	StatusRemoteRegion Status = 32
	// StatusRemoteBounds: remote offset+length outside the remote region.
	StatusRemoteBounds Status = 33
	// StatusRemotePermission: the remote region does not allow this op.
	StatusRemotePermission Status = 34
	// StatusRemoteNotFound: a LOOKUP found no entry with its tag in the
	// bucket. With FlagLookupBucket, and when the bucket fits the
	// command's Length, the sink holds the bucket (the completion's
	// Length bytes); else the sink is untouched.
	StatusRemoteNotFound Status = 35
	// StatusRemoteLookupBounds: a LOOKUP's matched entry points outside
	// the region its pointers lead into (a corrupt or torn entry, or a
	// linked region that is gone): nothing of the target was read.
	StatusRemoteLookupBounds Status = 36
	// StatusRemoteLookupTooLarge: a LOOKUP's matched entry and its
	// target together exceed the command's Length: nothing was sent.
	StatusRemoteLookupTooLarge Status = 37
)

var statusNames = [...]string{
	StatusOK:                   "OK",
	StatusRemoteAuthFailure:    "REMOTE_AUTHENTICATION_FAILURE",
	StatusNack:                 "NACK",
	StatusTimeout:              "TIMEOUT",
	StatusDispatchTimeout:      "DISPATCH_TIMEOUT",
	StatusBadCommand:           "BAD_COMMAND",
	StatusTooLarge:             "TOO_LARGE",
	StatusBadSlot:              "BAD_SLOT",
	StatusLocalRegion:          "LOCAL_REGION",
	StatusLocalBounds:          "LOCAL_BOUNDS",
	StatusLocalPermission:      "LOCAL_PERMISSION",
	StatusUnreachable:          "UNREACHABLE",
	StatusAborted:              "ABORTED",
	StatusEngineGone:           "ENGINE_GONE",
	StatusRemoteRegion:         "REMOTE_REGION",
	StatusRemoteBounds:         "REMOTE_BOUNDS",
	StatusRemotePermission:     "REMOTE_PERMISSION",
	StatusRemoteNotFound:       "REMOTE_NOT_FOUND",
	StatusRemoteLookupBounds:   "REMOTE_LOOKUP_BOUNDS",
	StatusRemoteLookupTooLarge: "REMOTE_LOOKUP_TOO_LARGE",
}

// String returns the paper's name for s (e.g. "DISPATCH_TIMEOUT").
func (s Status) String() string {
	if int(s) < len(statusNames) && statusNames[s] != "" {
		return statusNames[s]
	}
	return "STATUS_" + itoa(int(s))
}

// IsRemote reports whether s was decided by the serving engine.
func (s Status) IsRemote() bool {
	return s == StatusRemoteAuthFailure || s == StatusNack || (s >= StatusRemoteRegion && s <= StatusRemoteLookupTooLarge)
}

// NumStatus bounds Status values; counters indexed by Status use it.
const NumStatus = 64

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[i:])
}
