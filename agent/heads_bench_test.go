package agent_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/internal/httpx/httpxtest"
)

// BenchmarkProxyHostileHeads: 16 callers at once whose business call is
// answered with a head of tiny fields, each its own key, just under 1 MiB
// (the most the proxy read before issue 45: about 75,000 fields). It
// reports how far the agent's Go heap (its objects, garbage not yet
// swept included, sampled every millisecond) and its resident set (VmHWM,
// reset before) rose over what they were before the calls: the cost of
// holding the heads. The callers read the status line
// alone, on raw connections, so that what is measured is the agent's.
//
//	go test -run '^$' -bench ProxyHostileHeads -benchtime 3x ./agent
func BenchmarkProxyHostileHeads(b *testing.B) {
	const callers = 16
	var head strings.Builder
	head.WriteString("HTTP/1.1 200 OK\r\n")
	for i := 0; head.Len() < 1<<20-64; i++ {
		fmt.Fprintf(&head, "X-%x: v\r\n", i)
	}
	head.WriteString("Content-Length: 2\r\n\r\nok")
	answer := head.String()
	h := start(b, options{oidc: true})
	url := httpxtest.Serve(b, func(string) string { return answer })
	h.reload(b, func(c *agent.Config) { c.APIURL = url })

	statuses := map[string]int{}
	var peakHeap, peakRSS uint64
	b.ResetTimer()
	for range b.N {
		debug.FreeOSMemory() // what an earlier run left resident is not counted as held
		baseHeap, baseRSS := heapBytes(), resetRSSPeak(b)
		var maxHeap atomic.Uint64
		done := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				if v := heapBytes(); v > maxHeap.Load() {
					maxHeap.Store(v)
				}
				select {
				case <-done:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := rawCall(b, h.sock, "/v1/service/GetMyOrganizations", aliceOIDC)
				mu.Lock()
				statuses[s]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(done)
		<-sampled
		peakHeap = max(peakHeap, maxHeap.Load()-min(baseHeap, maxHeap.Load()))
		peakRSS = max(peakRSS, rssPeak(b)-min(baseRSS, rssPeak(b)))
	}
	b.StopTimer()
	b.ReportMetric(float64(peakHeap)/(1<<20), "heap-rise-MiB")
	b.ReportMetric(float64(peakRSS)/(1<<20), "rss-rise-MiB")
	b.Logf("statuses: %v", statuses)
}

// rawCall sends a GET for identity on the agent's socket and reads the
// status line alone.
func rawCall(b *testing.B, sock, path, identity string) string {
	c, err := net.Dial("unix", sock)
	if err != nil {
		b.Error(err)
		return "error"
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: agent\r\nSignagent-Identity: %s\r\nConnection: close\r\n\r\n", path, identity)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "error"
	}
	return strings.TrimSpace(line)
}

// heapBytes is the Go heap's live and unswept objects.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// resetRSSPeak resets the process's peak resident set (VmHWM) to what it
// holds now, and returns it.
func resetRSSPeak(b *testing.B) uint64 {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Fatal(err)
	}
	return rssPeak(b)
}

// rssPeak is VmHWM, in bytes.
func rssPeak(b *testing.B) uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}
