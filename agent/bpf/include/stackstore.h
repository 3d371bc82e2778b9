// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Content-addressed storage of captured stacks, for the probes that keep
// stacks in maps of their own (agent/cpu's sampler, agent/offcpu): a stack
// is stored under a keyed 64-bit hash of its frames, so that the same
// stack is stored once and a count refers to it by key. Include after
// stack.h.

#ifndef SLURMSCOPE_STACKSTORE_H
#define SLURMSCOPE_STACKSTORE_H

// Set by the loader to a random value per load, so that the stack hash is
// keyed (see stack_hash).
volatile const __u64 stack_hash_seed = 0;

// Domain constants mixed into the first hash state: a kernel and a user
// stack never share a key, even with the same frames.
#define HASH_DOMAIN_KERNEL 0x6b65726e656c0000ULL // "kernel"
#define HASH_DOMAIN_USER 0x7573657200000000ULL   // "user"
#define HASH_DOMAIN_INTERP 0x696e746572700000ULL // "interp"

// splitmix64's finaliser (Stafford's Mix13, a retuned MurmurHash3 fmix64): a
// bijection on 64 bits in which every input bit flips each output bit with
// probability close to 1/2.
static __always_inline __u64 mix64(__u64 x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

// stack_hash returns the key of the first nr frames of s: h = mix64(h ^ frame)
// for each frame, from a state seeded with the frame count, the domain and a
// per-load random seed. 0 is reserved for "no stack".
//
// Each step is a bijection of the state, so two stacks of the same length
// that differ only in their innermost frames (the common case: same callers,
// different leaf) can never collide. Any other collision, two different
// stacks with one key, needs a 64-bit coincidence: about 1 in 2^64 per pair
// of stacks, under 1e-11 per generation even with a full map of 16384
// stacks. That is astronomically unlikely, which is why a hit does not
// compare frames (a collision would show one stack's frames for the other's
// samples, for one generation). The random seed keeps a job, which controls
// what its user stacks read as, from crafting frames that collide with
// another job's stack: the mixer is not cryptographic, but without the seed
// no key can be predicted.
static __always_inline __u64 stack_hash(const struct unwind_stack *s, __u32 nr, __u64 domain)
{
	__u64 h = mix64(stack_hash_seed ^ domain ^ nr);

	for (__u32 i = 0; i < MAX_STACK_DEPTH; i++) {
		if (i >= nr)
			break;
		h = mix64(h ^ s->ips[i]);
	}
	return h ? h : 1;
}

// store returns the key of stack st in stacks, storing it if it is new, or
// 0 when the map has no room (counted).
static __always_inline __u64 store(void *stats, void *stacks, struct unwind_stack *st, __u64 domain, __u32 map_full,
				   __u32 error)
{
	__u32 n = st->len;

	if (n > MAX_STACK_DEPTH)
		n = MAX_STACK_DEPTH;
	__u64 h = stack_hash(st, n, domain);

	if (bpf_map_lookup_elem(stacks, &h))
		return h;
	long err = bpf_map_update_elem(stacks, &h, st, BPF_NOEXIST);
	// -EEXIST: another CPU stored the same stack in between.
	if (err == 0 || err == -EEXIST)
		return h;
	stat_inc(stats, err == -E2BIG || err == -ENOMEM ? map_full : error);
	return 0;
}

// interp_stack_hash is the key of the first n frames of interpreter stack
// in of process tgid (started at start): the process is part of the key,
// as user space resolves frames per process; kind and flags (truncated)
// too, so that a value says all.
static __always_inline __u64 interp_stack_hash(const struct interp_stack *in, __u32 n, __u32 tgid, __u64 start)
{
	__u64 h = mix64(stack_hash_seed ^ HASH_DOMAIN_INTERP ^ ((__u64)in->kind << 32) ^ ((__u64)in->flags << 8) ^ n);

	h = mix64(h ^ tgid);
	h = mix64(h ^ start);
	for (__u32 i = 0; i < INTERP_STACK_FRAMES; i++) {
		if (i >= n)
			break;
		const struct interp_frame *f = &in->frames[i];

		h = mix64(h ^ f->addr);
		h = mix64(h ^ f->check);
		h = mix64(h ^ f->data);
	}
	return h ? h : 1;
}

// Each interpreter stack new to a probe's map is also sent here (struct
// interp_new_event, interp.h), so that user space reads what its frames
// name while the process lives (a 2 s `python -c` is gone by the next
// drain); the drain then finds them cached.
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); // placeholder; the loader sets it
} interp_new SEC(".maps");

// Keeps the struct in each object's BTF, which tests check it against.
const struct interp_new_event *unused_interp_new __attribute__((unused));

// stack_interp_announce sends interpreter stack in (kernel memory: a map
// value), stored under key for process tgid started at start; a full ring
// buffer counts lost in stats.
static __always_inline void stack_interp_announce(void *stats, __u32 lost, __u32 tgid, __u64 start, __u64 key,
						  struct interp_stack *in)
{
	struct interp_new_event *e = bpf_ringbuf_reserve(&interp_new, sizeof(*e), 0);

	if (!e) {
		stat_inc(stats, lost);
		return;
	}
	e->tgid = tgid;
	e->pad = 0;
	e->start_boottime_ns = start;
	e->key = key;
	// Too large for an inlined copy.
	if (bpf_probe_read_kernel(&e->stack, sizeof(e->stack), in)) {
		bpf_ringbuf_discard(e, 0);
		stat_inc(stats, lost);
		return;
	}
	bpf_ringbuf_submit(e, 0);
}

#endif // SLURMSCOPE_STACKSTORE_H
