/* A few functions for the fuzz seeds of package cfi: built with
 * gcc -O2 -fomit-frame-pointer -nostdlib -static -Wl,--build-id=none -Wl,--eh-frame-hdr -s,
 * so the ELF is small and has an .eh_frame and .eh_frame_hdr. */
static volatile long sink;

__attribute__((noinline)) long leaf(long n)
{
	long a[8];
	for (long i = 0; i < 8; i++)
		a[i] = n * i;
	sink = a[n & 7];
	return a[3];
}

__attribute__((noinline)) long mid(long n)
{
	return leaf(n) + leaf(n + 1) + 1;
}

void _start(void)
{
	for (;;)
		sink = mid(sink);
}
