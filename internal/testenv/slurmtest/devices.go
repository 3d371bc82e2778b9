package slurmtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CharDevice makes a character device node at path (its directory too),
// for gres.conf to name: slurmd reads only its device number, so a node
// with no driver behind it stands in for /dev/nvidiaN or a MIG capability
// file. It replaces a node left by an earlier run.
func CharDevice(path string, major, minor uint32) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dev := int(unix.Mkdev(major, minor)) // #nosec G115 -- Mkdev packs two uint32s into 44 bits
	if err := unix.Mknod(path, unix.S_IFCHR|0o600, dev); err != nil {
		return fmt.Errorf("slurmtest: mknod %s: %w", path, err)
	}
	return nil
}
