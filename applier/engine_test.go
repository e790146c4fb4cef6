package applier

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// TestReadyAfter covers every kind of outcome a pass can have.
func TestReadyAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		ready bool
	}{
		{"holds the lock and read its workflows", nil, true},
		{"stands by behind another applier", errAnotherApplier, true},
		{"stands by, wrapped", fmt.Errorf("pass: %w", errAnotherApplier), true},
		{"target unreachable", errors.New("target: dial tcp 10.0.0.1:3306: connect: connection refused"), false},
		{"target refuses the user", &mysql.MySQLError{Number: 1045, Message: "Access denied"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.ready, readyAfter(tc.err))
		})
	}
}
