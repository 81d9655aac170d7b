package ctl_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/onerma/onerma/abi"
)

// register_region with a layout: the engine takes PermRemoteLookup only
// with a layout and a layout only with it, checks the layout against the
// regions (the bucket fits, the linked region is the portal's own), and
// answers bad_request naming what is wrong; nothing is registered then.
func TestRegisterRegionLayout(t *testing.T) {
	e := setup(t, nil)
	other := dial(t, e, "other")
	foreign, err := other.RegisterRegion(4096, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	c := rawDial(t, e.sock)
	rawOpen(t, c, "owner")
	slab, _ := rawRegion(t, c, 4096, abi.PermRemoteRead)
	layout := func(bucket int, linked uint32) string {
		return fmt.Sprintf("[%d,32,0,8,8,8,0,16,4,%d]", bucket, linked)
	}
	for _, tc := range []struct {
		name string
		perm abi.Perm
		lay  string // "": none
		want string // "": registered
	}{
		{"lookup without a layout", abi.PermRemoteLookup, "", "PermRemoteLookup without a bucket layout"},
		{"a layout without lookup", abi.PermRemoteRead, layout(256, 0), "a bucket layout without PermRemoteLookup"},
		{"bucket above the region", abi.PermRemoteLookup, layout(4096, 0) + "", "bucket of 4096 bytes, region of 2048"},
		{"another portal's slab", abi.PermRemoteLookup, layout(256, uint32(foreign.ID())), "linked region not a live region of the portal"},
		{"no such slab", abi.PermRemoteLookup, layout(256, slab.Region+1<<16), "linked region not a live region of the portal"},
		{"registered", abi.PermRemoteLookup | abi.PermRemoteRead, layout(256, slab.Region), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, _, err := rawCreate(t, c, 2048)
			if err != nil {
				t.Fatal(err)
			}
			req := fmt.Sprintf(`{"v":1,"op":"register_region","memory":%d,"perm":%d,"key":"%s"`, mem, tc.perm, keyHex)
			if tc.lay != "" {
				req += `,"layout":` + tc.lay
			}
			resp, _, err := rawSendFD(t, c, req+"}")
			if tc.want == "" {
				if err != nil || resp.Region == nil || resp.Region.Perm != tc.perm {
					t.Fatalf("%+v %v", resp, err)
				}
				return
			}
			if err == nil || resp.Code != "bad_request" || !strings.Contains(resp.Error, tc.want) {
				t.Fatalf("got %v (code %q), want bad_request containing %q", err, resp.Code, tc.want)
			}
		})
	}
}
