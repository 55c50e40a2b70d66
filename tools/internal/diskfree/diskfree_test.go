package diskfree

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	free, err := Free(dir)
	if errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil || free <= 0 {
		t.Fatalf("Free = %d, %v", free, err)
	}
	if err := Check(dir, 1); err != nil {
		t.Errorf("Check(1 byte) = %v", err)
	}
	err = Check(dir, free+1<<50)
	if err == nil || !strings.Contains(err.Error(), "not enough free disk space in "+dir) || !strings.Contains(err.Error(), "GB needed") {
		t.Errorf("Check(more than the disk) = %v", err)
	}
	if err := Check(dir+"/missing", 1); err == nil {
		t.Error("Check of a missing directory: no error")
	}
	_ = InMemory(dir) // either answer is right; it must not fail
}
