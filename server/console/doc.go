// Package console serves the web console at /: a page that lists the
// caller's threads, follows a thread's event stream with the browser's
// EventSource and folds it into the agent tree with static/fold.js, the
// JavaScript twin of instanceai/agenttree.
package console
