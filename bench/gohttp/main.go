// bench/net.sh (c): an httptest server and 50 goroutines of keep-alive clients
// (one connection each) making N requests in all; prints requests per second.
// With URL, (i): only the clients, against URL (a server elsewhere).
//
//	gohttp N [URL]
package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"time"
)

func main() {
	n := 20000
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	url := ""
	if len(os.Args) > 2 {
		url = os.Args[2]
	} else {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "hello")
		}))
		defer ts.Close()
		url = ts.URL
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	var failed sync.Once
	start := time.Now()
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/50; i++ {
				resp, err := client.Get(url)
				if err != nil {
					failed.Do(func() { fmt.Fprintln(os.Stderr, "gohttp:", err) })
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("%.0f\n", float64(n)/time.Since(start).Seconds())
}
