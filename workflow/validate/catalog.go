package validate

import (
	"fmt"
	"strconv"
	"strings"
)

// catalog checks each node against n8n's description of its type: that the
// type exists, has the node's typeVersion, and that the required
// parameters it shows for the node's settings have values (see
// catalog.Description.MissingRequired for what displayOptions it evaluates).
func (v *validator) catalog() {
	c := v.opts.Catalog
	for _, n := range v.nodes {
		if n.typ == "" {
			continue
		}
		if _, ok := c.Lookup(n.typ); !ok {
			fixes := []string{}
			for _, near := range c.Nearest(n.typ) {
				fixes = append(fixes, fmt.Sprintf("Did you mean %q?", near))
			}
			fixes = append(fixes, "Install the community package that provides this node, or replace the node")
			v.fail(issue{rule: RuleUnknownType, category: CategoryValidation,
				title:     "Unknown node type",
				message:   fmt.Sprintf("The %s has type %q, which this n8n does not have.", n.label(), n.typ),
				guidance:  "Use a node type n8n provides; check the spelling and the package name.",
				technical: fmt.Sprintf("type %q not among %d known node types", n.typ, c.Len()),
				fixes:     fixes})
			continue
		}
		if n.version == 0 {
			continue
		}
		d, ok := c.LookupVersion(n.typ, n.version)
		if !ok {
			versions := c.Versions(n.typ)
			listed := make([]string, len(versions))
			for i, ver := range versions {
				listed[i] = strconv.FormatFloat(ver, 'f', -1, 64)
			}
			newest := listed[len(listed)-1]
			v.fail(issue{rule: RuleVersion, category: CategoryValidation,
				title:     "Unknown node version",
				message:   fmt.Sprintf("The %s is %s version %v, which does not exist; it has versions %s.", n.label(), n.typ, n.version, strings.Join(listed, ", ")),
				guidance:  "Set typeVersion to one of the type's versions; the newest is what the editor adds.",
				technical: fmt.Sprintf("typeVersion %v not in %v", n.version, versions),
				fixes:     []string{fmt.Sprintf("Set \"typeVersion\": %s", newest)}})
			continue
		}
		if n.params == nil || n.disabled {
			continue // a disabled node does not run, so its settings may be unfinished
		}
		for _, p := range d.MissingRequired(n.params, n.version) {
			v.fail(issue{rule: RuleRequiredParameter, category: CategoryValidation,
				title:     "A required parameter is missing",
				message:   fmt.Sprintf("The %s (%s) needs a value for %q (%s).", n.label(), d.DisplayName, p.DisplayName, p.Name),
				guidance:  fmt.Sprintf("Fill in %q in the node's parameters.", p.DisplayName),
				technical: fmt.Sprintf("parameters.%s is required for %s v%v and has no value", p.Name, n.typ, n.version),
				fixes:     []string{fmt.Sprintf("Set parameters.%s", p.Name)}})
		}
	}
}
