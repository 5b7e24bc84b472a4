// Command loadgen is the overload bench's open-loop client: it fires POST requests at
// Poisson arrival times (a seeded schedule, so two targets get the same one) whatever the
// completions, and times each from its scheduled send time (no coordinated omission).
//
// It exists because a Python client at twice the gateway's knee needs most of a core of its
// own on a two-core machine, and then measures itself; this one needs a small share of that.
// Standard library only. Output: one JSON object on stdout with the latencies (ms) of the 200s
// and of the refusals (503 or 529 with Retry-After), and the counts of everything else.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

type result struct {
	Offered             int       `json:"offered"`
	Seconds             float64   `json:"seconds"`
	OK                  []float64 `json:"ok_ms"`
	Refused             []float64 `json:"refused_ms"`
	RefusedNoRetryAfter int       `json:"refused_without_retry_after"`
	Errors              int       `json:"errors"`
	Timeouts            int       `json:"timeouts"`
	Late                []float64 `json:"late_ms"`
	Samples             []string  `json:"error_samples"`
}

type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, ", ") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

func main() {
	url := flag.String("url", "", "the URL to POST to")
	bodyFile := flag.String("body", "", "a file holding the request body")
	rate := flag.Float64("rate", 100, "arrivals per second")
	seconds := flag.Float64("seconds", 10, "length of the schedule")
	seed := flag.Int64("seed", 1, "the schedule's seed")
	timeout := flag.Duration("timeout", 10*time.Second, "per request")
	var headers headerList
	flag.Var(&headers, "H", "a header, 'Name: value' (repeatable)")
	flag.Parse()
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	transport := &http.Transport{
		MaxIdleConns: 0, MaxIdleConnsPerHost: 20000, IdleConnTimeout: 120 * time.Second,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext, DisableCompression: true,
	}
	client := &http.Client{Transport: transport, Timeout: *timeout}

	var offsets []time.Duration
	rng := rand.New(rand.NewSource(*seed))
	for t := rng.ExpFloat64() / *rate; t < *seconds; t += rng.ExpFloat64() / *rate {
		offsets = append(offsets, time.Duration(t*float64(time.Second)))
	}
	out := result{Offered: len(offsets), Seconds: *seconds}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now().Add(10 * time.Millisecond)
	for _, offset := range offsets {
		at := start.Add(offset)
		time.Sleep(time.Until(at))
		wg.Add(1)
		go func(at time.Time) {
			defer wg.Done()
			late := time.Since(at)
			req, _ := http.NewRequest("POST", *url, bytes.NewReader(body))
			for _, h := range headers {
				name, value, _ := strings.Cut(h, ":")
				req.Header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
			}
			resp, err := client.Do(req)
			var status int
			var retryAfter bool
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status, retryAfter = resp.StatusCode, resp.Header.Get("Retry-After") != ""
			}
			took := float64(time.Since(at).Microseconds()) / 1000
			mu.Lock()
			defer mu.Unlock()
			out.Late = append(out.Late, float64(late.Microseconds())/1000)
			switch {
			case err != nil:
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					out.Timeouts++
				} else {
					out.Errors++
					if len(out.Samples) < 3 {
						out.Samples = append(out.Samples, err.Error())
					}
				}
			case status == 200:
				out.OK = append(out.OK, took)
			case (status == 503 || status == 529) && retryAfter:
				out.Refused = append(out.Refused, took)
			default:
				out.Errors++
				if status == 503 || status == 529 {
					out.RefusedNoRetryAfter++
				}
				if len(out.Samples) < 3 {
					out.Samples = append(out.Samples, fmt.Sprintf("HTTP %d", status))
				}
			}
		}(at)
	}
	wg.Wait()
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}
