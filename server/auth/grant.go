package auth

import (
	"context"
	"strings"
)

// Perm is what a token may do, as a set of bits: read (streams and the
// other GETs), write (chat, run, cancel, confirm, thread changes) and
// publish (the publish API). Every route needs exactly one of them (see
// the server's route table).
type Perm uint8

// The permissions.
const (
	PermRead Perm = 1 << iota
	PermWrite
	PermPublish
)

// PermAPI is what an API token may do, and a JWT without a scope claim:
// everything but publishing, which takes a token that says so, so that a
// user's token cannot drive a producer's run and a producer's secret
// cannot read the user's threads.
const PermAPI = PermRead | PermWrite

// permNames are the scope values, in the order messages list them.
var permNames = []struct {
	p    Perm
	name string
}{{PermRead, "read"}, {PermWrite, "write"}, {PermPublish, "publish"}}

// ParsePerms reads scope values ("read", "write", "publish"); values it
// does not know are left out, so that a token that also carries another
// service's OAuth scopes still works here.
func ParsePerms(values []string) Perm {
	var p Perm
	for _, v := range values {
		for _, n := range permNames {
			if v == n.name {
				p |= n.p
			}
		}
	}
	return p
}

// String lists the permissions as a scope claim would ("read write"),
// "none" for none.
func (p Perm) String() string {
	var out []string
	for _, n := range permNames {
		if p&n.p != 0 {
			out = append(out, n.name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}

// Threads limits a token to some threads: exact ids and prefixes (an
// entry ending in '*'). A nil *Threads allows every thread of the user.
type Threads struct {
	exact    map[string]bool
	prefixes []string
}

// ParseThreads reads a threads claim: "t-123" is that thread, "proj-7:*"
// every thread whose id starts with "proj-7:", "*" every thread. An empty
// list allows no thread.
func ParseThreads(entries []string) *Threads {
	t := &Threads{exact: map[string]bool{}}
	for _, e := range entries {
		if prefix, ok := strings.CutSuffix(e, "*"); ok {
			t.prefixes = append(t.prefixes, prefix)
		} else if e != "" {
			t.exact[e] = true
		}
	}
	return t
}

// Allows reports whether the thread id is one the token may touch.
func (t *Threads) Allows(id string) bool {
	if t == nil {
		return true
	}
	if t.exact[id] {
		return true
	}
	for _, p := range t.prefixes {
		if strings.HasPrefix(id, p) {
			return true
		}
	}
	return false
}

// Grant is what an authenticated request may do: act for User, with
// Perms, on Threads (nil: all of the user's). Static tokens give their
// scope's permissions and every thread; a JWT's claims may narrow both.
type Grant struct {
	User    string
	Perms   Perm
	Threads *Threads
}

// grantKey carries the request's Grant in its context; a request of
// single-user mode has none.
type grantKey struct{}

func withGrant(ctx context.Context, g Grant) context.Context {
	return context.WithValue(ctx, grantKey{}, g)
}

// GrantFrom returns the request's grant; ok is false in single-user mode,
// where every request may do everything.
func GrantFrom(ctx context.Context) (Grant, bool) {
	g, ok := ctx.Value(grantKey{}).(Grant)
	return g, ok
}
