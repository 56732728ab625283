// Package storage chooses a storage backend from a one-line spec, so that
// configuration (a flag, DATABASE_URL) needs to know nothing about backends.
//
// The backends live in subpackages: sqlite (the embedded default), postgres
// (several instances on one database) and memory (bounded, non-durable).
// Every one of them passes the contract suite in storagetest.
package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
	"github.com/threadline/threadline/storage/postgres"
	"github.com/threadline/threadline/storage/sqlite"
)

// Forms lists the accepted specs, for help texts and error messages.
const Forms = `"memory" (or memory?max-events=N&max-bytes=N), "sqlite:PATH" (or a bare PATH ending in .db, .sqlite or .sqlite3), "postgres://…" or "postgresql://…"`

// Open opens the backend named by spec:
//
//	memory                         bounded in-memory store (non-durable)
//	memory?max-events=N&max-bytes=N  the same with another per-thread window
//	sqlite:PATH, sqlite://PATH     SQLite file at PATH, created if missing
//	PATH.db                        the same, for a bare path
//	postgres://…, postgresql://…   PostgreSQL (a lib/pq URL)
//
// The store is not migrated: call Migrate on it (serve and migrate do).
// Every backend's store is also a builder.Store, on the same migrations.
func Open(ctx context.Context, spec string) (instanceai.Store, error) {
	kind, target, err := parse(spec)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "memory":
		opts, err := memoryOptions(target)
		if err != nil {
			return nil, err
		}
		return memory.New(opts...), nil
	case "sqlite":
		s, err := sqlite.Open(ctx, target)
		if err != nil {
			return nil, err
		}
		return s, nil
	default:
		s, err := postgres.Open(ctx, target)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// parse returns the backend kind ("memory", "sqlite" or "postgres") and what
// to hand that backend.
func parse(spec string) (kind, target string, err error) {
	s := strings.TrimSpace(spec)
	lower := strings.ToLower(s)
	switch {
	case s == "":
		return "", "", fmt.Errorf("storage: empty spec; want one of %s", Forms)
	case lower == "memory" || lower == "memory:" || lower == "mem":
		return "memory", "", nil
	case strings.HasPrefix(lower, "memory?"):
		return "memory", s[len("memory?"):], nil
	case strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://"):
		return "postgres", s, nil
	case strings.HasPrefix(lower, "sqlite://"):
		// sqlite:///abs/path and sqlite://rel/path, as URL-minded users write.
		return sqlitePath(s[len("sqlite://"):])
	case strings.HasPrefix(lower, "sqlite:"):
		return sqlitePath(s[len("sqlite:"):])
	case hasDBSuffix(lower) && !strings.Contains(lower, "://"):
		return "sqlite", s, nil
	}
	return "", "", fmt.Errorf("storage: unknown spec %q; want one of %s", Describe(spec), Forms)
}

// memoryOptions reads the memory store's window from its spec's query:
// max-events and max-bytes, positive integers.
func memoryOptions(query string) ([]memory.Option, error) {
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("storage: memory spec: %w", err)
	}
	var opts []memory.Option
	for key, vals := range q {
		n, err := strconv.ParseInt(vals[len(vals)-1], 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("storage: memory spec: %s must be a positive integer, got %q", key, vals[len(vals)-1])
		}
		switch key {
		case "max-events":
			opts = append(opts, memory.WithMaxEvents(int(min(n, math.MaxInt32))))
		case "max-bytes":
			opts = append(opts, memory.WithMaxBytes(n))
		default:
			return nil, fmt.Errorf("storage: memory spec: unknown parameter %q; want max-events or max-bytes", key)
		}
	}
	return opts, nil
}

func sqlitePath(p string) (string, string, error) {
	if p == "" {
		return "", "", errors.New("storage: sqlite spec without a path; want sqlite:PATH")
	}
	return "sqlite", p, nil
}

func hasDBSuffix(s string) bool {
	for _, ext := range []string{".db", ".sqlite", ".sqlite3"} {
		if strings.HasSuffix(s, ext) {
			return true
		}
	}
	return false
}

// redacted replaces secrets in Describe's output.
const redacted = "xxxxx"

// Describe returns spec fit for a log line: a password in a URL's user
// information or in a password= parameter is replaced by xxxxx.
func Describe(spec string) string {
	i := strings.Index(spec, "://")
	if i < 0 {
		return redactKeyValue(spec)
	}
	if u, err := url.Parse(spec); err == nil {
		if q := u.Query(); q.Has("password") {
			q.Set("password", redacted)
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	// Unparsable (a stray % in the password, say): hide everything between
	// the user name and the last @ of the authority, then any parameter.
	rest := spec[i+3:]
	authority := rest
	if j := strings.IndexAny(rest, "/?"); j >= 0 {
		authority = rest[:j]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		if colon := strings.Index(authority[:at], ":"); colon >= 0 {
			rest = authority[:colon+1] + redacted + rest[at:]
		}
	}
	return redactKeyValue(spec[:i+3] + rest)
}

// redactKeyValue hides password=… in a key=value connection string (lib/pq's
// other DSN form) or in a URL that did not parse.
func redactKeyValue(s string) string {
	lower := strings.ToLower(s)
	i := strings.Index(lower, "password=")
	if i < 0 {
		return s
	}
	start := i + len("password=")
	end := start
	if end < len(s) && s[end] == '\'' {
		// A quoted value runs to the closing quote.
		end++
		for end < len(s) && s[end] != '\'' {
			if s[end] == '\\' {
				end++
			}
			end++
		}
		end = min(end+1, len(s))
	} else {
		for end < len(s) && s[end] != ' ' && s[end] != '&' {
			end++
		}
	}
	return s[:start] + redacted + redactKeyValue(s[end:])
}
