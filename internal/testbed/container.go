package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Container is how a process runs in a podman container (runc): PID,
// mount, IPC and UTS namespaces of its own, a network namespace of
// its own (none, or a testbed namespace), every capability dropped but
// those named, and nothing of the host but the bind mounts named. podman
// takes its configuration and storage from the environment
// (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF: scripts/image.sh --env, which
// make test sets), so the host's own podman set-up is left alone.
type Container struct {
	Image string
	// Name is the container's name; a leftover container of that name (a
	// killed test's) is removed first.
	Name string
	// NetNS is the network namespace (ip netns NAME) it joins; "": one of
	// its own with nothing in it (--network none).
	NetNS   string
	CapAdd  []string // capabilities it keeps (CAP_ prefix optional); all others are dropped
	Devices []string // host devices it gets (/dev/net/tun)
	Binds   []string // bind mounts, HOST:CONTAINER[:ro]
	User    string   // "uid:gid"; "": the image's (root)
	// Entrypoint replaces the image's (rmad); "": the image's.
	Entrypoint string
	// Interactive keeps its standard input open (podman run -i).
	Interactive bool
}

// Podman returns a podman command, which takes its configuration and
// storage from the environment (Container).
func Podman(args ...string) *exec.Cmd { return exec.Command("podman", args...) }

// ImageExists reports whether podman's storage holds image.
func ImageExists(image string) bool { return Podman("image", "exists", image).Run() == nil }

// Command returns the podman run command of c running args (after the
// image's entrypoint, or Entrypoint). The container is removed when it
// exits; podman run lasts as long as the container, relays SIGTERM and
// SIGINT to it, and exits with its status.
func (c *Container) Command(args ...string) *exec.Cmd {
	Podman("rm", "--force", "--time", "0", c.Name).Run()
	run := []string{"run", "--rm", "--name", c.Name, "--hostname", c.Name, "--cap-drop", "ALL"}
	if c.NetNS == "" {
		run = append(run, "--network", "none")
	} else {
		run = append(run, "--network", "ns:/run/netns/"+c.NetNS)
	}
	for _, cp := range c.CapAdd {
		run = append(run, "--cap-add", cp)
	}
	for _, d := range c.Devices {
		run = append(run, "--device", d)
	}
	for _, b := range c.Binds {
		run = append(run, "--volume", b)
	}
	if c.User != "" {
		run = append(run, "--user", c.User)
	}
	if c.Entrypoint != "" {
		run = append(run, "--entrypoint", c.Entrypoint)
	}
	if c.Interactive {
		run = append(run, "--interactive")
	}
	return Podman(append(append(run, c.Image), args...)...)
}

// Pid returns the host PID of the container's first process, once it
// runs (within timeout).
func (c *Container) Pid(timeout time.Duration) (int, error) {
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out, err := Podman("inspect", "--format", "{{.State.Pid}}", c.Name).Output()
		last = strings.TrimSpace(string(out))
		if pid, _ := strconv.Atoi(last); err == nil && pid > 0 {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("testbed: container %s has no process after %v (%q)", c.Name, timeout, last)
}

// Exec runs args in the running container (its namespaces, user and
// capabilities) and returns what it printed.
func (c *Container) Exec(args ...string) (string, error) {
	out, err := Podman(append([]string{"exec", c.Name}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("podman exec %s %s: %v: %s", c.Name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Remove ends and removes the container at once, if it still exists.
func (c *Container) Remove() { Podman("rm", "--force", "--time", "0", c.Name).Run() }

// ContainerReady reports why containers cannot run here ("" when they
// can): podman missing, no configuration from scripts/image.sh in the
// environment, or an image missing.
func ContainerReady(images ...string) string {
	if _, err := exec.LookPath("podman"); err != nil {
		return "podman not installed (scripts/setup.sh --containers)"
	}
	for _, v := range []string{"CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF"} {
		if _, err := os.Stat(os.Getenv(v)); err != nil {
			return fmt.Sprintf("%s=%q: podman's configuration for OneRMA (make image; export $(scripts/image.sh --env))", v, os.Getenv(v))
		}
	}
	for _, im := range images {
		if im == "" || !ImageExists(im) {
			return fmt.Sprintf("image %q not built (make image; export $(scripts/image.sh --env))", im)
		}
	}
	return ""
}

// forEngine is c for engine o: named after the engine unless c names
// itself, in o's network namespace, with o's directory mounted at the
// same path (control sockets, IV state, configuration and memif sockets
// keep their host paths) and hugetlbfs when the EAL uses huge pages.
func (c *Container) forEngine(o Options, huge bool) *Container {
	e := *c
	if e.Name == "" {
		e.Name = "onerma-" + o.Name
	}
	e.NetNS = o.NetNS
	e.Binds = append([]string{o.Dir + ":" + o.Dir}, c.Binds...)
	if huge {
		e.Binds = append(e.Binds, "/dev/hugepages:/dev/hugepages")
	}
	return &e
}
