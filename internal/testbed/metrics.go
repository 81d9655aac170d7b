package testbed

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// MetricsAddr is a loopback address with a TCP port free now, for an
// engine's -metrics (the port may be taken by someone else before the
// engine binds it; the engine then fails to start, loudly).
func MetricsAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

// Scrape GETs http://addr/metrics as Prometheus would and returns the
// page.
func Scrape(addr string) (string, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET http://%s/metrics: %s: %s", addr, resp.Status, b)
	}
	return string(b), nil
}
