package compare

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The pinned NATS peers: found in -peers-bin, or installed there with go install.

// peersOK reports whether dir holds nats-server and nats at the pinned versions.
func peersOK(dir string) bool {
	sv, err1 := exec.Command(filepath.Join(dir, "nats-server"), "--version").Output()
	cv, err2 := exec.Command(filepath.Join(dir, "nats"), "--version").Output()
	return err1 == nil && err2 == nil && strings.Contains(string(sv), natsServerVersion) &&
		strings.TrimSpace(string(cv)) == natsCLIVersion
}

// findPeers uses the pinned peers in cfg.PeersBin, installing them there first if needed.
func (r *runner) findPeers(ctx context.Context) error {
	dir := r.cfg.PeersBin
	if !peersOK(dir) {
		if !r.cfg.Install {
			return fmt.Errorf("nats-server %s / nats %s not in %s (pass -install or -brokers lightq)", natsServerVersion, natsCLIVersion, dir)
		}
		for _, m := range []string{natsServerModule + "@" + natsServerVersion, natsCLIModule + "@" + natsCLIVersion} {
			r.logf("go install %s (GOBIN=%s)", m, dir)
			cmd := exec.CommandContext(ctx, "go", "install", m)
			cmd.Env = append(os.Environ(), "GOBIN="+dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go install %s: %v\n%s", m, err, out)
			}
		}
		if !peersOK(dir) {
			return fmt.Errorf("installed peers in %s do not report %s / %s", dir, natsServerVersion, natsCLIVersion)
		}
	}
	r.natsServerPath, r.natsCLIPath = filepath.Join(dir, "nats-server"), filepath.Join(dir, "nats")
	return nil
}
