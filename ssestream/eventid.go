package ssestream

import "strconv"

// ParseEventID reads an event id a client resumes from (Last-Event-ID, or
// a lastEventId parameter): decimal digits only, no sign and no spaces, as
// the ids this server sends are written. It reports false for anything
// else, a number too large for an int64 included.
func ParseEventID(raw string) (int64, bool) {
	if raw == "" {
		return 0, false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] < '0' || raw[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	return n, err == nil
}
