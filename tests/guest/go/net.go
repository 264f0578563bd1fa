package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
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
