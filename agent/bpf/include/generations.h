// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Two generations of a probe's counts, so that user space drains one while
// the program writes the other (agent/bpf Generations). gen_switch[0]
// holds one of gen_0 / gen_1, whose only element is 0 or 1: the generation
// the program writes to. User space flips it with a map-in-map update, and
// the kernel does not return from that update until every program that
// might still see the old inner map has finished. Include after common.h.

#ifndef SLURMSCOPE_GENERATIONS_H
#define SLURMSCOPE_GENERATIONS_H

struct gen_map {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
};

struct gen_map gen_0 SEC(".maps");
struct gen_map gen_1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct gen_map);
} gen_switch SEC(".maps");

// gen_current is the generation to write to, 0 or 1; -1 before the loader
// filled gen_switch (never once attached; the verifier wants the checks).
static __always_inline int gen_current(void)
{
	__u32 zero = 0;
	void *inner = bpf_map_lookup_elem(&gen_switch, &zero);
	__u32 *gen = inner ? bpf_map_lookup_elem(inner, &zero) : 0;

	if (!gen)
		return -1;
	return *gen ? 1 : 0;
}

#endif // SLURMSCOPE_GENERATIONS_H
