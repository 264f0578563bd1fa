package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// netHTTP: an httptest server and 50 goroutines of keep-alive clients, a raw TCP
// echo, UDP, and the names every container resolves (localhost from /etc/hosts).
func netHTTP() {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %d", r.Method, r.URL.Path, len(body))
	}))
	defer ts.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]int{}
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				var resp *http.Response
				var err error
				if i%2 == 0 {
					resp, err = http.Get(fmt.Sprintf("%s/g%d", ts.URL, g%5))
				} else {
					resp, err = http.Post(ts.URL+"/post", "text/plain", strings.NewReader(strings.Repeat("x", g*100)))
				}
				if err != nil {
					mu.Lock()
					seen["error: "+err.Error()]++
					mu.Unlock()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				seen[fmt.Sprintf("%d %s", resp.StatusCode, strings.SplitN(string(b), " ", 3)[0])]++
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("http: %s x%d\n", k, seen[k])
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		return
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(c, c)
		c.Close()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	fmt.Fprintf(c, "line one\nline two\n")
	r := bufio.NewReader(c)
	l1, _ := r.ReadString('\n')
	l2, _ := r.ReadString('\n')
	fmt.Printf("echo: %q %q\n", l1, l2)
	c.Close()
	ln.Close()

	u, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("udp:", err)
		return
	}
	d, _ := net.Dial("udp", u.LocalAddr().String())
	d.Write([]byte("datagram"))
	buf := make([]byte, 64)
	n, _, err := u.ReadFrom(buf)
	fmt.Printf("udp: %q %v\n", buf[:n], err)
	d.Close()
	u.Close()

	addrs, err := net.LookupHost("localhost")
	sort.Strings(addrs)
	fmt.Println("localhost has 127.0.0.1:", contains(addrs, "127.0.0.1"), err)
	_, err = net.Dial("tcp", "127.0.0.1:1")
	fmt.Println("refused:", strings.Contains(fmt.Sprint(err), "connection refused"))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// manyConns: N (default 10,000) loopback TCP connections held open at once, idle,
// then a round trip on ACTIVE of them (default all) while the others stay idle,
// and an orderly close: what a server with many keep-alive clients needs. Prints
// counts only (the same on any machine), and with -v the time of each phase on
// stderr.
func manyConns() {
	n, active := 10000, -1
	if len(os.Args) > 2 {
		n, _ = strconv.Atoi(os.Args[2])
	}
	if len(os.Args) > 3 {
		active, _ = strconv.Atoi(os.Args[3])
	}
	verbose := len(os.Args) > 4 && os.Args[4] == "-v"
	start := time.Now()
	phase := func(what string) {
		if verbose {
			fmt.Fprintf(os.Stderr, "%s: %v\n", what, time.Since(start))
			start = time.Now()
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		return
	}
	accepted := make(chan net.Conn, n)
	var closing sync.WaitGroup
	closing.Add(1)
	go func() {
		defer closing.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					fmt.Println("accept:", err)
				}
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	clients := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			fmt.Printf("dial %d: %v\n", i, err)
			break
		}
		clients = append(clients, c)
	}
	servers := make([]net.Conn, 0, n)
	for len(servers) < len(clients) {
		s, ok := <-accepted
		if !ok {
			break
		}
		servers = append(servers, s)
	}
	fmt.Println("open connections:", len(clients), len(servers))
	phase("connected")
	for len(clients) > len(servers) { // (no server side: nothing would answer)
		clients[len(clients)-1].Close()
		clients = clients[:len(clients)-1]
	}
	if active < 0 || active > len(clients) {
		active = len(clients)
	}
	// Every server side echoes one line; every client sends one and reads it back.
	var wg sync.WaitGroup
	for _, s := range servers[:active] {
		wg.Add(1)
		go func(s net.Conn) {
			defer wg.Done()
			line, err := bufio.NewReader(s).ReadString('\n')
			if err == nil {
				s.Write([]byte(line))
			}
		}(s)
	}
	ok := 0
	var mu sync.Mutex
	for i, c := range clients[:active] {
		wg.Add(1)
		go func(i int, c net.Conn) {
			defer wg.Done()
			want := fmt.Sprintf("conn %d\n", i)
			c.Write([]byte(want))
			got, err := bufio.NewReader(c).ReadString('\n')
			if err == nil && got == want {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}(i, c)
	}
	wg.Wait()
	fmt.Println("round trips:", ok)
	phase("round trips")
	for _, c := range clients {
		c.Close()
	}
	closed := 0
	buf := make([]byte, 1)
	for _, s := range servers {
		if _, err := s.Read(buf); err == io.EOF {
			closed++
		} else if closed < 3 {
			fmt.Println("read after the peer closed:", err)
		}
		s.Close()
	}
	fmt.Println("closed by the peer:", closed)
	ln.Close()
	closing.Wait()
	phase("closed")
}

// serveHTTP: `serve PORT N`: an HTTP server on PORT (all addresses) that answers
// N requests with "hello from onering PATH" and then exits; prints "listening"
// once it listens (for a test driving it from the host).
func serveHTTP() {
	port, n := os.Args[2], 1
	if len(os.Args) > 3 {
		n, _ = strconv.Atoi(os.Args[3])
	}
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	done := make(chan struct{})
	var mu sync.Mutex
	served := 0
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from onering %s\n", r.URL.Path)
		mu.Lock()
		served++
		if served == n {
			close(done)
		}
		mu.Unlock()
	})}
	go srv.Serve(ln)
	fmt.Println("listening")
	<-done
	time.Sleep(100 * time.Millisecond) // (the last response goes out)
	fmt.Println("served", n)
}

// fetchURL: `fetch URL`: GETs URL and prints the status and the body.
func fetchURL() {
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Get(os.Args[2])
	if err != nil {
		fmt.Println("fetch:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, b)
}
