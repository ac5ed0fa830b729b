// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Loaded once at start, never attached: whether this kernel's verifier accepts the typed load
 * of an fd table's slot (fd_table.h). The answer sets the tracer's typed_fd_slot.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "tracer/fd_table.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tp_btf/sys_exit")
int BPF_PROG(typed_fd_slot, struct pt_regs *regs, long ret)
{
	return fd_table_file((int)ret, true) != NULL;
}
