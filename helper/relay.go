package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

// relayMain forwards every TCP connection accepted on listen to the Unix socket target.
func relayMain(args []string) int {
	once := false
	if len(args) > 0 && args[0] == "--once" {
		once, args = true, args[1:]
	}
	if len(args) != 2 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	listen, target := args[0], args[1]
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay: cannot listen on %s: %v\n", listen, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "relay: %s -> unix:%s\n", ln.Addr(), target)
	for {
		conn, err := ln.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "relay: accept: %v\n", err)
			return 1
		}
		if once {
			pipe(conn, target)
			return 0
		}
		go pipe(conn, target)
	}
}

func pipe(conn net.Conn, target string) {
	defer conn.Close()
	up, err := net.Dial("unix", target)
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay: cannot reach %s: %v\n", target, err)
		return
	}
	defer up.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	copyHalf := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		// Pass the end of one direction on, so request/response protocols finish.
		if c, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = c.CloseWrite()
		}
	}
	go copyHalf(up, conn)
	go copyHalf(conn, up)
	wg.Wait()
}
