package instanceai

// The Core's parts, for the external tests that drive or inspect one of
// them under a Core; the surfaces reach none of them.

func (c *Core) Store() Store      { return c.store }
func (c *Core) Writer() *Writer   { return c.writer }
func (c *Core) Runs() *Runs       { return c.runs }
func (c *Core) Hub() *Hub         { return c.hub }
func (c *Core) Cluster() *Cluster { return c.cluster }
