package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Exit codes: 0 graded valid, 1 graded invalid, 2 usage or setup error, 3 refused by the
// service (budget, cooldown, run ended), 4 service unreachable or failing.
const (
	exitInvalid     = 1
	exitRefused     = 3
	exitUnreachable = 4
)

type service struct {
	base   string
	token  string
	client *http.Client
}

func newService() (*service, error) {
	addr := os.Getenv("SFORGE_SERVICE")
	token := os.Getenv("SFORGE_TOKEN")
	if addr == "" {
		return nil, fmt.Errorf("SFORGE_SERVICE is not set (unix:///path/to.sock or http://host:port)")
	}
	if token == "" {
		return nil, fmt.Errorf("SFORGE_TOKEN is not set")
	}
	s := &service{token: token}
	switch {
	case strings.HasPrefix(addr, "unix://"):
		sock := strings.TrimPrefix(addr, "unix://")
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}
		s.base, s.client = "http://sforge", &http.Client{Transport: tr}
	case strings.HasPrefix(addr, "http://"):
		s.base, s.client = strings.TrimRight(addr, "/"), &http.Client{}
	default:
		return nil, fmt.Errorf("SFORGE_SERVICE=%q: expected unix:///path or http://host:port", addr)
	}
	return s, nil
}

type apiError struct {
	Status     int
	Message    string  `json:"error"`
	Reason     string  `json:"reason"`
	WaitS      float64 `json:"wait_s"`
	RetryAfter time.Duration
}

func (e *apiError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message) }

// do sends one request and decodes its JSON answer into out.
func (s *service) do(method, url string, body []byte, ctype string, out interface{}) error {
	data, _, err := s.send(method, url, body, ctype)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

// send sends one request and returns the answer's body and headers; a 503 (the service
// is at capacity or draining) waits for its Retry-After and tries again, so a full queue
// never costs the agent a submission. Other statuses >= 300 are an *apiError.
func (s *service) send(method, url string, body []byte, ctype string) ([]byte, http.Header, error) {
	for {
		req, err := http.NewRequest(method, s.base+url, bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+s.token)
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return nil, nil, err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, nil, err
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			wait := retryAfter(resp.Header.Get("Retry-After"))
			fmt.Fprintf(os.Stderr, "%s: service busy (%s); retrying in %s\n",
				progName, message(data), wait)
			time.Sleep(wait)
			// The service may have closed the idle connection meanwhile (uvicorn keeps one
			// 5 s, as long as a default Retry-After): the retry takes a new one.
			s.client.CloseIdleConnections()
			continue
		}
		if resp.StatusCode >= 300 {
			e := &apiError{Status: resp.StatusCode}
			if json.Unmarshal(data, e) != nil || e.Message == "" {
				e.Message = strings.TrimSpace(string(data))
			}
			e.RetryAfter = retryAfter(resp.Header.Get("Retry-After"))
			return nil, resp.Header, e
		}
		return data, resp.Header, nil
	}
}

func retryAfter(h string) time.Duration {
	if n, err := strconv.ParseFloat(strings.TrimSpace(h), 64); err == nil && n >= 0 {
		return time.Duration(n * float64(time.Second))
	}
	return 5 * time.Second
}

func message(data []byte) string {
	var e apiError
	if json.Unmarshal(data, &e) == nil && e.Message != "" {
		return e.Message
	}
	return strings.TrimSpace(string(data))
}

type detail struct {
	Name   string          `json:"name"`
	Status string          `json:"status"`
	Score  json.RawMessage `json:"score"`
	Info   string          `json:"message"`
}

type result struct {
	Valid    bool            `json:"valid"`
	Score    *float64        `json:"score"`
	Rescaled *float64        `json:"rescaled"`
	Summary  string          `json:"summary"`
	Reason   *string         `json:"reason"`
	TimedOut bool            `json:"timed_out"`
	Details  json.RawMessage `json:"details"`
	Rejected []struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
	} `json:"rejected"`
}

type submission struct {
	ID          int64    `json:"id"`
	Round       int      `json:"round"`
	State       string   `json:"state"`
	Final       bool     `json:"final"`
	SubmittedAt string   `json:"submitted_at"`
	ElapsedS    *float64 `json:"elapsed_s"`
	FromStore   bool     `json:"from_store"`
	Result      *result  `json:"result"`
}

type history struct {
	Run struct {
		RunID     string   `json:"run_id"`
		Task      string   `json:"task"`
		Direction string   `json:"direction"`
		Budget    *int     `json:"budget"`
		Used      int      `json:"used"`
		CooldownS *float64 `json:"cooldown_s"`
		State     string   `json:"state"`
	} `json:"run"`
	Submissions []submission `json:"submissions"`
	Best        *submission  `json:"best"`
}

func submitMain(args []string) int {
	list, wait, final, resultID := false, true, false, ""
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--list" || a == "-l":
			list = true
		case a == "--no-wait":
			wait = false
		case a == "--final":
			final = true
		case a == "--result" || a == "-r":
			if i+1 >= len(args) {
				return fail("--result needs a submission id")
			}
			resultID = args[i+1]
			i++
		case strings.HasPrefix(a, "--result="):
			resultID = strings.TrimPrefix(a, "--result=")
		case a == "-h" || a == "--help":
			fmt.Print(usage)
			return 0
		default:
			return fail("unknown argument %q\n%s", a, usage)
		}
	}
	s, err := newService()
	if err != nil {
		return fail("%v", err)
	}
	switch {
	case list:
		return s.list()
	case resultID != "":
		return s.await(resultID)
	}
	paths, err := envList("SFORGE_SUBMIT_PATHS", []string{"."})
	if err != nil {
		return fail("%v", err)
	}
	exclude, err := envList("SFORGE_SUBMIT_EXCLUDE", nil)
	if err != nil {
		return fail("%v", err)
	}
	archive, n, err := pack(".", paths, exclude)
	if err != nil {
		return fail("packing: %v", err)
	}
	fmt.Fprintf(os.Stderr, "sforge-submit: packed %d file(s), %d bytes\n", n, len(archive))
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("archive", "submission.tar.gz")
	_, _ = fw.Write(archive)
	_ = mw.Close()
	var sub submission
	url := "/v1/submissions"
	if final {
		url += "?final=true"
	}
	if err := s.do("POST", url, body.Bytes(), mw.FormDataContentType(), &sub); err != nil {
		return report(err)
	}
	fmt.Printf("submission %d (round %d) accepted\n", sub.ID, sub.Round)
	if !wait {
		return 0
	}
	return s.finish(sub)
}

func (s *service) await(id string) int {
	var sub submission
	if err := s.do("GET", "/v1/submissions/"+id, nil, "", &sub); err != nil {
		return report(err)
	}
	return s.finish(sub)
}

// finish long-polls until the submission has a verdict, then prints it.
func (s *service) finish(sub submission) int {
	for sub.State == "queued" || sub.State == "running" {
		url := fmt.Sprintf("/v1/submissions/%d?wait=30", sub.ID)
		if err := s.do("GET", url, nil, "", &sub); err != nil {
			return report(err)
		}
	}
	return printResult(sub)
}

func printResult(sub submission) int {
	if sub.Result == nil {
		fmt.Printf("submission %d: %s (no result)\n", sub.ID, sub.State)
		return exitInvalid
	}
	r := sub.Result
	verdict := "VALID"
	if !r.Valid {
		verdict = "INVALID"
	}
	fmt.Printf("submission %d (round %d): %s score=%s", sub.ID, sub.Round, verdict, num(r.Score))
	if r.Rescaled != nil {
		fmt.Printf(" rescaled=%.2f", *r.Rescaled)
	}
	if sub.FromStore {
		fmt.Print(" (already graded: same archive)")
	}
	fmt.Println()
	if r.Summary != "" {
		fmt.Printf("summary: %s\n", r.Summary)
	}
	if r.Reason != nil && *r.Reason != "" {
		fmt.Printf("reason: %s\n", *r.Reason)
	}
	var details []detail
	if json.Unmarshal(r.Details, &details) == nil {
		failed := 0
		for _, d := range details {
			st := strings.ToUpper(d.Status)
			if st == "PASSED" || st == "PASS" || st == "OK" {
				continue
			}
			if failed++; failed <= 20 {
				line := fmt.Sprintf("  %s %s", st, d.Name)
				if d.Info != "" {
					line += ": " + d.Info
				}
				fmt.Println(line)
			}
		}
		if failed > 0 {
			fmt.Printf("failed: %d of %d\n", failed, len(details))
		}
	}
	for _, rej := range r.Rejected {
		fmt.Printf("  not submitted %s: %s\n", rej.Path, rej.Reason)
	}
	if !r.Valid {
		return exitInvalid
	}
	return 0
}

func num(f *float64) string {
	if f == nil {
		return "-"
	}
	return strconv.FormatFloat(*f, 'g', -1, 64)
}

func (s *service) list() int {
	var h history
	if err := s.do("GET", "/v1/runs/me/history", nil, "", &h); err != nil {
		return report(err)
	}
	budget := "unlimited"
	if h.Run.Budget != nil {
		budget = fmt.Sprintf("%d of %d used", h.Run.Used, *h.Run.Budget)
	}
	fmt.Printf("run %s, task %s (%s is better), budget %s\n", h.Run.RunID, h.Run.Task,
		map[bool]string{true: "lower", false: "higher"}[h.Run.Direction == "minimize"], budget)
	fmt.Printf("%-6s %-5s %-9s %-8s %-10s %s\n", "id", "round", "state", "valid", "score", "summary")
	for _, sub := range h.Submissions {
		valid, score, summary := "-", "-", ""
		if sub.Result != nil {
			valid = strconv.FormatBool(sub.Result.Valid)
			score = num(sub.Result.Score)
			summary = sub.Result.Summary
			if !sub.Result.Valid && sub.Result.Reason != nil {
				summary = *sub.Result.Reason
			}
		}
		fmt.Printf("%-6d %-5d %-9s %-8s %-10s %s\n", sub.ID, sub.Round, sub.State, valid, score,
			oneLine(summary, 60))
	}
	if h.Best != nil && h.Best.Result != nil {
		fmt.Printf("best: submission %d, score %s\n", h.Best.ID, num(h.Best.Result.Score))
	} else {
		fmt.Println("best: no valid submission yet")
	}
	return 0
}

func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

func report(err error) int {
	if e, ok := err.(*apiError); ok {
		if e.Status == http.StatusTooManyRequests {
			msg := fmt.Sprintf("%s: refused (%s): %s", progName, e.Reason, e.Message)
			if e.WaitS > 0 {
				msg += fmt.Sprintf("; try again in %.0f s", e.WaitS)
			}
			fmt.Fprintln(os.Stderr, msg)
			return exitRefused
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", progName, e)
		if e.Status >= 400 && e.Status < 500 { // the service answered: a refusal, not an outage
			return exitRefused
		}
		return exitUnreachable
	}
	fmt.Fprintf(os.Stderr, "%s: cannot reach the judge service: %v\n", progName, err)
	return exitUnreachable
}

func envList(name string, def []string) ([]string, error) {
	raw := strings.TrimSpace(os.Getenv(name))
	if raw == "" {
		return def, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("%s: expected a JSON list of strings, got %q", name, raw)
	}
	return out, nil
}

// clean normalises a pattern or a [submission] paths entry the way the judge does: no
// blanks around it (Python's str.strip), no "", "." components.
func clean(p string) string {
	return relPath(strings.TrimFunc(p, pySpace))
}

// relPath is a path of the workspace as the judge reads a member name: no "", "."
// components; blanks are part of the name.
func relPath(p string) string {
	var parts []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/")
}

func under(p, prefix string) bool {
	return prefix == "" || p == prefix || strings.HasPrefix(p, prefix+"/")
}

type selection struct {
	paths      []string
	everything bool
	exclude    []excludeRule
}

// excluded is the judge's rule (exclude.go): a plain pattern is a path prefix, a glob
// without "/" matches any component, a glob with "/" matches the path or one of its
// ancestors.
func (s selection) excluded(p string) bool {
	for _, rule := range s.exclude {
		if rule.excludes(p) {
			return true
		}
	}
	return false
}

func (s selection) selected(p string) bool {
	if !s.everything {
		ok := false
		for _, q := range s.paths {
			ok = ok || under(p, q)
		}
		if !ok {
			return false
		}
	}
	return !s.excluded(p)
}

// xattrRecords reads the ACLs and user.* xattrs of p as PAX records (SCHILY.xattr.NAME), the
// form GNU tar writes and Docker's extraction applies. Security, trusted and other system
// xattrs are never sent.
func xattrRecords(p string) map[string]string {
	size, err := syscall.Listxattr(p, nil)
	if err != nil || size <= 0 {
		return nil
	}
	names := make([]byte, size)
	if size, err = syscall.Listxattr(p, names); err != nil {
		return nil
	}
	recs := map[string]string{}
	for _, name := range strings.Split(strings.TrimRight(string(names[:size]), "\x00"), "\x00") {
		if !strings.HasPrefix(name, "user.") && name != "system.posix_acl_access" &&
			name != "system.posix_acl_default" {
			continue
		}
		n, err := syscall.Getxattr(p, name, nil)
		if err != nil || n < 0 {
			continue
		}
		value := make([]byte, n)
		if n, err = syscall.Getxattr(p, name, value); err != nil {
			continue
		}
		recs["SCHILY.xattr."+name] = string(value[:n])
	}
	return recs
}

// pack writes the selected files under root into a gzipped tar (names relative to root).
func pack(root string, paths, exclude []string) ([]byte, int, error) {
	sel := selection{}
	for _, p := range paths {
		c := clean(p)
		sel.paths = append(sel.paths, c)
		sel.everything = sel.everything || c == ""
	}
	for _, e := range exclude {
		sel.exclude = append(sel.exclude, newExcludeRule(e))
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	count := 0
	walk := func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := relPath(filepath.ToSlash(p))
		if rel == "" {
			return nil
		}
		if sel.excluded(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !sel.selected(rel) {
			if d.IsDir() && !sel.everything && !ancestorOfPath(rel, sel.paths) {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // sockets, fifos, devices: never submitted
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		// Every mode bit, the numeric owner and group, POSIX ACLs and user.* xattrs go
		// along: for some tasks the metadata is the answer. The judge's filter decides what
		// it keeps (the task's [submission] keep_metadata) and lists what it changes.
		hdr.Name, hdr.Uname, hdr.Gname = rel, "", ""
		if info.Mode()&fs.ModeSymlink == 0 {
			if recs := xattrRecords(p); len(recs) > 0 {
				hdr.PAXRecords, hdr.Format = recs, tar.FormatPAX
			}
		}
		if info.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(tw, f); err != nil {
				return err
			}
			count++
		}
		return nil
	}
	if err := filepath.WalkDir(root, walk); err != nil {
		return nil, 0, err
	}
	if err := tw.Close(); err != nil {
		return nil, 0, err
	}
	if err := gz.Close(); err != nil {
		return nil, 0, err
	}
	return buf.Bytes(), count, nil
}

func ancestorOfPath(dir string, paths []string) bool {
	for _, p := range paths {
		if strings.HasPrefix(p, dir+"/") {
			return true
		}
	}
	return false
}
