package broker

import (
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// setPrincipal makes p (nil: nobody) the connection's identity. Losing the identity (a failed
// AUTH) puts the connection back on the authentication deadline; subscriptions the new
// identity may not use end with NOT_AUTHORIZED. Runs on the connection's loop.
func (c *conn) setPrincipal(p *principal) {
	c.principal = p
	s := c.srv
	s.connsMu.Lock()
	if p == nil {
		c.authDeadline = time.Now().Add(s.cfg.Limits.AuthTimeout)
		s.preauth[c] = c.authDeadline
	} else {
		delete(s.preauth, c)
	}
	s.connsMu.Unlock()
	kept := c.subs[:0]
	for _, sub := range c.subs {
		if p.mayUse(sub.topic) {
			kept = append(kept, sub)
			continue
		}
		sub.close()
		c.sendError(sub.id, wire.CodeNotAuthorized, fmt.Sprintf("subscription %d to %q ended: the connection is no longer authorized for it", sub.id, sub.topic.name))
	}
	clear(c.subs[len(kept):])
	c.subs = kept
	for i := 0; i < len(c.fetches); i++ {
		if fw := c.fetches[i]; !p.mayUse(fw.t) {
			c.sendError(fw.corr, wire.CodeNotAuthorized, fmt.Sprintf("FETCH on %q ended: the connection is no longer authorized for it", fw.t.name))
			c.dropFetch(i)
			i--
		}
	}
}
