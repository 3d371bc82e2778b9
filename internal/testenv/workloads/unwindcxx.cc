/*
 * unwindcxx: C++ workloads for the .eh_frame unwinder (agent/unwind),
 * built without frame pointers:
 *
 *   g++ -O2 -fomit-frame-pointer -o unwindcxx unwindcxx.cc
 *
 * After printing "ready", each mode burns argv[2] seconds of CPU time.
 *
 *   deep    main -> deep_rounds -> recurse (300 levels) -> deep_leaf: every
 *           stack is deeper than the unwinder's 127 frames.
 *   except  main -> except_rounds -> catcher -> thrower -> Layer<N>::run
 *           (templates inlined into each other) -> throw, caught in
 *           catcher: much of the time is in libstdc++'s and libgcc's
 *           exception unwinder, whose frames must lead back to main too.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>

static volatile unsigned long sink;

// The process's CPU time, seconds.
static double now()
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long deep_leaf(unsigned long n)
{
	unsigned long h = n;
	for (int i = 0; i < 200000; i++)
		h = h * 6364136223846793005UL + 1442695040888963407UL;
	return h;
}

__attribute__((noinline)) unsigned long recurse(int depth, unsigned long n)
{
	if (depth == 0)
		return deep_leaf(n);
	unsigned long r = recurse(depth - 1, n + depth);
	sink += r; // work after the call: no tail call, a real frame per level
	return r ^ depth;
}

__attribute__((noinline)) void deep_rounds(double secs)
{
	double end = now() + secs;
	while (now() < end)
		sink += recurse(300, sink);
}

// Layers inlined into each other: one native frame (thrower) does the
// work of several source-level functions.
template <int N> struct Layer {
	static inline unsigned long run(unsigned long x)
	{
		x = x * 31 + N;
		return Layer<N - 1>::run(x);
	}
};
template <> struct Layer<0> {
	static inline unsigned long run(unsigned long x)
	{
		if (x % 3 != 7) // always: the compiler cannot know
			throw std::runtime_error("layer 0");
		return x;
	}
};

__attribute__((noinline)) unsigned long thrower(unsigned long x)
{
	unsigned long r = Layer<8>::run(x);
	sink += r;
	return r;
}

__attribute__((noinline)) unsigned long catcher(unsigned long x)
{
	try {
		return thrower(x);
	} catch (const std::runtime_error &e) {
		return x + std::strlen(e.what());
	}
}

__attribute__((noinline)) void except_rounds(double secs)
{
	double end = now() + secs;
	while (now() < end)
		for (int i = 0; i < 100; i++)
			sink += catcher(sink + i);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "deep";
	double secs = argc > 2 ? std::atof(argv[2]) : 10;

	std::printf("ready\n");
	std::fflush(stdout);
	if (std::strcmp(mode, "deep") == 0)
		deep_rounds(secs);
	else if (std::strcmp(mode, "except") == 0)
		except_rounds(secs);
	else
		return 2;
	return 0;
}
