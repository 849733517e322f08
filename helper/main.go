// sforge-helper: the one static binary sforge mounts into work containers.
//
// Invoked as `sforge-submit` (argv[0], or first argument `submit`) it packs the task's
// submission paths from the working directory, sends them to the judge service, waits
// for the verdict and prints it. Invoked with first argument `relay` it listens on TCP
// inside the container and forwards each connection to a Unix socket, for clients that
// only speak TCP (a model API client, say) in a container with no network. Invoked as
// `sforge-game` (or first argument `game`) it plays a game task's sessions through the
// judge service.
//
// Standard library only, built with CGO_ENABLED=0: it must run in any Linux image,
// however bare (busybox, debian-slim: no curl, no wget, maybe no python).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const usage = `usage:
  sforge-submit                 pack [submission] paths from cwd, submit, print the verdict
  sforge-submit --list          this run's submissions and its best valid score
  sforge-submit --result ID     one submission's result (waits while it is graded)
  sforge-submit --no-wait       submit and print the submission id only
  sforge-submit --final         the run's last workspace: sforge's own, at the end, with
                                the run's final token (the agent's token may not)
  sforge-game new|step|status|close|list
                                play a game task (sforge-game --help)
  sforge-helper relay [--once] LISTEN_ADDR UNIX_SOCKET
                                forward TCP connections on LISTEN_ADDR (e.g. 127.0.0.1:8080)
                                to UNIX_SOCKET

environment (set by sforge for a run):
  SFORGE_SERVICE         unix:///run/sforge/service.sock or http://HOST:PORT
  SFORGE_TOKEN           this run's token
  SFORGE_SUBMIT_PATHS    JSON list of paths relative to cwd ("." = everything)
  SFORGE_SUBMIT_EXCLUDE  JSON list of path prefixes or globs to leave out
`

// progName prefixes messages: sforge-submit or sforge-game.
var progName = "sforge-submit"

func main() {
	args := os.Args[1:]
	name := filepath.Base(os.Args[0])
	mode := "submit"
	switch {
	case strings.HasPrefix(name, "sforge-game"):
		mode = "game"
	case strings.HasPrefix(name, "sforge-submit"):
	case len(args) > 0:
		switch args[0] {
		case "relay":
			mode, args = "relay", args[1:]
		case "game", "sforge-game":
			mode, args = "game", args[1:]
		case "submit", "sforge-submit":
			args = args[1:]
		}
	}
	var code int
	switch mode {
	case "relay":
		code = relayMain(args)
	case "game":
		progName = "sforge-game"
		code = gameMain(args)
	default:
		code = submitMain(args)
	}
	os.Exit(code)
}

func fail(format string, a ...interface{}) int {
	fmt.Fprintf(os.Stderr, progName+": "+format+"\n", a...)
	return 2
}
