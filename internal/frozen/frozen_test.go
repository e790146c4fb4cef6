package frozen

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestName(t *testing.T) {
	for _, tc := range []struct {
		table, want, err string
	}{
		{table: "orders", want: "_orders_frozen"},
		{table: "Mixed$Case", want: "_Mixed$Case_frozen"},
		{table: "ü", want: "_ü_frozen"},
		{table: strings.Repeat("a", 56), want: "_" + strings.Repeat("a", 56) + "_frozen"},
		{table: strings.Repeat("ä", 56), want: "_" + strings.Repeat("ä", 56) + "_frozen"}, // characters, not bytes
		{table: strings.Repeat("a", 57), err: "at most 56 characters"},
		{table: "", err: "empty"},
	} {
		got, err := Name(tc.table)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.table)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
}

func TestStatement(t *testing.T) {
	s, err := Statement("d", []string{"t1", "a`b"}, true)
	require.NoError(t, err)
	require.Equal(t, "RENAME TABLE `d`.`t1` TO `d`.`_t1_frozen`, `d`.`a``b` TO `d`.`_a``b_frozen`", s)
	s, err = Statement("d", []string{"t1"}, false)
	require.NoError(t, err)
	require.Equal(t, "RENAME TABLE `d`.`_t1_frozen` TO `d`.`t1`", s)
	_, err = Statement("d", []string{strings.Repeat("x", 60)}, true)
	require.ErrorContains(t, err, "LOCK or NONE")
	_, err = Statement("d", nil, true)
	require.Error(t, err)
}

func TestIsFreeze(t *testing.T) {
	tables := []string{"t1", "t2", "a`b"}
	for _, tc := range []struct {
		stmt, defaultDB string
		want            bool
	}{
		{"RENAME TABLE `d`.`t1` TO `d`.`_t1_frozen`, `d`.`t2` TO `d`.`_t2_frozen`", "", true},
		{"RENAME TABLE `d`.`_t1_frozen` TO `d`.`t1`", "other", true},
		{"rename   tables\n t1 to _T1_FROZEN ,\t`t2`TO`_t2_frozen`", "D", true},
		{"RENAME TABLE d . t1 TO d._t1_frozen", "", true},
		{"RENAME TABLE `d`.`a``b` TO `d`.`_a``b_frozen`", "", true},
		{"RENAME TABLE t1 TO _t1_frozen, _t2_frozen TO t2", "d", true}, // both directions at once
		// Not rowlift's freeze.
		{"RENAME TABLE t1 TO _t1_frozen", "other", false},             // another database
		{"RENAME TABLE `d`.`t1` TO `e`.`_t1_frozen`", "d", false},     // across databases
		{"RENAME TABLE t1 TO t1_old", "d", false},                     // another name
		{"RENAME TABLE t1 TO _t1_frozen, t1_new TO t1", "d", false},   // one pair is not a freeze
		{"RENAME TABLE t3 TO _t3_frozen", "d", false},                 // not a streamed table
		{"RENAME TABLE _t1_frozen TO __t1_frozen_frozen", "d", false}, // the twin of the twin
		{"RENAME TABLE t1 TO _t1_frozen,", "d", false},
		{"RENAME TABLE t1 _t1_frozen", "d", false},
		{"RENAME TABLE IF EXISTS t1 TO _t1_frozen", "d", false},
		{"RENAME TABLE t1 TO _t1_frozen /* x */", "d", false},
		{"RENAME TABLE `t1 TO _t1_frozen", "d", false},
		{"ALTER TABLE t1 RENAME TO _t1_frozen", "d", false},
		{"RENAME USER t1 TO _t1_frozen", "d", false},
		{"RENAME", "d", false},
		{"", "d", false},
	} {
		require.Equal(t, tc.want, IsFreeze(tc.stmt, tc.defaultDB, "d", tables), "%q", tc.stmt)
	}
}

func TestStatementIsFreeze(t *testing.T) {
	tables := []string{"t1", "T2"}
	for _, freeze := range []bool{true, false} {
		s, err := Statement("db", tables, freeze)
		require.NoError(t, err)
		require.True(t, IsFreeze(s, "", "DB", tables), s)
	}
}
