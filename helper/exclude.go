package main

// The [submission] exclude rule exactly as the judge applies it
// (sforge/grading/selection.py, whose globs are Python's fnmatch.fnmatchcase): the helper
// must leave out the same paths, no more, no fewer. testdata/exclude_rules.json holds both
// sides to it.

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// pySpace is Python's str.isspace: Go's unicode.IsSpace plus U+001C..U+001F.
func pySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// excludeRule is one pattern, cleaned as the judge cleans it: blanks around it (Python's
// str.strip) and "" and "." components dropped.
type excludeRule struct {
	pat   string
	glob  *regexp.Regexp // nil: no *, ? or [, a path prefix matched component-wise
	slash bool           // a glob with "/": matches the path or one of its ancestors
}

func newExcludeRule(raw string) excludeRule {
	r := excludeRule{pat: clean(raw)}
	if strings.ContainsAny(r.pat, "*?[") {
		r.glob = globRegexp(r.pat)
		r.slash = strings.Contains(r.pat, "/")
	}
	return r
}

// excludes tells whether p (a path relative to cwd, no "" or "." components) is left out.
// An empty pattern (".") leaves out nothing.
func (r excludeRule) excludes(p string) bool {
	switch {
	case r.pat == "":
		return false
	case r.glob == nil:
		return under(p, r.pat)
	case r.slash:
		parts := strings.Split(p, "/")
		for i := 1; i <= len(parts); i++ {
			if r.glob.MatchString(strings.Join(parts[:i], "/")) {
				return true
			}
		}
	default:
		for _, c := range strings.Split(p, "/") {
			if r.glob.MatchString(c) {
				return true
			}
		}
	}
	return false
}

// globRegexp translates a glob the way Python's fnmatch.translate does: * is any string
// and ? any one character ("/" included), [...] a set, an unclosed [ an ordinary
// character, no escapes (\ is an ordinary character), case-sensitive, the whole string.
func globRegexp(pat string) *regexp.Regexp {
	p := []rune(pat)
	var b strings.Builder
	b.WriteString(`\A(?s:`)
	for i, n := 0, len(p); i < n; {
		c := p[i]
		i++
		switch c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '[':
			j := i
			if j < n && p[j] == '!' {
				j++
			}
			if j < n && p[j] == ']' {
				j++
			}
			for j < n && p[j] != ']' {
				j++
			}
			if j >= n {
				b.WriteString(`\[`)
				continue
			}
			b.WriteString(globSet(p[i:j]))
			i = j + 1
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`)\z`)
	return regexp.MustCompile(b.String())
}

// setToken is one character of a set as fnmatch hands it to Python's re: a member, or a
// "-" between two members that makes a range.
type setToken struct {
	r    rune
	dash bool
}

// globSet is the regexp of the set whose text (between "[" and "]") is s, read as
// fnmatch.translate and Python's re read it: a first "!" negates; "a-z" is a range; a "-"
// first, last, right after "!" or right after a range is a member; a reversed range is
// dropped with the characters around it; "^", "[", "\", "&", "~", "|" are members.
func globSet(s []rune) string {
	var toks []setToken
	if !strings.ContainsRune(string(s), '-') {
		for _, r := range s {
			toks = append(toks, setToken{r: r})
		}
	} else {
		// fnmatch splits the set at the range dashes into chunks...
		var chunks [][]rune
		i, k := 0, 1
		if s[0] == '!' {
			k = 2
		}
		for {
			d := -1
			for x := k; x < len(s); x++ {
				if s[x] == '-' {
					d = x
					break
				}
			}
			if d < 0 {
				break
			}
			chunks = append(chunks, s[i:d])
			i, k = d+1, d+3
		}
		if i < len(s) {
			chunks = append(chunks, s[i:])
		} else {
			last := len(chunks) - 1
			chunks[last] = append(append([]rune{}, chunks[last]...), '-')
		}
		// ...drops the reversed ranges with the characters around them...
		for k := len(chunks) - 1; k > 0; k-- {
			prev, cur := chunks[k-1], chunks[k]
			if prev[len(prev)-1] > cur[0] {
				chunks[k-1] = append(append([]rune{}, prev[:len(prev)-1]...), cur[1:]...)
				chunks = append(chunks[:k], chunks[k+1:]...)
			}
		}
		// ...and joins them with dashes that make ranges; other dashes are members.
		for c, chunk := range chunks {
			if c > 0 {
				toks = append(toks, setToken{r: '-', dash: true})
			}
			for _, r := range chunk {
				toks = append(toks, setToken{r: r})
			}
		}
	}
	negate := len(toks) > 0 && !toks[0].dash && toks[0].r == '!'
	if negate {
		toks = toks[1:]
	}
	// Python's re reads the tokens left to right: a member, a range dash and another token
	// make a range; a dash with nothing after it is a member.
	var ranges []string
	for t := 0; t < len(toks); t++ {
		lo, hi := toks[t].r, toks[t].r
		if t+2 < len(toks) && toks[t+1].dash {
			hi = toks[t+2].r
			t += 2
		}
		if hi >= lo { // fnmatch never hands re a reversed range (dropped above)
			ranges = append(ranges, fmt.Sprintf(`\x{%x}-\x{%x}`, lo, hi))
		}
	}
	switch {
	case len(ranges) == 0 && negate:
		return "." // a negated empty set: any character
	case len(ranges) == 0:
		return `[^\x00-\x{10FFFF}]` // an empty set: nothing
	case negate:
		return "[^" + strings.Join(ranges, "") + "]"
	}
	return "[" + strings.Join(ranges, "") + "]"
}
