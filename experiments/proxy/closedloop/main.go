// closedloop: a closed-loop memcached text-protocol load generator for experiments/proxy.
//
// Each of -c connections keeps -depth requests in flight (depth 1: send, wait for the reply,
// send the next). A request is a get of -keys random keys, or (one in -set-every, single-key
// loads only) a set of a -value-size value. Keys are key:<i> zero-padded to 20 bytes, i below
// -key-count, as the workloads in this folder preload them. Prints one JSON object: requests
// completed, rate, p50/p99 in microseconds, errors, and the latency histogram they come from
// (histogram_us: [microseconds, count] pairs in increasing order, each latency kept to three
// significant digits as HDR histograms keep it by default), so any percentile can be
// recomputed: the value at rank floor(p * (completed - 1)) of the sorted latencies.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("s", "127.0.0.1:22122", "server host:port")
	conns := flag.Int("c", 8, "connections")
	depth := flag.Int("depth", 1, "requests in flight per connection")
	keys := flag.Int("keys", 1, "keys per get")
	keyCount := flag.Int("key-count", 10000, "keys in the key space")
	setEvery := flag.Int("set-every", 11, "one request in N is a set (single-key loads; 0: none)")
	valueSize := flag.Int("value-size", 32, "value bytes of sets")
	duration := flag.Duration("d", 3*time.Second, "measured duration")
	preload := flag.Bool("preload", false, "set every key once, then exit")
	flag.Parse()

	if *preload {
		c, err := net.Dial("tcp", *addr)
		check(err)
		w := bufio.NewWriter(c)
		r := bufio.NewReader(c)
		value := strings.Repeat("v", *valueSize)
		for i := 0; i < *keyCount; i++ {
			fmt.Fprintf(w, "set %s 0 0 %d noreply\r\n%s\r\n", key(i), len(value), value)
		}
		w.WriteString("get " + key(0) + "\r\n")
		check(w.Flush())
		for {
			line, err := r.ReadString('\n')
			check(err)
			if line == "END\r\n" {
				break
			}
		}
		return
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	results := make([][]time.Duration, *conns)
	errors := make([]int, *conns)
	for i := 0; i < *conns; i++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			c, err := net.Dial("tcp", *addr)
			check(err)
			defer c.Close()
			rng := rand.New(rand.NewSource(int64(id) + 1))
			w := bufio.NewWriter(c)
			r := bufio.NewReaderSize(c, 64*1024)
			value := strings.Repeat("v", *valueSize)
			type req struct {
				sent time.Time
				set  bool
			}
			inflight := make(chan req, *depth)
			// A token per request in flight, returned once its reply is read.
			tokens := make(chan struct{}, *depth)
			done := make(chan struct{})
			lat := make([]time.Duration, 0, 1<<16)
			go func() {
				defer close(done)
				for q := range inflight {
					ok := readReply(r, q.set)
					if !ok {
						errors[id]++
					}
					lat = append(lat, time.Since(q.sent))
					<-tokens
				}
			}()
			n := 0
			for !stop.Load() {
				n++
				set := *keys == 1 && *setEvery > 0 && n%*setEvery == 0
				var b bytes.Buffer
				if set {
					fmt.Fprintf(&b, "set %s 0 0 %d\r\n%s\r\n", key(rng.Intn(*keyCount)), len(value), value)
				} else {
					b.WriteString("get")
					for k := 0; k < *keys; k++ {
						b.WriteByte(' ')
						b.WriteString(key(rng.Intn(*keyCount)))
					}
					b.WriteString("\r\n")
				}
				select {
				case tokens <- struct{}{}:
				default:
					// The window is full: send what is buffered, then wait for a reply.
					check(w.Flush())
					tokens <- struct{}{}
				}
				inflight <- req{time.Now(), set}
				w.Write(b.Bytes())
				if len(tokens) == 1 {
					// Nothing else in flight: do not hold this request back.
					check(w.Flush())
				}
			}
			check(w.Flush())
			close(inflight)
			<-done
			results[id] = lat
		}(i)
	}
	start := time.Now()
	time.Sleep(*duration)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	var all []time.Duration
	errs := 0
	for i := range results {
		all = append(all, results[i]...)
		errs += errors[i]
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	q := func(p float64) int64 {
		if len(all) == 0 {
			return 0
		}
		return significant3(all[int(p*float64(len(all)-1))].Microseconds())
	}
	histogram := [][2]int64{}
	for _, d := range all {
		us := significant3(d.Microseconds())
		if n := len(histogram); n > 0 && histogram[n-1][0] == us {
			histogram[n-1][1]++
		} else {
			histogram = append(histogram, [2]int64{us, 1})
		}
	}
	out := map[string]any{
		"completed": len(all), "elapsed_s": elapsed, "rps": float64(len(all)) / elapsed,
		"p50_us": q(0.5), "p99_us": q(0.99), "errors": errs, "histogram_us": histogram,
	}
	check(json.NewEncoder(os.Stdout).Encode(out))
}

// significant3 keeps three significant digits of v (rounding down): 999 stays, 12345 is 12300.
func significant3(v int64) int64 {
	step := int64(1)
	for v/step >= 1000 {
		step *= 10
	}
	return v / step * step
}

func key(i int) string { return fmt.Sprintf("key:%016d", i) }

// readReply reads one reply: a set's single line, or VALUE items until END. False on an
// error line.
func readReply(r *bufio.Reader, set bool) bool {
	for {
		line, err := r.ReadString('\n')
		check(err)
		if set {
			return line == "STORED\r\n"
		}
		if line == "END\r\n" {
			return true
		}
		if strings.HasPrefix(line, "VALUE ") {
			var k string
			var flags, n int
			if _, err := fmt.Sscanf(line, "VALUE %s %d %d", &k, &flags, &n); err != nil {
				return false
			}
			if _, err := r.Discard(n + 2); err != nil {
				check(err)
			}
			continue
		}
		return false
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "closedloop:", err)
		os.Exit(1)
	}
}
