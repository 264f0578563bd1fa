// bench/net.sh (i): a load generator on the host: 50 goroutines of keep-alive
// clients (one connection each) making N requests in all to URL; prints
// requests per second.
//
//	httpload URL N
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

func main() {
	url, n := os.Args[1], 20000
	if len(os.Args) > 2 {
		n, _ = strconv.Atoi(os.Args[2])
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
					failed.Do(func() { fmt.Fprintln(os.Stderr, "httpload:", err) })
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
