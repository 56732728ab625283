package catalog

import (
	"sort"
	"strings"
)

// maxSuggestions is how many names Nearest returns at most.
const maxSuggestions = 3

// Nearest suggests the known node types closest to typ, nearest first: by
// edit distance over the full names and over the short names (the part
// after the package), so "n8n-nodes-base.agent" finds
// "@n8n/n8n-nodes-langchain.agent". Names further than about a third of
// the short name's length are not suggestions.
func (c *Catalog) Nearest(typ string) []string {
	short := strings.ToLower(ShortName(typ))
	full := strings.ToLower(typ)
	limit := max(2, len(short)/3)
	type candidate struct {
		name string
		dist int
	}
	var found []candidate
	for _, name := range c.names {
		if name == typ {
			continue
		}
		d := min(editDistance(full, strings.ToLower(name)), editDistance(short, strings.ToLower(ShortName(name))))
		if d <= limit {
			found = append(found, candidate{name, d})
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].dist < found[j].dist })
	var names []string
	for _, f := range found[:min(len(found), maxSuggestions)] {
		names = append(names, f.name)
	}
	return names
}

// ShortName is a node type without its package: "httpRequest" for
// "n8n-nodes-base.httpRequest".
func ShortName(typ string) string {
	if i := strings.LastIndexByte(typ, '.'); i >= 0 {
		return typ[i+1:]
	}
	return typ
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
