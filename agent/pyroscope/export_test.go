package pyroscope

import "time"

// WithAfter replaces how the shipper waits between retries, so that tests
// see the delays it asks for instead of measuring them.
func WithAfter(after func(time.Duration) <-chan time.Time) ShipperOption {
	return func(o *shipperOptions) { o.ship.After = after }
}

// ProfileTime reads a pprof profile's time_nanos.
var ProfileTime = profileTime
