package main

import (
	"bytes"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestPollCPUs: -cpu takes one CPU or a list (a polling core per CPU),
// overriding either key of the file; poll.cpu alone still pins one core;
// poll.cores runs cores unpinned.
func TestPollCPUs(t *testing.T) {
	tests := []struct {
		file  string
		args  []string
		cpus  []int
		cores int
	}{
		{"", nil, nil, 1},
		{"", []string{"-cpu", "3"}, []int{3}, 1},
		{"", []string{"-cpu", "1,2"}, []int{1, 2}, 2},
		{"", []string{"-cpu", " 0, 1 "}, []int{0, 1}, 2},
		{`{"poll": {"cpu": 2}}`, nil, []int{2}, 1},
		{`{"poll": {"cpus": [1, 2]}}`, nil, []int{1, 2}, 2},
		{`{"poll": {"cpus": [1, 2]}}`, []string{"-cpu", "-1"}, nil, 1},
		{`{"poll": {"cpu": 5}}`, []string{"-cpu", "1,2"}, []int{1, 2}, 2},
		{"", []string{"-cores", "2"}, nil, 2},
		{"", []string{"-cores", "2", "-cpu", "0,1"}, []int{0, 1}, 2},
	}
	for _, tt := range tests {
		args := tt.args
		if tt.file != "" {
			args = append([]string{"-config", writeFile(t, tt.file)}, args...)
		}
		cfg, _, err := loadConfig(args, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%s %v: %v", tt.file, tt.args, err)
		}
		if err := cfg.validate(); err != nil {
			t.Fatalf("%s %v: %v", tt.file, tt.args, err)
		}
		if got := cfg.Poll.cpuList(); !slices.Equal(got, tt.cpus) || cfg.Poll.cores() != tt.cores {
			t.Errorf("%s %v: cpus %v, %d cores; want %v, %d", tt.file, tt.args, got, cfg.Poll.cores(), tt.cpus, tt.cores)
		}
	}
	cfg, _, err := loadConfig([]string{"-config", writeFile(t, `{"poll": {"cpu": 1, "cpus": [2]}}`)}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Errorf("poll.cpu and poll.cpus: %v, want both set", err)
	}
	if _, _, err := loadConfig([]string{"-cpu", "1,x"}, &bytes.Buffer{}); err == nil {
		t.Error("-cpu 1,x accepted")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	if n := setGOMAXPROCS(3); n < 3+pollThreadsSpare {
		t.Errorf("GOMAXPROCS %d with 3 polling cores, want at least %d", n, 3+pollThreadsSpare)
	}
}
