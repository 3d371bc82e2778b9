/* Shared library whose function lives in a mapping with a non-zero offset. */
__attribute__((noinline)) int lib_target_function(int x) {
	return x * 5 + 1;
}

void *lib_target_address(void) {
	return (void *)lib_target_function;
}
