// Package gomemcache_test runs the gomemcache client against a real `tailtrim serve`.
//
// The server binary comes from TAILTRIM_BIN (default ../../target/release/tailtrim); extra
// server arguments from TAILTRIM_SERVE_ARGS (e.g. "--dispatch size-aware"). Pointing
// TAILTRIM_BIN at a memcached binary runs the same suite against stock memcached.
package gomemcache_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

var serverAddr string

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func serverCommand(port int) *exec.Cmd {
	bin := os.Getenv("TAILTRIM_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "target", "release", "tailtrim")
	}
	common := []string{"-p", strconv.Itoa(port), "-U", "0", "-l", "127.0.0.1", "-m", "64", "-I", "1m", "-t", "2"}
	var args []string
	if strings.Contains(filepath.Base(bin), "memcached") {
		args = common
		if os.Geteuid() == 0 {
			args = append(args, "-u", "root")
		}
	} else {
		args = append([]string{"serve"}, common...)
	}
	args = append(args, strings.Fields(os.Getenv("TAILTRIM_SERVE_ARGS"))...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	return cmd
}

func TestMain(m *testing.M) {
	port, err := freePort()
	if err != nil {
		fmt.Fprintln(os.Stderr, "free port:", err)
		os.Exit(1)
	}
	cmd := serverCommand(port)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "cannot start server:", err)
		os.Exit(1)
	}
	serverAddr = fmt.Sprintf("127.0.0.1:%d", port)
	ready := false
	for i := 0; i < 200; i++ {
		c, err := net.DialTimeout("tcp", serverAddr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			ready = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	code := 1
	if ready {
		code = m.Run()
	} else {
		fmt.Fprintln(os.Stderr, "server did not accept connections on", serverAddr)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	os.Exit(code)
}

func client(t *testing.T) *memcache.Client {
	t.Helper()
	c := memcache.New(serverAddr)
	c.Timeout = 5 * time.Second
	c.MaxIdleConns = 4
	return c
}

// key returns a key unique to the running test.
func key(t *testing.T, suffix string) string {
	return strings.ReplaceAll(t.Name(), "/", "_") + "_" + suffix
}

func TestSetGet(t *testing.T) {
	c := client(t)
	k := key(t, "a")
	if err := c.Set(&memcache.Item{Key: k, Value: []byte("hello"), Flags: 42}); err != nil {
		t.Fatal(err)
	}
	it, err := c.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	if string(it.Value) != "hello" || it.Flags != 42 {
		t.Fatalf("got %q flags %d", it.Value, it.Flags)
	}
	if _, err := c.Get(key(t, "missing")); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("missing key: want ErrCacheMiss, got %v", err)
	}
}

func TestGetMulti(t *testing.T) {
	c := client(t)
	var keys []string
	for i := 0; i < 100; i++ {
		k := key(t, strconv.Itoa(i))
		keys = append(keys, k)
		if i%3 == 0 {
			continue // leave some missing
		}
		if err := c.Set(&memcache.Item{Key: k, Value: []byte("v" + k)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.GetMulti(keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		it, ok := got[k]
		if i%3 == 0 {
			if ok {
				t.Fatalf("%s should be missing", k)
			}
			continue
		}
		if !ok || string(it.Value) != "v"+k {
			t.Fatalf("%s: got %v", k, it)
		}
	}
}

func TestCompareAndSwap(t *testing.T) {
	c := client(t)
	k := key(t, "cas")
	if err := c.Set(&memcache.Item{Key: k, Value: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	it, err := c.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	stale, _ := c.Get(k)
	it.Value = []byte("two")
	if err := c.CompareAndSwap(it); err != nil {
		t.Fatalf("first CAS: %v", err)
	}
	stale.Value = []byte("three")
	if err := c.CompareAndSwap(stale); !errors.Is(err, memcache.ErrCASConflict) {
		t.Fatalf("stale CAS: want ErrCASConflict, got %v", err)
	}
	now, _ := c.Get(k)
	if string(now.Value) != "two" {
		t.Fatalf("value after CAS = %q", now.Value)
	}
	if err := c.Delete(k); err != nil {
		t.Fatal(err)
	}
	if err := c.CompareAndSwap(now); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("CAS on deleted: want ErrCacheMiss, got %v", err)
	}
}

func TestIncrementDecrement(t *testing.T) {
	c := client(t)
	k := key(t, "n")
	if _, err := c.Increment(k, 1); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("incr missing: %v", err)
	}
	if err := c.Set(&memcache.Item{Key: k, Value: []byte("10")}); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Increment(k, 5); err != nil || v != 15 {
		t.Fatalf("incr: %d %v", v, err)
	}
	if v, err := c.Decrement(k, 100); err != nil || v != 0 {
		t.Fatalf("decr floors at 0: %d %v", v, err)
	}
	if err := c.Set(&memcache.Item{Key: k, Value: []byte("18446744073709551615")}); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Increment(k, 2); err != nil || v != 1 {
		t.Fatalf("incr wraps at 2^64: %d %v", v, err)
	}
	if err := c.Set(&memcache.Item{Key: k, Value: []byte("abc")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Increment(k, 1); err == nil {
		t.Fatal("incr on a non-number must fail")
	}
}

func TestDelete(t *testing.T) {
	c := client(t)
	k := key(t, "d")
	if err := c.Delete(k); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("delete missing: %v", err)
	}
	_ = c.Set(&memcache.Item{Key: k, Value: []byte("x")})
	if err := c.Delete(k); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(k); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("get after delete: %v", err)
	}
}

func TestTouchAndExpiry(t *testing.T) {
	c := client(t)
	k := key(t, "t")
	if err := c.Touch(k, 10); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("touch missing: %v", err)
	}
	if err := c.Set(&memcache.Item{Key: k, Value: []byte("x"), Expiration: 100}); err != nil {
		t.Fatal(err)
	}
	if err := c.Touch(k, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(k); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("touch with negative exptime must expire: %v", err)
	}
	k2 := key(t, "short")
	if err := c.Set(&memcache.Item{Key: k2, Value: []byte("x"), Expiration: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.Touch(k2, 100); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	if _, err := c.Get(k2); err != nil {
		t.Fatalf("touched item expired: %v", err)
	}
}

func TestAddReplace(t *testing.T) {
	c := client(t)
	k := key(t, "ar")
	if err := c.Replace(&memcache.Item{Key: k, Value: []byte("r")}); !errors.Is(err, memcache.ErrNotStored) {
		t.Fatalf("replace missing: %v", err)
	}
	if err := c.Add(&memcache.Item{Key: k, Value: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(&memcache.Item{Key: k, Value: []byte("b")}); !errors.Is(err, memcache.ErrNotStored) {
		t.Fatalf("add existing: %v", err)
	}
	if err := c.Replace(&memcache.Item{Key: k, Value: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Append(&memcache.Item{Key: k, Value: []byte(">")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Prepend(&memcache.Item{Key: k, Value: []byte("<")}); err != nil {
		t.Fatal(err)
	}
	it, err := c.Get(k)
	if err != nil || string(it.Value) != "<c>" {
		t.Fatalf("got %v %v", it, err)
	}
}

func pattern(k string, n int) []byte {
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(k)
		b.WriteByte('|')
	}
	return b.Bytes()[:n]
}

func TestLargeValues(t *testing.T) {
	c := client(t)
	for _, n := range []int{0, 1, 1400, 65536, 500_000, 1_000_000} {
		k := key(t, strconv.Itoa(n))
		v := pattern(k, n)
		if err := c.Set(&memcache.Item{Key: k, Value: v}); err != nil {
			t.Fatalf("set %d bytes: %v", n, err)
		}
		it, err := c.Get(k)
		if err != nil || !bytes.Equal(it.Value, v) {
			t.Fatalf("get %d bytes: err %v, equal %v", n, err, err == nil && bytes.Equal(it.Value, v))
		}
	}
	k := key(t, "too_big")
	err := c.Set(&memcache.Item{Key: k, Value: pattern(k, 1_100_000)})
	if err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("value over -I: want a 'too large' server error, got %v", err)
	}
	// The connection pool must still work afterwards.
	if err := c.Set(&memcache.Item{Key: k, Value: []byte("small")}); err != nil {
		t.Fatalf("set after too-large: %v", err)
	}
}

func TestManyKeys(t *testing.T) {
	c := client(t)
	const n = 2000
	for i := 0; i < n; i++ {
		k := key(t, strconv.Itoa(i))
		if err := c.Set(&memcache.Item{Key: k, Value: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		k := key(t, strconv.Itoa(i))
		it, err := c.Get(k)
		if err != nil || string(it.Value) != k {
			t.Fatalf("%s: %v %v", k, it, err)
		}
	}
}
