// Go programs for onering's guest tests, one binary with a mode per feature (one
// build): `guest MODE`. Each mode prints what it checks, so that the host's output
// and onering's can be compared, and exits 0 unless something went wrong.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: guest MODE")
		os.Exit(64)
	}
	modes := map[string]func(){
		"hello":    hello,
		"chan":     channels,
		"timers":   timers,
		"preempt":  preempt,
		"panic":    panicRecover,
		"nil":      nilDeref,
		"files":    files,
		"rootfs":   rootfs,
		"exec":     execFails,
		"sleepers": sleepers,
		"net":      netHTTP,
		"conns":    manyConns,
		"serve":    serveHTTP,
		"fetch":    fetchURL,
		"cpus":     cpus,
	}
	f, ok := modes[os.Args[1]]
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(64)
	}
	f()
}

// What the runtime sized itself to: CPUs (sched_getaffinity) and GOMAXPROCS
// (since Go 1.25 also the cgroup's cpu.max, read through /proc/self/cgroup,
// /proc/self/mountinfo and /sys/fs/cgroup).
func cpus() {
	fmt.Println("NumCPU", runtime.NumCPU(), "GOMAXPROCS", runtime.GOMAXPROCS(0))
}

func hello() {
	fmt.Println("hello from go", len(os.Args), runtime.GOOS, runtime.GOARCH)
	host, err := os.Hostname()
	fmt.Println("hostname ok:", err == nil && host != "")
	fmt.Println("pid 1 or more:", os.Getpid() >= 1)
}

// Goroutines and channels: a pipeline, a fan-in, a WaitGroup, a mutex, select.
func channels() {
	src := make(chan int)
	sq := make(chan int)
	go func() {
		for i := 1; i <= 1000; i++ {
			src <- i
		}
		close(src)
	}()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range src {
				sq <- v * v
			}
		}()
	}
	go func() { wg.Wait(); close(sq) }()
	sum := 0
	for v := range sq {
		sum += v
	}
	fmt.Println("sum of squares 1..1000:", sum)

	var mu sync.Mutex
	var n int64
	var atom atomic.Int64
	var wg2 sync.WaitGroup
	for g := 0; g < 100; g++ {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			for i := 0; i < 1000; i++ {
				mu.Lock()
				n++
				mu.Unlock()
				atom.Add(1)
			}
		}()
	}
	wg2.Wait()
	fmt.Println("mutex and atomic counts:", n, atom.Load())

	done := make(chan struct{})
	res := make(chan string, 3)
	go func() {
		select {
		case <-done:
			res <- "done"
		case <-time.After(5 * time.Second):
			res <- "timeout"
		}
	}()
	close(done)
	fmt.Println("select:", <-res)
	fmt.Println("GOMAXPROCS matches CPUs:", runtime.GOMAXPROCS(0) == runtime.NumCPU())
}

// Timers and tickers fire, in order, not early.
func timers() {
	start := time.Now()
	t := time.NewTicker(10 * time.Millisecond)
	ticks := 0
	for range t.C {
		ticks++
		if ticks == 5 {
			break
		}
	}
	t.Stop()
	el := time.Since(start)
	fmt.Println("5 ticks of 10ms took at least 50ms:", el >= 50*time.Millisecond, "and under 2s:", el < 2*time.Second)
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	// 40 ms apart: on a loaded machine (tests run in parallel, two vCPUs per VM on
	// two cores) the host may hold a vCPU thread back for 10 ms.
	for _, d := range []int{120, 40, 80} {
		wg.Add(1)
		d := d
		time.AfterFunc(time.Duration(d)*time.Millisecond, func() {
			mu.Lock()
			order = append(order, d)
			mu.Unlock()
			wg.Done()
		})
	}
	wg.Wait()
	fmt.Println("AfterFunc order:", order)
	s := time.Now()
	time.Sleep(20 * time.Millisecond)
	fmt.Println("Sleep(20ms) slept at least 20ms:", time.Since(s) >= 20*time.Millisecond)
	tm := time.NewTimer(time.Hour)
	fmt.Println("Stop of a pending timer:", tm.Stop())
	fmt.Println("wall clock after 2020:", time.Now().Year() >= 2020)
}

// A goroutine spinning in a loop without calls must not keep others from running
// (asynchronous preemption: sysmon sends SIGURG to its thread).
func preempt() {
	runtime.GOMAXPROCS(1)
	var stop atomic.Bool
	go func() {
		x := 0
		for !stop.Load() {
			x++
		}
		_ = x
	}()
	time.Sleep(10 * time.Millisecond) // the spinner takes the only P
	start := time.Now()
	done := make(chan bool)
	go func() { done <- true }()
	<-done
	stop.Store(true)
	fmt.Println("a goroutine ran beside a spinning one:", time.Since(start) < 5*time.Second)
}

func panicRecover() {
	defer func() {
		r := recover()
		fmt.Println("recovered:", r)
		var err error
		func() {
			defer func() {
				if e, ok := recover().(error); ok {
					err = e
				}
			}()
			var a []int
			_ = a[3]
		}()
		fmt.Println("index error recovered:", err != nil && strings.Contains(err.Error(), "index out of range"))
		var re runtime.Error
		fmt.Println("is a runtime.Error:", errors.As(err, &re))
	}()
	panic("boom")
}

type node struct{ next *node }

// A nil dereference: Go prints its panic and exits with status 2.
func nilDeref() {
	var p *node
	fmt.Println("about to dereference nil")
	fmt.Println(p.next)
}

func files() {
	dir, err := os.MkdirTemp("", "gotest")
	check(err)
	p := filepath.Join(dir, "a.txt")
	check(os.WriteFile(p, []byte("hello file\n"), 0o644))
	b, err := os.ReadFile(p)
	check(err)
	fmt.Print("read back: ", string(b))
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	check(err)
	_, err = f.WriteString("more\n")
	check(err)
	check(f.Close())
	st, err := os.Stat(p)
	check(err)
	fmt.Println("size:", st.Size(), "mode:", st.Mode())
	check(os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	check(os.Rename(p, filepath.Join(dir, "sub", "b.txt")))
	var names []string
	check(filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		check(err)
		rel, _ := filepath.Rel(dir, path)
		names = append(names, rel)
		return nil
	}))
	sort.Strings(names)
	fmt.Println("walk:", names)
	_, err = os.Stat(filepath.Join(dir, "missing"))
	fmt.Println("missing file is ErrNotExist:", errors.Is(err, os.ErrNotExist))
	check(os.RemoveAll(dir))
	_, err = os.Stat(dir)
	fmt.Println("removed:", errors.Is(err, os.ErrNotExist))
	wd, err := os.Getwd()
	check(err)
	fmt.Println("cwd:", wd)
}

// With --rootfs DIR: lists and reads what is there (the test puts files in DIR).
func rootfs() {
	entries, err := os.ReadDir("/data")
	check(err)
	for _, e := range entries {
		b, err := os.ReadFile("/data/" + e.Name())
		check(err)
		fmt.Printf("%s: %q\n", e.Name(), b)
	}
	err = os.WriteFile("/data/new", []byte("x"), 0o644)
	fmt.Println("rootfs is read-only:", err != nil)
}

func execFails() {
	err := exec.Command("/bin/true").Run()
	fmt.Println("exec fails with an error:", err != nil)
	if err != nil {
		fmt.Println("error:", err)
	}
}

// Many goroutines sleeping short and long at once.
func sleepers() {
	var wg sync.WaitGroup
	var late atomic.Int64
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d := time.Duration(1+i%20) * time.Millisecond
			s := time.Now()
			time.Sleep(d)
			if time.Since(s) < d {
				late.Add(1)
			}
		}(i)
	}
	wg.Wait()
	fmt.Println("200 sleepers, none woke early:", late.Load() == 0)
}

func check(err error) {
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}
