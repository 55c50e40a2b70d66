package log

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestZZHang(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	var valid []byte
	for i := range 5 {
		valid = append(valid, makeBatch(rng, 1+i, 30, 0)...)
	}
	for it := range 3000 {
		data := append([]byte(nil), valid...)
		for range 1 + rng.IntN(4) {
			data[rng.IntN(len(data))] = byte(rng.Uint32())
		}
		data = data[:rng.IntN(len(data)+1)]
		done := make(chan struct{})
		go func() {
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				os.WriteFile("/tmp/hang.bin", data, 0o644)
				panic("hang")
			}
		}()
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, segmentName(0, logSuffix)), data, 0o644)
		l, err := Open(dir, Options{MaxBatch: 64 << 10})
		if err == nil {
			readAll(t, l)
			l.Close()
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatal(err)
		}
		close(done)
		_ = it
	}
}
