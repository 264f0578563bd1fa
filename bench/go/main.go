// The seed's two Go benchmarks, one binary:
//
//	gobench write N   Test-1: N writes of 30 bytes to /dev/null.
//	gobench now N     N calls of time.Now (the vDSO question: a system call here).
//	gobench chan R    Test-2: 50 goroutines; each of R rounds sends one item to every
//	                  goroutine over its own channel; each goroutine writes 30 bytes
//	                  to /dev/null and sends a result back; the main goroutine also
//	                  writes 30 bytes per goroutine.
//
// Prints the elapsed time in milliseconds (for "now", nanoseconds per call).
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

var line = []byte("0123456789abcdefghijklmnopqrs\n") // 30 bytes

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gobench write|chan N")
		os.Exit(64)
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(64)
	}
	f, err := os.OpenFile("/dev/null", os.O_WRONLY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	start := time.Now()
	switch os.Args[1] {
	case "write":
		for i := 0; i < n; i++ {
			f.Write(line)
		}
	case "now":
		var sink int64
		for i := 0; i < n; i++ {
			sink += time.Now().UnixNano() & 1
		}
		if sink < 0 {
			fmt.Fprintln(os.Stderr, "impossible")
		}
	case "chan":
		const workers = 50
		in := make([]chan int, workers)
		out := make(chan int, workers)
		for w := range in {
			in[w] = make(chan int)
			go func(c chan int) {
				for v := range c {
					f.Write(line)
					out <- v + 1
				}
			}(in[w])
		}
		sum := 0
		for r := 0; r < n; r++ {
			for w := range in {
				in[w] <- r
			}
			for range in {
				sum += <-out
				f.Write(line)
			}
		}
		if sum == 0 {
			fmt.Fprintln(os.Stderr, "no work done")
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(64)
	}
	if os.Args[1] == "now" {
		fmt.Printf("%.1f\n", float64(time.Since(start).Nanoseconds())/float64(n))
		return
	}
	fmt.Printf("%.1f\n", float64(time.Since(start).Microseconds())/1000)
}
