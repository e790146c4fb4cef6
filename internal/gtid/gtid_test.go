package gtid

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	uuidA = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	uuidB = "9f0a1b2c-0000-11e1-9e33-c80aa9429562"
)

func parse(t *testing.T, text string) *Set {
	t.Helper()
	s, err := Parse(text)
	require.NoError(t, err)
	return s
}

// same reports whether a and b hold the same transactions.
func same(a, b *Set) bool { return a.Contains(b) && b.Contains(a) }

func TestParseReadsEitherFlavor(t *testing.T) {
	for text, flavor := range map[string]string{
		"":                                   "",
		"0-1-5":                              "mariadb",
		"0-1-5,1-2-7":                        "mariadb",
		uuidA + ":1-5":                       "mysql",
		uuidA + ":1-5:7-9,\n" + uuidB + ":3": "mysql",
		uuidA + ":1-5:blue:1-2":              "mysql",
	} {
		s := parse(t, text)
		assert.Equal(t, flavor, s.Flavor(), text)
		assert.Equal(t, text == "", s.IsEmpty(), text)
	}
	for _, bad := range []string{"0-1", "x-y-z", "not-a-uuid:1-5", uuidA + ":", uuidA + ":blue"} {
		_, err := Parse(bad)
		assert.Error(t, err, bad)
	}
}

func TestStringRoundTrips(t *testing.T) {
	for _, text := range []string{"", "0-1-5", uuidA + ":1-5:7-9", uuidA + ":1-5:blue:1-2", uuidA + ":1-3," + uuidB + ":4"} {
		assert.Equal(t, text, parse(t, text).String())
	}
}

func TestContains(t *testing.T) {
	cases := []struct {
		s, o string
		want bool
	}{
		{"", "", true},
		{"0-1-5", "", true},
		{"", "0-1-5", false},
		{"0-1-5", "0-1-3", true},
		{"0-1-3", "0-1-5", false},
		{"0-1-5", "0-1-5,1-1-1", false},
		{uuidA + ":1-5", uuidA + ":3", true},
		{uuidA + ":1-5", uuidA + ":6", false},
		{uuidA + ":1-3:5", uuidA + ":4", false},
		{uuidA + ":1-5", uuidA + ":blue:1", false},
		{uuidA + ":1-5:blue:1-2", uuidA + ":blue:2", true},
		{uuidA + ":1-5", "0-1-1", false},
		{"0-1-5", uuidA + ":1", false},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, parse(t, c.s).Contains(parse(t, c.o)), "%q contains %q", c.s, c.o)
	}
}

func TestAdd(t *testing.T) {
	s := parse(t, "")
	require.NoError(t, s.Add("0-1-5"))
	require.NoError(t, s.Add("1-1-2"))
	require.NoError(t, s.Add("0-1-6"))
	assert.True(t, same(s, parse(t, "0-1-6,1-1-2")), s.String())

	m := parse(t, "")
	require.NoError(t, m.Add(uuidA+":1"))
	require.NoError(t, m.Add(uuidA+":3"))
	require.NoError(t, m.Add(uuidA+":blue:9"))
	require.NoError(t, m.Add(uuidA+":2"))
	assert.Equal(t, uuidA+":1-3:blue:9", m.String())

	assert.ErrorContains(t, m.Add("0-1-7"), "mariadb")
	assert.ErrorContains(t, s.Add(uuidA+":4"), "mysql")
	assert.Equal(t, uuidA+":1-3:blue:9", m.String(), "a refused GTID changes nothing")
}

func TestAdvance(t *testing.T) {
	cases := []struct{ a, b, want string }{
		{"", "", ""},
		{"", "0-1-5", "0-1-5"},
		{"0-1-5", "", "0-1-5"},
		{"0-1-5,1-1-9", "0-2-7,2-1-1", "0-2-7,1-1-9,2-1-1"},
		{"0-1-7", "0-1-5", "0-1-7"},
		{uuidA + ":1-3", uuidA + ":5-6," + uuidB + ":1", uuidA + ":1-3:5-6," + uuidB + ":1"},
		{uuidA + ":1-3", uuidA + ":4", uuidA + ":1-4"},
		{uuidA + ":1-3", uuidA + ":blue:1", uuidA + ":1-3:blue:1"},
	}
	for _, c := range cases {
		got, err := Merge(c.a, c.b)
		require.NoError(t, err)
		assert.True(t, same(parse(t, c.want), parse(t, got)), "%q + %q = %q, want %q", c.a, c.b, got, c.want)
	}
	_, err := Merge("0-1-5", uuidA+":1")
	assert.ErrorContains(t, err, "cannot merge")
}

func TestCloneIsIndependent(t *testing.T) {
	for _, text := range []string{"0-1-5", uuidA + ":1-5"} {
		s := parse(t, text)
		c := s.Clone()
		g := "0-1-9"
		if s.Flavor() == "mysql" {
			g = uuidA + ":9"
		}
		require.NoError(t, c.Add(g))
		assert.Equal(t, text, s.String())
		assert.False(t, same(s, c))
	}
	e := parse(t, "")
	c := e.Clone()
	require.NoError(t, c.Add("0-1-1"))
	assert.True(t, e.IsEmpty())
}

func TestGoMySQL(t *testing.T) {
	s, err := parse(t, "").GoMySQL("mysql")
	require.NoError(t, err)
	assert.True(t, s.IsEmpty())
	_, err = parse(t, "0-1-5").GoMySQL("mysql")
	assert.ErrorContains(t, err, "is a mariadb GTID set, the source is mysql")
	m, err := parse(t, uuidA+":1-5").GoMySQL("mysql")
	require.NoError(t, err)
	assert.Equal(t, uuidA+":1-5", m.String())
}

func TestCovers(t *testing.T) {
	ok, err := Covers(uuidA+":1-9", uuidA+":4")
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = Covers("0-1-3", "0-1-4")
	require.NoError(t, err)
	assert.False(t, ok)
	_, err = Covers("0-1", "")
	assert.Error(t, err)
}

func TestMariaDBLackNamesWhatTheSourceNeverHad(t *testing.T) {
	for _, c := range []struct {
		position, state string
		lost, common    string // lost "": the source has it all
	}{
		{"0-1-424", "0-1-424", "", ""},
		{"0-1-424", "0-1-500", "", ""},
		{"0-1-424", "0-1-422,0-2-460", "0-1-423 to 0-1-424", "0-1-422"},
		{"0-1-424", "0-2-460,0-1-423", "0-1-424", "0-1-423"},
		// The state lists a domain's servers, each with its own last GTID.
		{"0-2-460", "0-1-422,0-2-460", "", ""},
		{"0-1-424,1-7-30", "0-1-424,1-7-29", "1-7-30", "0-1-424,1-7-29"},
		{"0-1-424", "", "0-1-424 and every earlier transaction of server 1 in domain 0", "-"},
		{"0-1-424", "0-2-900", "0-1-424 and every earlier transaction of server 1 in domain 0", "-"},
		{"", "0-1-5", "", ""},
	} {
		l, err := MariaDBLack(parse(t, c.position), c.state)
		require.NoError(t, err)
		if c.lost == "" {
			assert.Nil(t, l, "%s against %s", c.position, c.state)
			continue
		}
		require.NotNil(t, l, "%s against %s", c.position, c.state)
		assert.Equal(t, c.lost, l.Lost)
		if c.common == "-" {
			assert.Nil(t, l.Common, "no shared point")
			continue
		}
		require.NotNil(t, l.Common)
		assert.True(t, same(parse(t, c.common), l.Common), "common %s, want %s", l.Common, c.common)
	}
	_, err := MariaDBLack(parse(t, uuidA+":1-5"), "0-1-5")
	assert.ErrorContains(t, err, "not a MariaDB position")
	_, err = MariaDBLack(parse(t, "0-1-5"), "0-x-5")
	assert.ErrorContains(t, err, "gtid_binlog_state")
}

// TestCount: a position's transactions, so that the difference of two
// positions of a stream is how many it went through.
func TestCount(t *testing.T) {
	for _, c := range []struct {
		set  string
		want uint64
	}{
		{"", 0},
		{uuidA + ":5", 1},
		{uuidA + ":1-5", 5},
		{uuidA + ":1-5:7-9", 8},
		{uuidA + ":1-5:blue:1-2", 7}, // tagged GTIDs count too
		{uuidA + ":1-3," + uuidB + ":4-10", 10},
		{"0-1-5", 5},
		{"0-1-5,1-2-7", 12},
		{"0-3-5,1-2-7", 12}, // domain 0 after a failover to server 3: its sequence goes on
		{"0-1-0", 0},
	} {
		assert.Equal(t, c.want, parse(t, c.set).Count(), c.set)
	}
}
