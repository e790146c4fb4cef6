package reshard

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rowlift/rowlift/internal/keyrange"
	rowliftv1 "github.com/rowlift/rowlift/proto/rowlift/v1"
)

// spec builds a workflow from source and target ranges ("" for none) with a
// sharded table t and a reference table ref.
func spec(sources, targets []string) *rowliftv1.WorkflowSpec {
	s := &rowliftv1.WorkflowSpec{Name: "w", SourceDatabase: "db", Tables: []*rowliftv1.TableSpec{
		{Name: "t", ShardingColumn: "id"}, {Name: "ref", Reference: true}}}
	for i, r := range sources {
		s.Sources = append(s.Sources, &rowliftv1.SourceShard{Name: fmt.Sprintf("s%d", i), StreamerAddress: "x:1", KeyRange: r})
	}
	for i, r := range targets {
		s.Targets = append(s.Targets, &rowliftv1.TargetShard{Name: fmt.Sprintf("t%d", i), KeyRange: r})
	}
	return s
}

// describe is every stream as "source→target:range[tables]".
func describe(t *testing.T, s *rowliftv1.WorkflowSpec) []string {
	t.Helper()
	streams, err := Streams(s)
	require.NoError(t, err)
	var out []string
	for _, st := range streams {
		var tables []string
		for _, tb := range st.Spec.GetTables() {
			tables = append(tables, tb.GetName())
		}
		out = append(out, fmt.Sprintf("%s:%s[%s]", st.Name(), st.KeyRange(), strings.Join(tables, ",")))
	}
	return out
}

func TestStreams(t *testing.T) {
	for _, c := range []struct {
		name             string
		sources, targets []string
		want             []string
	}{
		{"1→2", []string{""}, []string{"-80", "80-"}, []string{"s0→t0:-80[t,ref]", "s0→t1:80-[t,ref]"}},
		{"1→4", []string{"-"}, []string{"-40", "40-80", "80-c0", "c0-"},
			[]string{"s0→t0:-40[t,ref]", "s0→t1:40-80[t,ref]", "s0→t2:80-c0[t,ref]", "s0→t3:c0-[t,ref]"}},
		{"2→3", []string{"-80", "80-"}, []string{"-55", "55-aa", "aa-"},
			[]string{"s0→t0:-55[t,ref]", "s0→t1:55-80[t,ref]", "s1→t1:80-aa[t]", "s1→t2:aa-[t,ref]"}},
		{"4→2", []string{"-40", "40-80", "80-c0", "c0-"}, []string{"-80", "80-"},
			[]string{"s0→t0:-40[t,ref]", "s1→t0:40-80[t]", "s2→t1:80-c0[t,ref]", "s3→t1:c0-[t]"}},
		{"2→1", []string{"80-", "-80"}, []string{"-"}, []string{"s0→t0:80-[t,ref]", "s1→t0:-80[t]"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := spec(c.sources, c.targets)
			require.NoError(t, Check(s))
			require.Equal(t, c.want, describe(t, s))
		})
	}
}

func TestMoveRunsEverySourceUnfiltered(t *testing.T) {
	s := spec([]string{"", ""}, []string{"", ""})
	s.Tables = s.Tables[:1]
	require.False(t, Resharding(s))
	require.NoError(t, Check(s))
	require.Equal(t, []string{"s0→t0:[t]", "s1→t0:[t]", "s0→t1:[t]", "s1→t1:[t]"}, describe(t, s))
	streams, err := ForTarget(s, "")
	require.NoError(t, err, "state written before targets were recorded has no target name")
	require.Len(t, streams, 2)
	require.Equal(t, "s0", streams[0].Name(), "a stream with no target name is named by its source")
	require.Same(t, s, streams[0].Spec, "a move streams the whole spec")
}

func TestCheckNamesWhatIsWrong(t *testing.T) {
	for _, c := range []struct {
		name    string
		edit    func(*rowliftv1.WorkflowSpec)
		message string
	}{
		{"gap", func(s *rowliftv1.WorkflowSpec) { s.Targets[1].KeyRange = "90-" }, "targets: key ranges leave 80-90 uncovered"},
		{"overlap", func(s *rowliftv1.WorkflowSpec) { s.Targets[1].KeyRange = "70-" }, "key ranges -80 and 70- overlap"},
		{"target without range", func(s *rowliftv1.WorkflowSpec) { s.Targets[1].KeyRange = "" }, "target t1 has no key range"},
		{"bad range", func(s *rowliftv1.WorkflowSpec) { s.Targets[1].KeyRange = "8-" }, `target t1: key range "8-"`},
		{"sources without ranges", func(s *rowliftv1.WorkflowSpec) {
			s.Sources = append(s.Sources, &rowliftv1.SourceShard{Name: "s1", StreamerAddress: "x:2"})
		}, "source s0 has no key range"},
		{"sources gap", func(s *rowliftv1.WorkflowSpec) {
			s.Sources[0].KeyRange = "-40"
			s.Sources = append(s.Sources, &rowliftv1.SourceShard{Name: "s1", StreamerAddress: "x:2", KeyRange: "80-"})
		}, "sources: key ranges leave 40-80 uncovered"},
		{"no sharding column", func(s *rowliftv1.WorkflowSpec) { s.Tables[0].ShardingColumn = "" },
			"table t has no sharding column: give --sharding-column t=COLUMN[:FUNCTION] to split it by key range, or --reference-tables t"},
		{"both", func(s *rowliftv1.WorkflowSpec) { s.Tables[1].ShardingColumn = "id" }, "table ref has sharding column id and is a reference table"},
		{"unknown function", func(s *rowliftv1.WorkflowSpec) { s.Tables[0].ShardingFunction = "md5" }, "table t: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := spec([]string{""}, []string{"-80", "80-"})
			c.edit(s)
			require.ErrorContains(t, Check(s), c.message)
			_, err := Streams(s)
			require.Error(t, err)
		})
	}
	move := spec([]string{""}, []string{""})
	require.ErrorContains(t, Check(move), "table ref is a reference table, but no target has a key range")
}

// TestEveryIDHasOneStreamPerTarget: for random N→M layouts, each keyspace ID
// reaches exactly one target through exactly one stream, the one whose source
// holds it, and each target gets the reference table exactly once.
func TestEveryIDHasOneStreamPerTarget(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	layout := func() []string {
		var out []string
		at := 0
		for at < 256 {
			next := at + 1 + rng.IntN(256-at)
			if rng.IntN(3) == 0 {
				next = 256
			}
			r := keyrange.Range{}
			if at > 0 {
				r.Start = []byte{byte(at)}
			}
			if next < 256 {
				r.End = []byte{byte(next)}
			}
			out = append(out, r.String())
			at = next
		}
		return out
	}
	for range 300 {
		src, dst := layout(), layout()
		s := spec(src, dst)
		require.NoError(t, Check(s))
		streams, err := Streams(s)
		require.NoError(t, err)
		refs, firsts := map[string]int{}, map[string]int{}
		for _, st := range streams {
			if st.First {
				firsts[st.Target.GetName()]++
				require.Equal(t, st.Target.GetKeyRange(), st.TargetRange.String())
			}
			for _, tb := range st.Spec.GetTables() {
				if tb.GetReference() {
					refs[st.Target.GetName()]++
				}
			}
		}
		for _, tg := range s.GetTargets() {
			require.Equal(t, 1, refs[tg.GetName()], "reference table copies to %s in %v→%v", tg.GetName(), src, dst)
			require.Equal(t, 1, firsts[tg.GetName()], "first streams of %s in %v→%v", tg.GetName(), src, dst)
		}
		for range 50 {
			id := rng.Uint64()
			var via []string
			for _, st := range streams {
				if st.Range.Contains(id) {
					via = append(via, st.Source.GetName()+">"+st.Target.GetName())
					sr, _ := keyrange.Parse(st.Source.GetKeyRange())
					tr, _ := keyrange.Parse(st.Target.GetKeyRange())
					require.True(t, sr.Contains(id) && tr.Contains(id), "%x via %s", id, via)
				}
			}
			require.Len(t, via, 1, "%x in %v→%v", id, src, dst)
		}
	}
}
