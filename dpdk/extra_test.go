package dpdk_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/dpdk/dpdktest"
)

// TestExtraPorts is an opt-in smoke test of kernel-backed and
// multi-process vdevs, which need host set-up this package cannot assume
// (TUN, veth pairs, a memif peer). Give the devices through the EAL and
// name them, e.g.
//
//	ip link add veth0 type veth peer name veth1
//	ip link set veth0 up; ip link set veth1 up
//	ONERMA_EAL_ARGS="--vdev=net_af_packet0,iface=veth0 --vdev=net_af_packet1,iface=veth1 --vdev=net_tap0" \
//	ONERMA_TEST_PORTS="net_af_packet0 net_af_packet1 net_tap0" \
//	ONERMA_TEST_PAIR="net_af_packet0,net_af_packet1" go test -run ExtraPorts -v ./dpdk
//
// Each named port is set up, and its info, link and MAC read; with
// ONERMA_TEST_PAIR="a,b", frames sent on a must arrive on b.
func TestExtraPorts(t *testing.T) {
	names := strings.Fields(os.Getenv("ONERMA_TEST_PORTS"))
	if len(names) == 0 {
		t.Skip("opt-in: set ONERMA_TEST_PORTS (and ONERMA_EAL_ARGS) to test kernel-backed vdevs")
	}
	dpdktest.Require(t)
	for _, name := range names {
		port, _ := dpdktest.Port(t, name)
		info, err := port.Info()
		if err != nil {
			t.Fatal(err)
		}
		link, err := port.Link()
		if err != nil {
			t.Fatal(err)
		}
		mac, err := port.MACAddr()
		if err != nil {
			t.Fatal(err)
		}
		mtu, _ := port.MTU()
		t.Logf("%s: port %d, driver %s, link %+v, mac % x, mtu %d", name, port, info.Driver, link, mac, mtu)
	}
	pair := strings.Split(os.Getenv("ONERMA_TEST_PAIR"), ",")
	if len(pair) != 2 {
		return
	}
	from, pool := dpdktest.Port(t, pair[0])
	to, _ := dpdktest.Port(t, pair[1])
	b, err := dpdk.NewBurst(32)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	// Frames with a local experimental EtherType (0x88b5), so kernel
	// chatter on the link (IPv6 ND, LLDP) is told apart.
	const frames = 16
	if !dpdk.AllocBurst(pool, b, 0, frames) {
		t.Fatal("AllocBurst failed")
	}
	for i, m := range b.Mbufs[:frames] {
		f := m.Room()[:64]
		copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1, 0x88, 0xb5})
		for j := 14; j < 64; j++ {
			f[j] = byte(i + j)
		}
		m.SetLen(64)
	}
	sent := 0
	for tries := 0; sent < frames && tries < 1000; tries++ {
		sent += dpdk.TxBurst(from, 0, b, sent, frames-sent)
	}
	if sent != frames {
		dpdk.FreeBurst(b, sent, frames-sent)
		t.Fatalf("sent %d of %d", sent, frames)
	}
	got := 0
	deadline := time.Now().Add(2 * time.Second)
	for got < frames && time.Now().Before(deadline) {
		n := dpdk.RxBurst(to, 0, b, 0, 32)
		for _, m := range b.Mbufs[:n] {
			if d := m.Data(); len(d) >= 64 && d[12] == 0x88 && d[13] == 0xb5 {
				got++
			}
		}
		dpdk.FreeBurst(b, 0, n)
		time.Sleep(time.Millisecond)
	}
	if got != frames {
		t.Fatalf("%s -> %s: %d of %d frames arrived", pair[0], pair[1], got, frames)
	}
}
