package proc

import (
	"os"
	"os/exec"
	"testing"
)

func TestGone(t *testing.T) {
	self, _ := os.Hostname()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	live := cmd.Process.Pid
	if Gone(self, self, live) {
		t.Fatal("a running process of this host is gone")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !Gone(self, self, live) {
		t.Fatal("an ended process of this host is not gone")
	}
	if Gone(self, "another-host", live) {
		t.Fatal("a process of another host is known gone")
	}
	if !Gone(self, self, os.Getpid()) {
		t.Fatal("a record naming this very process is not of an earlier run")
	}
}
