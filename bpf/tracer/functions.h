/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Uprobe hits: a call of a watched function by a target, counted per function in
 * function_calls (the uprobe's cookie is the function's index in the function table) and,
 * unless function_events is off, recorded. The same body serves both ways user space attaches
 * the uprobes: one link per function, or one uprobe-multi link per binary.
 */
#ifndef TRACERD_TRACER_FUNCTIONS_H
#define TRACERD_TRACER_FUNCTIONS_H

#include "maps.h"
#include "output.h"
#include "targets.h"

/* A call of function `cookie` (its index in the function table): count it, then record it. */
static __always_inline int on_function(struct pt_regs *ctx)
{
	struct tracerd_function_hit *e;
	__u32 id;
	__u64 *calls;

	if (!is_target(bpf_get_current_pid_tgid() >> 32))
		return 0;
	id = bpf_get_attach_cookie(ctx);
	calls = bpf_map_lookup_elem(&function_calls, &id);
	if (calls)
		__sync_fetch_and_add(calls, 1);
	if (!function_events)
		return 0;
	e = reserve(sizeof(*e), TRACERD_CNT_RINGBUF_FULL_FUNCTION);
	if (!e)
		return 0;
	fill_header(&e->h, TRACERD_EV_FUNCTION);
	e->function_id = id;
	submit(e);
	return 0;
}

/* One link per function (the fallback, and binaries with one function). */
SEC("uprobe")
int function_hit(struct pt_regs *ctx)
{
	return on_function(ctx);
}

/* One link for all the functions of a binary. */
SEC("uprobe.multi")
int function_hit_multi(struct pt_regs *ctx)
{
	return on_function(ctx);
}

#endif
