// Package docs_test checks the repository's Markdown documentation: every
// relative link in README.md and docs/*.md must name a file or directory
// inside the repository, so a plain clone can follow all of them.
package docs_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the repository root as seen from this package's directory,
// where go test runs the test.
const repoRoot = ".."

// docFiles are the Markdown files whose links are checked, relative to the
// repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	found, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		rel, err := filepath.Rel(repoRoot, f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	slices.Sort(files[1:])
	return files
}

// TestRelativeLinksResolve: every relative link of README.md and docs/*.md
// names an existing path inside the repository.
func TestRelativeLinksResolve(t *testing.T) {
	files := docFiles(t)
	if !slices.Contains(files, "docs/design.md") || !slices.Contains(files, "docs/pitfalls.md") {
		t.Fatalf("docs/design.md and docs/pitfalls.md must exist; found %v", files)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, file := range files {
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(string(text)) {
			checked++
			if l.unread {
				t.Errorf("%s:%d: a link the check cannot read (keep [text](target) on one line): %s", file, l.line, l.target)
				continue
			}
			if problem := check(root, file, l.target); problem != "" {
				t.Errorf("%s:%d: link %q: %s", file, l.line, l.target, problem)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no link found: the link parser is broken")
	}
}

// TestLinkCheckCatchesBrokenLinks runs the check on a document with links of
// every kind, so a parser that finds nothing or a check that passes anything
// fails here.
func TestLinkCheckCatchesBrokenLinks(t *testing.T) {
	root := t.TempDir()
	for _, dir := range []string{"docs", "streamer"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"README.md", "docs/design.md", "streamer/fence.go"} {
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(f)), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc := strings.Join([]string{
		"See [the design](design.md#the-chunk-fence) and [code](../streamer/fence.go), ",
		"[the package](../streamer/) and [the README](<../README.md> \"title\").",
		"Skipped: [web](https://example.com/x), [mail](mailto:a@example.com), [anchor](#top).",
		"Broken: [gone](missing.md), [outside](../../shared/DESIGN.md), [absolute](/etc/passwd),",
		"[scheme](ftp://example.com/x), ![image](img/none.png), [escaped](no%20such.md).",
		"Not links: `[code](nowhere.md)` and",
		"```",
		"[fenced](nowhere.md)",
		"```",
		"[ref]: ../streamer/gone.go",
		"[a link split",
		"over two lines](../streamer/fence.go)",
	}, "\n")
	var broken []string
	for _, l := range links(doc) {
		switch {
		case l.unread:
			broken = append(broken, fmt.Sprintf("%d unread", l.line))
		case check(root, "docs/design.md", l.target) != "":
			broken = append(broken, fmt.Sprintf("%d %s", l.line, l.target))
		}
	}
	want := []string{"4 missing.md", "4 ../../shared/DESIGN.md", "4 /etc/passwd", "5 ftp://example.com/x", "5 img/none.png",
		"5 no%20such.md", "10 ../streamer/gone.go", "12 unread"}
	if !slices.Equal(broken, want) {
		t.Errorf("broken links found:\n%s\nwant:\n%s", strings.Join(broken, "\n"), strings.Join(want, "\n"))
	}
}

// link is one link target and the line it is on. unread marks a "](" the
// parser could not read as a link (its text split over lines, say), which
// the check reports rather than skip.
type link struct {
	line   int
	target string
	unread bool
}

var (
	// inlineLink is [text](target) or [text](target "title"), and the same
	// with ! for an image; target may be written <target>.
	inlineLink = regexp.MustCompile(`\[[^\]]*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	// refDefinition is a reference-style link definition: [label]: target.
	refDefinition = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// codeSpan is inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
)

// links returns the link targets of a Markdown document, outside fenced code
// blocks and inline code.
func links(doc string) []link {
	var out []link
	fenced := false
	for i, line := range strings.Split(doc, "\n") {
		if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		if m := refDefinition.FindStringSubmatch(line); m != nil {
			out = append(out, link{line: i + 1, target: strings.Trim(m[1], "<>")})
			continue
		}
		found := inlineLink.FindAllStringSubmatch(line, -1)
		for _, m := range found {
			out = append(out, link{line: i + 1, target: strings.Trim(m[1], "<>")})
		}
		if strings.Count(line, "](") > len(found) {
			out = append(out, link{line: i + 1, target: line, unread: true})
		}
	}
	return out
}

// check returns what is wrong with target, a link in file (relative to root),
// or "" when it is an absolute web or mail URL, a pure anchor, or a relative
// path to something that exists inside root.
func check(root, file, target string) string {
	lower := strings.ToLower(target)
	switch {
	case target == "":
		return "empty target"
	case strings.HasPrefix(lower, "http://"), strings.HasPrefix(lower, "https://"), strings.HasPrefix(lower, "mailto:"):
		return ""
	case strings.HasPrefix(target, "#"):
		return ""
	}
	path, _, _ := strings.Cut(target, "#")
	path, _, _ = strings.Cut(path, "?")
	if u, err := url.Parse(path); err == nil && u.Scheme != "" {
		return "not a relative path nor an http(s) or mailto URL"
	}
	if strings.HasPrefix(path, "/") {
		return "absolute path: link relative to the file instead"
	}
	unescaped, err := url.PathUnescape(path)
	if err != nil {
		return fmt.Sprintf("bad escape: %v", err)
	}
	dir := filepath.Dir(filepath.Join(root, filepath.FromSlash(file)))
	abs := filepath.Join(dir, filepath.FromSlash(unescaped))
	rel, err := filepath.Rel(root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "points outside the repository: a plain clone does not have it"
	}
	if _, err := os.Stat(abs); err != nil {
		return "no such file or directory in the repository"
	}
	return ""
}
