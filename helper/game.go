package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

const gameUsage = `usage:
  sforge-game new                  start a session; prints {"id", "index", ..., "hello": <the game's opening message>}
  sforge-game step [-s ID] JSON    send one request to the game; prints its reply (one JSON line)
  sforge-game step [-s ID] -       send each line of stdin as a request; prints each reply
  sforge-game status [ID]          the session: state, steps, time left, its result once over
  sforge-game close [ID]           end the session now (an unfinished game does not count)
  sforge-game list                 this run's sessions

ID defaults to the run's newest session. A step past the step rate waits and retries.
Exit codes: 0 done, 1 the game is over (a step to a finished session), 2 usage,
3 refused (limits, no such session, not a game task: any 4xx answer), 4 service
unreachable or failing.

environment (set by sforge for a run): SFORGE_SERVICE, SFORGE_TOKEN
`

func gameMain(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Print(gameUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, args := args[0], args[1:]
	session := "current"
	var rest []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-s" || a == "--session":
			if i+1 >= len(args) {
				return fail("%s needs a session id", a)
			}
			session = args[i+1]
			i++
		case strings.HasPrefix(a, "--session="):
			session = strings.TrimPrefix(a, "--session=")
		default:
			rest = append(rest, a)
		}
	}
	s, err := newService()
	if err != nil {
		return fail("%v", err)
	}
	switch cmd {
	case "new":
		return s.printJSON("POST", "/v1/games")
	case "list", "ls":
		return s.printJSON("GET", "/v1/games")
	case "status", "close":
		if len(rest) > 0 {
			session = rest[0]
		}
		if cmd == "close" {
			return s.printJSON("POST", "/v1/games/"+session+"/close")
		}
		return s.printJSON("GET", "/v1/games/"+session)
	case "step":
		if len(rest) != 1 {
			return fail("step needs one JSON request (or - for lines on stdin)\n%s", gameUsage)
		}
		if rest[0] != "-" {
			return s.step(session, []byte(rest[0]))
		}
		in := bufio.NewReaderSize(os.Stdin, 1<<16)
		for {
			line, err := in.ReadBytes('\n')
			if len(bytes.TrimSpace(line)) > 0 {
				if code := s.step(session, bytes.TrimSpace(line)); code != 0 {
					return code
				}
			}
			if err == io.EOF {
				return 0
			} else if err != nil {
				return fail("reading stdin: %v", err)
			}
		}
	}
	return fail("unknown command %q\n%s", cmd, gameUsage)
}

func (s *service) printJSON(method, url string) int {
	data, _, err := s.send(method, url, nil, "")
	if err != nil {
		return report(err)
	}
	var compact bytes.Buffer
	if json.Compact(&compact, data) != nil {
		compact.Reset()
		compact.Write(bytes.TrimSpace(data))
	}
	fmt.Println(compact.String())
	return 0
}

// step sends one request and prints the game's reply as it wrote it; a step over the
// rate limit waits for Retry-After and is sent again (it did not reach the game).
func (s *service) step(session string, request []byte) int {
	for {
		data, hdr, err := s.send("POST", "/v1/games/"+session+"/step", request,
			"application/json")
		if e, ok := err.(*apiError); ok && e.Status == http.StatusTooManyRequests &&
			e.Reason == "rate" {
			wait := time.Duration(e.WaitS * float64(time.Second))
			if wait <= 0 {
				wait = e.RetryAfter
			}
			time.Sleep(wait)
			continue
		}
		if e, ok := err.(*apiError); ok && e.Status == http.StatusGone {
			fmt.Fprintf(os.Stderr, "sforge-game: %s\n", e.Message)
			return exitInvalid
		}
		if err != nil {
			return report(err)
		}
		os.Stdout.Write(bytes.TrimRight(data, "\n"))
		os.Stdout.Write([]byte("\n"))
		if hdr.Get("Sforge-Session-State") == "finished" {
			score := hdr.Get("Sforge-Score")
			if score == "" {
				score = "none"
			}
			fmt.Fprintf(os.Stderr, "sforge-game: the game is over: score %s (valid: %s)\n",
				score, hdr.Get("Sforge-Valid"))
		}
		return 0
	}
}
