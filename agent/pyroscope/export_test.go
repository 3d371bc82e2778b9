package pyroscope

import (
	"time"

	"github.com/slurmscope/slurmscope/agent/ship"
)

// WithAfter replaces how the shipper waits between retries, so that tests
// see the delays it asks for instead of measuring them.
func WithAfter(after func(time.Duration) <-chan time.Time) ShipperOption {
	return func(o *ship.Options) { o.After = after }
}
