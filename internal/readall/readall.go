// Package readall is a test helper: it reads a whole remote region through a
// portal in 4 KB READs, re-posting every op that does not complete OK, as the
// fault-injection tests (engine/port/faultport, tools/rmad) do to show that
// a read arrives intact through a lossy link.
package readall

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/onerma/onerma/portal"
)

// Chunked reads size bytes of region (from offset 0) from the engine at addr
// into sink (at the same offsets) as size/portal.MaxOpBytes READs of
// portal.MaxOpBytes each, keyed with key, on the given slots. The cookie of each
// op is its chunk index. It starts one op per slot, then, as completions
// arrive (Wait, at most len(slots) at a time, and one Flush per batch),
// re-posts on the same slot every op that completed with a status other than
// OK and posts the next chunk on the slot of every op that completed OK, until
// every chunk has completed OK. It returns how many posts were re-posts (the
// ops that did not complete OK). After deadline, or if a post fails, it
// returns an error that names the chunks still missing; ops may then still be
// in flight. size must be a positive multiple of portal.MaxOpBytes. The caller
// checks the bytes in sink.
func Chunked(p *portal.Portal, slots []portal.SlotID, addr netip.Addr, region portal.RegionID, key portal.Key,
	sink *portal.Region, size uint64, deadline time.Duration) (reposted int, err error) {
	if size == 0 || size%portal.MaxOpBytes != 0 {
		return 0, fmt.Errorf("readall: size %d is not a positive multiple of %d", size, portal.MaxOpBytes)
	}
	if len(slots) == 0 {
		return 0, fmt.Errorf("readall: no slots")
	}
	chunks := size / portal.MaxOpBytes
	ok := make([]bool, chunks)
	done := uint64(0)
	fail := func(format string, a ...any) error {
		return fmt.Errorf("readall: %s after %d of %d chunks (%d re-posted); missing chunks %s",
			fmt.Sprintf(format, a...), done, chunks, reposted, missing(ok))
	}
	post := func(s portal.SlotID, chunk uint64) error {
		off := chunk * portal.MaxOpBytes
		if err := p.Post(&portal.Op{
			Type: portal.OpRead, Slot: s, Cookie: chunk,
			Remote: addr, RemoteRegion: region, RemoteOffset: off, Key: key,
			Local: sink, LocalOffset: off, Length: portal.MaxOpBytes,
		}); err != nil {
			return fail("post of chunk %d on slot %d: %v", chunk, s, err)
		}
		return nil
	}
	next := uint64(0)
	for _, s := range slots {
		if next == chunks {
			break
		}
		if err := post(s, next); err != nil {
			return reposted, err
		}
		next++
	}
	p.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	out := make([]portal.Completion, len(slots))
	for done < chunks {
		n, err := p.Wait(ctx, out)
		if err != nil {
			return reposted, fail("Wait: %v", err)
		}
		for _, c := range out[:n] {
			switch {
			case c.Status != portal.StatusOK:
				reposted++
				if err := post(c.Slot, c.Cookie); err != nil { // again
					return reposted, err
				}
			default:
				if c.Cookie < chunks {
					ok[c.Cookie] = true
				}
				done++
				if next < chunks {
					if err := post(c.Slot, next); err != nil {
						return reposted, err
					}
					next++
				}
			}
		}
		p.Flush()
	}
	return reposted, nil
}

// missing lists the chunks not yet read, as ranges ("[3 17-20 96]"), at most
// 16 of them.
func missing(ok []bool) string {
	var b strings.Builder
	b.WriteByte('[')
	ranges := 0
	for i := 0; i < len(ok); i++ {
		if ok[i] {
			continue
		}
		j := i
		for j+1 < len(ok) && !ok[j+1] {
			j++
		}
		if ranges == 16 {
			b.WriteString(" …")
			break
		}
		if ranges > 0 {
			b.WriteByte(' ')
		}
		if j == i {
			fmt.Fprintf(&b, "%d", i)
		} else {
			fmt.Fprintf(&b, "%d-%d", i, j)
		}
		ranges++
		i = j
	}
	b.WriteByte(']')
	return b.String()
}
