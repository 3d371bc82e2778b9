// A namespaced template function, to check C++ demangling.
#include <cstdio>
#include <unistd.h>

namespace slurmscope_test {
template <typename T>
__attribute__((noinline)) T twice(T x) {
	return x + x;
}
template int twice<int>(int);
}  // namespace slurmscope_test

int main() {
	int (*volatile fn)(int) = slurmscope_test::twice<int>;
	std::printf("%p\n", reinterpret_cast<void *>(fn));
	std::fflush(stdout);
	for (;;)
		pause();
	return fn(1);
}
