#include <stdio.h>
#include <unistd.h>

void *lib_target_address(void);

int main(void) {
	printf("%p\n", lib_target_address());
	fflush(stdout);
	for (;;)
		pause();
}
