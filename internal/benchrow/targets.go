package benchrow

// The speed targets (issue 32), shared by rmabench's headline table and
// rmad -selftest -profile's stage budgets.
const (
	// ReadRateLoopback: 64 B READs on the loopback engine, one core doing
	// both roles of every op (rmad -selftest), ops per second.
	ReadRateLoopback = 4.0e6
	// ReadRatePerRole: 64 B READs between two engines, one core each
	// (rmad -selftest over memif), ops per second of each role.
	ReadRatePerRole = 5.0e6
	// ReadGoodput and ReadGoodputJumbo: a 4 KB READ's goodput on one
	// loopback core over the same run's one-core 4 KB seal+open rate
	// (aes-gcm-limit), at the Ethernet MTU and with jumbo frames (9000);
	// WriteGoodput: a 4 KB WRITE's, at either.
	ReadGoodput      = 0.55
	ReadGoodputJumbo = 0.70
	WriteGoodput     = 0.60
)
