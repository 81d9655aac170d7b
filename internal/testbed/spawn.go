package testbed

import (
	"os/exec"
	"runtime"
	"sync"
)

// The kernel sends a child's Pdeathsig when the *thread* that forked it
// exits, not the process. A Go thread exits when a goroutine that locked
// it ends without unlocking it (the namespace captures of rawnet and the
// soak do so on purpose), and any thread may have run an earlier
// cmd.Start: the engine forked from it would be killed with it. So every
// child with a Pdeathsig is forked from one thread kept for that, which
// lives as long as the process.
var spawner struct {
	once sync.Once
	reqs chan func()
}

// StartKeep runs cmd.Start on the spawner thread; use it for commands
// with a Pdeathsig (their SysProcAttr), which then die only with the
// process that started them.
func StartKeep(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range spawner.reqs {
				f()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- func() { done <- cmd.Start() }
	return <-done
}
