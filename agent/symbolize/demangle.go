package symbolize

import (
	"regexp"

	"github.com/ianlancetaylor/demangle"
)

// rustLegacyHash is the "::h<16 hex>" suffix of legacy Rust symbols; it only
// disambiguates crate versions and makes flame graphs unreadable.
var rustLegacyHash = regexp.MustCompile(`::h[0-9a-f]{16}$`)

// demangleName turns C++ and Rust linkage names into readable ones. Parameter
// lists are dropped: profiles group by function, and overloads are rare
// enough in practice that the shorter names win. Names that are not mangled,
// or fail to demangle, are returned unchanged.
func demangleName(name string) string {
	if len(name) < 3 || name[0] != '_' || (name[1] != 'Z' && name[1] != 'R' && name[1] != '_') {
		return name
	}
	// demangle bounds its own recursion; MaxLength caps the output so a
	// hostile name cannot expand into megabytes.
	out := demangle.Filter(name, demangle.NoParams, demangle.NoClones, demangle.MaxLength(16))
	return rustLegacyHash.ReplaceAllString(out, "")
}
