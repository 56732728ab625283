package catalog

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// Fetch loads the catalog of the n8n at baseURL (its root, e.g.
// http://localhost:5678) from /types/nodes.json, where the editor reads
// it; the names there carry their packages.
func Fetch(ctx context.Context, baseURL string) (*Catalog, error) {
	url := strings.TrimSuffix(baseURL, "/") + "/types/nodes.json"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w at %s", ErrNotFound, baseURL)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("catalog: GET %s: %s", url, resp.Status)
	}
	c, err := Decode(resp.Body, "")
	if err != nil {
		return nil, fmt.Errorf("catalog: GET %s: %w", url, err)
	}
	return c, nil
}
