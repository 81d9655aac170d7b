package portal_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// TestDialThroughReadOnlyMount: an application that sees its engine's
// socket directory only through a read-only bind mount (a tenant pod's
// mount of /run/onerma/NAMESPACE, deploy/kubernetes) opens a portal and
// registers a region through it, and cannot remove or replace the socket
// or add a file beside it. The application runs in a mount namespace of
// its own (unshare -m), so it needs root; in CI a skip is a failure.
func TestDialThroughReadOnlyMount(t *testing.T) {
	if os.Getenv("PORTAL_RO_SOCKET") != "" {
		t.Skip("the child runs TestDialThroughReadOnlyMountChild")
	}
	unshare, err := exec.LookPath("unshare")
	if os.Geteuid() != 0 || err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("needs root and unshare(1): euid %d, %v", os.Geteuid(), err)
		}
		t.Skip("needs root and unshare(1) for a mount namespace")
	}
	e := enginetest.Start(t, enginetest.Opts{})
	mnt := t.TempDir()
	script := `mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && exec "$3" -test.run '^TestDialThroughReadOnlyMountChild$' -test.v`
	cmd := exec.Command(unshare, "-m", "--propagation", "private", "sh", "-c", script, "sh",
		filepath.Dir(e.Socket), mnt, os.Args[0])
	cmd.Env = append(os.Environ(), "PORTAL_RO_SOCKET="+filepath.Join(mnt, filepath.Base(e.Socket)))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestDialThroughReadOnlyMountChild") {
		t.Fatalf("the application in its mount namespace: %v\n%s", err, out)
	}
	if _, err := os.Stat(e.Socket); err != nil {
		t.Fatalf("the engine's socket after the application: %v", err)
	}
}

func TestDialThroughReadOnlyMountChild(t *testing.T) {
	sock := os.Getenv("PORTAL_RO_SOCKET")
	if sock == "" {
		t.Skip("helper of TestDialThroughReadOnlyMount")
	}
	p, err := portal.Dial(sock, "read-only-mount")
	if err != nil {
		t.Fatalf("dial through the read-only mount: %v", err)
	}
	defer p.Close()
	if _, err := p.RegisterRegion(64<<10, abi.PermRemoteRead); err != nil {
		t.Fatalf("register through the read-only mount: %v", err)
	}
	for what, err := range map[string]error{
		"remove the socket":      os.Remove(sock),
		"rename over it":         os.Rename(sock, sock+".old"),
		"create a file beside":   os.WriteFile(filepath.Join(filepath.Dir(sock), "rmad.sock.new"), nil, 0o666),
		"make a directory in it": os.Mkdir(filepath.Join(filepath.Dir(sock), "d"), 0o755),
	} {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: %v, want EROFS", what, err)
		}
	}
}
