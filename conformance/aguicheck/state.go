package aguicheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/threadline/threadline/agui"
	"github.com/threadline/threadline/conformance/aguiverify"
)

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// plain re-decodes v with float64 numbers, the form aguiverify.Apply works
// on; it is also a deep copy.
func plain(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}

func (c *checker) setState(s any) {
	p, err := plain(s)
	if err != nil {
		c.stateKnown, c.stateWhy = false, "the state could not be copied: "+err.Error()
		return
	}
	c.state, c.stateKnown = p, true
}

// applyDelta applies a STATE_DELTA to the state built from the stream's
// snapshots. The state a run starts from is the client's (RunAgentInput
// state), which the response does not show unless RUN_STARTED echoes its
// input, so a delta before any snapshot cannot be judged.
func (c *checker) applyDelta(e *event) {
	ops, ok := e.m["delta"].([]any)
	if !ok || patchProblem(ops) != "" {
		// A malformed patch is the shape rule's failure; the client throws
		// on it, so what the state would be afterwards is unknown.
		c.stateKnown, c.stateWhy = false, fmt.Sprintf("%s is malformed, so the state after it is unknown", e)
		return
	}
	if !c.stateKnown {
		if c.stateWhy == "no STATE_DELTA in this stream" {
			c.stateWhy = fmt.Sprintf("%s came before any STATE_SNAPSHOT: its base state is the client's", e)
		}
		return
	}
	doc, err := plain(c.state)
	if err != nil {
		return
	}
	copied := 0
	for i, o := range ops {
		op := o.(map[string]any)
		doc, err = applyOp(doc, op, &copied)
		if errors.Is(err, errCopiesTooMuch) {
			// A few doubling copies make a document no checker can hold:
			// the state is left unjudged rather than built.
			c.stateKnown, c.stateWhy = false, fmt.Sprintf("%s copies more than %d bytes, so the state after it is not followed", e, maxCopiedBytes)
			return
		}
		if err != nil {
			c.t.Fail(StateDeltaApplies, "%s: operation %d (%s %v): %v", e, i, op["op"], op["path"], err)
			// Like fast-json-patch, a failed patch leaves the state as it was.
			return
		}
	}
	c.state = doc
	c.t.Pass(StateDeltaApplies)
}

// maxCopiedBytes bounds what the copies of one patch may add: the server
// under test chooses the patches.
const maxCopiedBytes = 4 << 20

var errCopiesTooMuch = errors.New("the patch copies too much")

func applyOp(doc any, op map[string]any, copied *int) (any, error) {
	name, _ := op["op"].(string)
	path, _ := op["path"].(string)
	from, _ := op["from"].(string)
	switch name {
	case "add", "replace", "remove":
		var raw json.RawMessage
		if name != "remove" {
			b, err := json.Marshal(op["value"])
			if err != nil {
				return nil, err
			}
			raw = b
		}
		if name == "replace" && path != "" {
			if _, err := resolve(doc, path); err != nil {
				return nil, err
			}
		}
		return aguiverify.Apply(doc, agui.PatchOp{Op: name, Path: path, Value: raw})
	case "test":
		got, err := resolve(doc, path)
		if err != nil {
			return nil, err
		}
		want, err := plain(op["value"])
		if err != nil {
			return nil, err
		}
		if !reflect.DeepEqual(got, want) {
			return nil, fmt.Errorf("test failed: value at %q differs", path)
		}
		return doc, nil
	case "move", "copy":
		v, err := resolve(doc, from)
		if err != nil {
			return nil, fmt.Errorf("from: %w", err)
		}
		if v, err = plain(v); err != nil {
			return nil, err
		}
		if name == "move" {
			if strings.HasPrefix(path, from+"/") {
				return nil, fmt.Errorf("cannot move %q into its own child %q", from, path)
			}
			if doc, err = aguiverify.Apply(doc, agui.PatchOp{Op: "remove", Path: from}); err != nil {
				return nil, err
			}
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		if name == "copy" {
			if *copied += len(b); *copied > maxCopiedBytes {
				return nil, errCopiesTooMuch
			}
		}
		return aguiverify.Apply(doc, agui.PatchOp{Op: "add", Path: path, Value: b})
	}
	return nil, fmt.Errorf("unknown op %q", name)
}

// resolve returns the value ptr names in doc.
func resolve(doc any, ptr string) (any, error) {
	if ptr == "" {
		return doc, nil
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch d := cur.(type) {
		case map[string]any:
			v, ok := d[tok]
			if !ok {
				return nil, fmt.Errorf("no member %q", tok)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(d) || (len(tok) > 1 && tok[0] == '0') {
				return nil, fmt.Errorf("index %q out of range (len %d)", tok, len(d))
			}
			cur = d[i]
		default:
			return nil, fmt.Errorf("cannot descend into a %s at %q", jsonKind(cur), tok)
		}
	}
	return cur, nil
}
