package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

type excludeCase struct {
	Pattern  string `json:"pattern"`
	Path     string `json:"path"`
	Excluded bool   `json:"excluded"`
	Why      string `json:"why"`
}

// packed lists the names of the regular files in a gzipped tar made by pack.
func packed(t *testing.T, archive []byte) map[string]bool {
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	names := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			names[hdr.Name] = true
		}
	}
}

func readCases(t *testing.T, file string) []excludeCase {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Cases []excludeCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	return table.Cases
}

// TestExcludeRules: for every case of testdata/exclude_rules.json (the judge's decisions,
// checked against sforge/grading/selection.py by tests/unit/test_exclude_rules.py), pack leaves the file
// out exactly when the judge would.
func TestExcludeRules(t *testing.T) {
	cases := readCases(t, filepath.Join("testdata", "exclude_rules.json"))
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	// More cases in the same form, decided by the judge at test time (random patterns and
	// paths, from tests/unit/test_exclude_rules.py).
	if extra := os.Getenv("SFORGE_EXCLUDE_CASES"); extra != "" {
		cases = append(cases, readCases(t, extra)...)
	}
	start, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(start)
	for _, c := range cases {
		ws := t.TempDir()
		file := filepath.Join(ws, filepath.FromSlash(c.Path))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chdir(ws); err != nil { // pack packs the working directory, as the helper does
			t.Fatal(err)
		}
		archive, _, err := pack(".", []string{"."}, []string{c.Pattern})
		if err != nil {
			t.Fatalf("pattern %q, path %q: %v", c.Pattern, c.Path, err)
		}
		if excluded := !packed(t, archive)[c.Path]; excluded != c.Excluded {
			t.Errorf("pattern %q, path %q: excluded=%v, the judge says %v (%s)",
				c.Pattern, c.Path, excluded, c.Excluded, c.Why)
		}
	}
}
