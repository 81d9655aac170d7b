//go:build !(cgo && linux && amd64)

package engine

import (
	"errors"

	"github.com/onerma/onerma/aesni"
)

// mbBuilt: aesni/mb (cgo, intel-ipsec-mb) is not part of this build;
// Config.Validate refuses CryptoIPsecMB, so c.mb is always nil.
const mbBuilt = false

type mbSealer struct{}

func (c *Core) mbSetup() error { return errors.New("ipsec-mb not built in") }

func (c *Core) mbSealRequest(a *aesni.AEAD, tag, nonce, aad []byte) { panic("engine: no ipsec-mb") }

func (c *Core) mbSealResponse(a *aesni.AEAD, out, plaintext, nonce, aad, reqIV []byte) {
	panic("engine: no ipsec-mb")
}

func (c *Core) mbSealAuthFailure(tag, nonce, aad, reqIV []byte) { panic("engine: no ipsec-mb") }

func (c *Core) mbRun() {}

func (c *Core) mbRegister(mem []byte) {}

func (c *Core) mbUnregister(mem []byte) {}

func (c *Core) mbQueueOpen(w *rxWork) bool { panic("engine: no ipsec-mb") }

func (c *Core) mbRunOpens() {}

func (c *Core) mbOpenOK(i int) bool { panic("engine: no ipsec-mb") }

// MBArch reports ipsec-mb's code path; here there is none.
func MBArch() (string, error) { return "", errors.New("ipsec-mb not built in") }
