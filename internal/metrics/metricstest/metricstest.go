// Package metricstest reads Prometheus scrapes for tests: the metrics package's
// own, and the end-to-end tests that scrape running rowlift processes.
package metricstest

import (
	"io"
	"maps"
	"net/http"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// Sample is one scraped series' value: a histogram shows as NAME_bucket (one
// sample per bucket, with label le), NAME_sum and NAME_count.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape is every sample of one scrape.
type Scrape []Sample

// Get scrapes url, failing the test unless it answers 200 with the text format.
func Get(t *testing.T, url string) Scrape {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err, "scrape %s", url)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "scrape %s", url)
	return Parse(t, resp.Body)
}

// Parse reads a scrape in the Prometheus text format.
func Parse(t *testing.T, r io.Reader) Scrape {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	require.NoError(t, err)
	var out Scrape
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out = append(out, Sample{name, labels, m.GetCounter().GetValue()})
			case dto.MetricType_GAUGE:
				out = append(out, Sample{name, labels, m.GetGauge().GetValue()})
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					out = append(out, Sample{name + "_bucket", with(labels, "le", model.FloatString(b.GetUpperBound()).String()), float64(b.GetCumulativeCount())})
				}
				out = append(out, Sample{name + "_sum", labels, h.GetSampleSum()}, Sample{name + "_count", labels, float64(h.GetSampleCount())})
			default:
				out = append(out, Sample{name, labels, m.GetUntyped().GetValue()})
			}
		}
	}
	return out
}

func with(labels map[string]string, name, value string) map[string]string {
	out := maps.Clone(labels)
	out[name] = value
	return out
}

// Names returns the distinct sample names, sorted.
func (s Scrape) Names() []string {
	var names []string
	for _, x := range s {
		names = append(names, x.Name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Sum adds the samples of name whose labels include every one of labels; found
// says whether there was any.
func (s Scrape) Sum(name string, labels map[string]string) (sum float64, found bool) {
	for _, x := range s {
		if x.Name == name && matches(x.Labels, labels) {
			sum += x.Value
			found = true
		}
	}
	return sum, found
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
