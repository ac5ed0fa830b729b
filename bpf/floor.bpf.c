// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The benchmark floor: an empty program on the same syscall-exit hook tracerd uses. The
 * cost it adds to a syscall is what any sys_exit tracer pays at least.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tp_btf/sys_exit")
int BPF_PROG(empty_sys_exit, struct pt_regs *regs, long ret)
{
	return 0;
}
