//go:build !(cgo && linux && amd64)

package engine

import "errors"

// mbBuilt: aesni/mb (cgo, intel-ipsec-mb) is not part of this build, so
// Config.Validate refuses CryptoIPsecMB and every core seals with
// goSealer.
const mbBuilt = false

var errNoMB = errors.New("ipsec-mb not built in")

// newMBCrypto refuses: Config.Validate has already refused CryptoIPsecMB.
func newMBCrypto(c *Core) (batchCrypto, error) { return nil, errNoMB }

// MBArch reports ipsec-mb's code path; here there is none.
func MBArch() (string, error) { return "", errNoMB }
