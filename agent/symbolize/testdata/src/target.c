/* Prints the address of target_function, then waits to be killed. */
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) int target_function(int x) {
	return x * 7 + 3;
}

int (*volatile keep)(int) = target_function;

int main(void) {
	printf("%p\n", (void *)keep);
	fflush(stdout);
	for (;;)
		pause();
	return keep(1);
}
