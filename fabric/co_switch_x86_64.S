/* co_switch_x86_64.S -- coroutine context switch: callee-saved state only */

/*
 * The SysV x86-64 ABI makes rbx, rbp, r12-r15, rsp, the MXCSR control bits
 * and the x87 control word callee-saved; everything else is already dead
 * (or saved by the compiler) at a call. So a switch is a function call that
 * pushes those, swaps rsp, and pops the other side's copy: no system call,
 * no signal mask (unlike swapcontext).
 *
 * Frame left on a suspended stack, from the saved rsp upwards:
 *    0: MXCSR (4 bytes), 4: x87 control word (2 bytes), 6: pad
 *    8: r15  16: r14  24: r13  32: r12  40: rbx  48: rbp  56: return address
 * co.c builds the same frame on a fresh stack with the return address set
 * to dxl_co_trampoline, r12 = the coroutine and r13 = its C entry.
 */

#if defined(__x86_64__) && !defined(DXL_CO_UCONTEXT)

	.text

/* void dxl_co_switch_asm(void **save_sp, void *new_sp) */
	.globl	dxl_co_switch_asm
	.type	dxl_co_switch_asm, @function
	.p2align 4
dxl_co_switch_asm:
	.cfi_startproc
	pushq	%rbp
	.cfi_adjust_cfa_offset 8
	pushq	%rbx
	.cfi_adjust_cfa_offset 8
	pushq	%r12
	.cfi_adjust_cfa_offset 8
	pushq	%r13
	.cfi_adjust_cfa_offset 8
	pushq	%r14
	.cfi_adjust_cfa_offset 8
	pushq	%r15
	.cfi_adjust_cfa_offset 8
	subq	$8, %rsp
	.cfi_adjust_cfa_offset 8
	stmxcsr	(%rsp)
	fnstcw	4(%rsp)
	movq	%rsp, (%rdi)
	/* from here on we run on the other stack */
	movq	%rsi, %rsp
	ldmxcsr	(%rsp)
	fldcw	4(%rsp)
	addq	$8, %rsp
	popq	%r15
	popq	%r14
	popq	%r13
	popq	%r12
	popq	%rbx
	popq	%rbp
	ret
	.cfi_endproc
	.size	dxl_co_switch_asm, .-dxl_co_switch_asm

/*
 * First instruction a fresh coroutine runs (reached by the ret above). rsp
 * is 16-byte aligned here, so the call leaves the entry function with the
 * ABI's (rsp + 8) % 16 == 0. The entry never returns: it switches away for
 * good when the coroutine's function has returned.
 */
	.globl	dxl_co_trampoline
	.type	dxl_co_trampoline, @function
	.p2align 4
dxl_co_trampoline:
	.cfi_startproc
	.cfi_undefined rip	/* outermost frame: debuggers stop unwinding */
	movq	%r12, %rdi
	callq	*%r13
	ud2
	.cfi_endproc
	.size	dxl_co_trampoline, .-dxl_co_trampoline

#endif

#if defined(__linux__) && defined(__ELF__)
	.section .note.GNU-stack, "", @progbits /* no executable stack */
#endif
