// The same registry as loopguard's storm exporter, served by client_golang's promhttp: the
// reference for `cargo run --release --example promhttp_side_by_side` (demos/examples).
//
// N gauge series `synthetic_registry_series{shard, id}` with the storm registry's label
// shape and values, 1 % of them changed every 100 ms; `/metrics` is promhttp.HandlerFor
// with MaxRequestsInFlight 2 (over it: 503 at once) and gzip when asked; `/healthz` answers
// "ok". It listens on 127.0.0.1 port 0, prints `listening on http://ADDR`, and exits when
// its stdin closes, printing `{"peak_rss_kib":N}`.
//
// Build offline against Debian's packages (golang-go, golang-github-prometheus-client-golang-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o promhttp_exporter .
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func peakRSSKiB() int {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			fields := strings.Fields(line)
			if len(fields) >= 2 {
				n, _ := strconv.Atoi(fields[1])
				return n
			}
		}
	}
	return 0
}

func main() {
	series := flag.Int("series", 100000, "gauge series")
	inFlight := flag.Int("max-requests-in-flight", 2, "promhttp's MaxRequestsInFlight")
	flag.Parse()

	registry := prometheus.NewRegistry()
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "synthetic_registry_series",
		Help: "synthetic registry series",
	}, []string{"shard", "id"})
	registry.MustRegister(vec)
	gauges := make([]prometheus.Gauge, *series)
	for i := 0; i < *series; i++ {
		id := fmt.Sprintf("%08x", uint32(i)*2654435761)
		gauges[i] = vec.WithLabelValues(strconv.Itoa(i%64), id)
		gauges[i].Set(math.Sqrt(float64(i)) * 1.5)
	}
	go func() {
		step := *series / 100
		if step < 1 {
			step = 1
		}
		for round := 0; ; round++ {
			time.Sleep(100 * time.Millisecond)
			start := (round * step) % *series
			for k := 0; k < step; k++ {
				gauges[(start+k)%*series].Set(rand.Float64() * 100)
			}
		}
	}()

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{
		MaxRequestsInFlight: *inFlight,
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening on http://%s\n", listener.Addr())
	go http.Serve(listener, mux)
	io.Copy(io.Discard, os.Stdin)
	fmt.Printf("{\"walks\":0,\"peak_rss_kib\":%d}\n", peakRSSKiB())
}
