package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRolesRefuseBadTracingEnvironment: a role started with an OTel setting
// rowlift cannot honour stops at once, naming the variable, before it
// touches a server or a port.
func TestRolesRefuseBadTracingEnvironment(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	for _, args := range [][]string{
		{"streamer", "--source-dsn", "root@tcp(127.0.0.1:1)/", "--listen", "127.0.0.1:0"},
		{"applier", "--target-dsn", "root@tcp(127.0.0.1:1)/"},
		{"coordinator", "--target", "main=root@tcp(127.0.0.1:1)/", "--listen", "127.0.0.1:0"},
	} {
		_, err := runCLI(t, args...)
		require.ErrorContains(t, err, `tracing: OTEL_EXPORTER_OTLP_PROTOCOL="http/json": rowlift exports OTLP traces over grpc or http/protobuf`, args[0])
	}
}
