// Package workflow is the n8n workflow document as the builder API reads,
// validates and compares it: the JSON n8n exports and its public API
// accepts (name, nodes, connections, settings, …). The model is for
// reading: a workflow is stored and returned as the JSON it came as, so
// fields not modelled here pass through unchanged.
package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Workflow is an n8n workflow.
type Workflow struct {
	ID          string          `json:"id,omitempty"`
	Name        string          `json:"name"`
	Nodes       []Node          `json:"nodes"`
	Connections Connections     `json:"connections"`
	Settings    json.RawMessage `json:"settings,omitempty"`
	Active      *bool           `json:"active,omitempty"`
	Tags        json.RawMessage `json:"tags,omitempty"`
	PinData     json.RawMessage `json:"pinData,omitempty"`
	Meta        json.RawMessage `json:"meta,omitempty"`
	VersionID   string          `json:"versionId,omitempty"`
}

// Node is one node of a workflow.
type Node struct {
	ID          string          `json:"id,omitempty"`
	Name        string          `json:"name"`
	Type        string          `json:"type"`
	TypeVersion float64         `json:"typeVersion"`
	Position    [2]float64      `json:"position"`
	Parameters  json.RawMessage `json:"parameters"`
	Credentials json.RawMessage `json:"credentials,omitempty"`
	Disabled    bool            `json:"disabled,omitempty"`
	WebhookID   string          `json:"webhookId,omitempty"`
	Notes       string          `json:"notes,omitempty"`
}

// Connections maps a source node's name to its outputs by connection type
// ("main", "ai_languageModel", "ai_tool", "ai_memory", …): for each output
// index, the inputs it feeds.
type Connections map[string]map[string][][]Target

// Target is the input a connection feeds: node Node's input Index of type
// Type.
type Target struct {
	Node  string `json:"node"`
	Type  string `json:"type"`
	Index int    `json:"index"`
}

// Connection types n8n defines (packages/workflow NodeConnectionTypes).
const (
	Main              = "main"
	AILanguageModel   = "ai_languageModel"
	AITool            = "ai_tool"
	AIMemory          = "ai_memory"
	AIOutputParser    = "ai_outputParser"
	AIAgent           = "ai_agent"
	AIChain           = "ai_chain"
	AIDocument        = "ai_document"
	AIEmbedding       = "ai_embedding"
	AIRetriever       = "ai_retriever"
	AITextSplitter    = "ai_textSplitter"
	AIVectorStore     = "ai_vectorStore"
	AIReranker        = "ai_reranker"
	AIToolkit         = "ai_toolkit"
	AIVectorRetriever = "ai_vectorRetriever"
)

// ConnectionTypes lists every connection type n8n knows.
var ConnectionTypes = []string{Main, AILanguageModel, AITool, AIMemory, AIOutputParser, AIAgent, AIChain,
	AIDocument, AIEmbedding, AIRetriever, AITextSplitter, AIVectorStore, AIReranker, AIToolkit, AIVectorRetriever}

// SyntaxError is a document that is not JSON, with where it broke.
type SyntaxError struct {
	Offset       int64
	Line, Column int
	Err          error
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at line %d, column %d: %v", e.Line, e.Column, e.Err)
}

func (e *SyntaxError) Unwrap() error { return e.Err }

// Parse decodes a workflow document. A document that is not JSON is a
// *SyntaxError with its position; a JSON value of the wrong shape (nodes
// not an array, say) is the decoder's *json.UnmarshalTypeError. Missing
// fields are not errors here: validation names them.
func Parse(data []byte) (*Workflow, error) {
	if !json.Valid(data) {
		return nil, syntaxError(data)
	}
	var w Workflow
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// syntaxError locates the first syntax error of data.
func syntaxError(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var v any
	err := dec.Decode(&v)
	offset := dec.InputOffset()
	var se *json.SyntaxError
	switch {
	case err == nil:
		// One valid value followed by more: the error is where it starts.
		rest := data[offset:]
		offset += int64(len(rest) - len(bytes.TrimLeft(rest, " \t\r\n")))
		err = errors.New("unexpected data after the workflow object")
	case errors.As(err, &se):
		// Offset counts the offending byte: point at it.
		offset = max(se.Offset-1, 0)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		offset = int64(len(data))
		err = errors.New("the document ends before the JSON value does")
	}
	line, col := position(data, offset)
	return &SyntaxError{Offset: offset, Line: line, Column: col, Err: err}
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	line, col = 1, 1
	for _, b := range data[:offset] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// NodeByName returns the node named name, or nil.
func (w *Workflow) NodeByName(name string) *Node {
	for i := range w.Nodes {
		if w.Nodes[i].Name == name {
			return &w.Nodes[i]
		}
	}
	return nil
}
