// Package bad holds one HIGH finding (G115) and one suppressed one.
package bad

func Narrow(n int64) int32 {
	return int32(n)
}

func Allowed(n int64) int32 {
	return int32(n) // #nosec G115 -- the test's suppressed finding
}
