package benchkit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// FetchProfile writes to path a Go CPU profile of seconds taken from a
// role's debug listener at addr, so a benchmark can show where a role's time
// went during the run it measures.
func FetchProfile(ctx context.Context, role, addr string, seconds float64, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds*float64(time.Second))+30*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%g", addr, seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", role, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("profile %s: %s: %s", role, resp.Status, body)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("profile %s: %w", role, err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("profile %s: %w", role, err)
	}
	return f.Close()
}
