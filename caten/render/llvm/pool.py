"""A pool of worker threads for `Parallel` loops, in LLVM IR, defined once per module.

Starting a thread per iteration (pthread_create/join) cost 20-100 us a loop, more after the
machine idled (the new thread lands on a halted core), and a Mixer block runs ~60 parallel
loops a call. Here the workers outlive a loop: they spin a little (`SPIN`), then poll with
short sleeps, and exit after 1-2 s without work (so an idle program holds no thread; the next
loop starts them again).

Protocol. `word` = generation << 32 | next iteration. The caller takes `busy` (else, another
loop is in flight -- a nested loop or another caller thread -- and it runs its iterations
itself), marks the word exhausted under a new generation, publishes the loop (n, function,
contexts), then opens the word at iteration 0, starts missing workers, and claims iterations
itself until none is left; then it waits until all claimed ones are done. A worker claims
iteration i by compare-and-swap of the word it read (generation and index), so it never runs
an iteration of a loop it did not read the fields of; the caller never waits for a worker that
has claimed nothing, so a sleeping or missing worker only costs speed."""

from __future__ import annotations

# polls with a pause between, before sleeping (~1.5-3 ms): a worker that has gone to sleep
# joins a loop only at its next poll, and a sleeping vCPU wakes slowly (a 16M-float sum on a
# 2-core Zen 4 VM, calls after a pause: the worker joined 50-140 us late in each, 2.8 ms a
# call; spinning ~1.7 ms instead of ~0.1: 2.4 ms, torch's 2.3). OpenMP and OpenBLAS spin longer.
SPIN = 65536
# 50 us sleeps (~140 us on a VM) before the worker exits (~1-2 s): a worker started anew lands
# beside its caller, and the two share a core until the kernel moves one (the calls after a
# 0.3 s pause of a 16M-float sum on a Zen 4 VM: 2.5-2.8 ms with workers that had exited at
# ~0.3 s, 2.2 with workers that stay)
SLEEPS = 12000


def pool_ir(x86: bool) -> str:
    pause = "call void @llvm.x86.sse2.pause()" if x86 else "fence seq_cst"
    return f"""@caten_pool_word = internal global i64 0, align 64
@caten_pool_n = internal global i64 0, align 64
@caten_pool_fn = internal global ptr null, align 64
@caten_pool_ctx = internal global ptr null, align 64
@caten_pool_stride = internal global i64 0, align 64
@caten_pool_done = internal global i64 0, align 64
@caten_pool_busy = internal global i32 0, align 64
@caten_pool_workers = internal global i64 0, align 64

define internal i64 @caten_pool_claim(i64 %gen) #1 {{
entry:
  br label %loop
loop:
  %k = phi i64 [0, %entry], [%k, %try], [%k1, %run]
  %w = load atomic i64, ptr @caten_pool_word seq_cst, align 8
  %g = lshr i64 %w, 32
  %i = and i64 %w, 4294967295
  %n = load atomic i64, ptr @caten_pool_n seq_cst, align 8
  %same = icmp eq i64 %g, %gen
  %left = icmp ult i64 %i, %n
  %ok = and i1 %same, %left
  br i1 %ok, label %try, label %out
try:
  %fn = load atomic ptr, ptr @caten_pool_fn seq_cst, align 8
  %ctx = load atomic ptr, ptr @caten_pool_ctx seq_cst, align 8
  %st = load atomic i64, ptr @caten_pool_stride seq_cst, align 8
  %w1 = add i64 %w, 1
  %x = cmpxchg ptr @caten_pool_word, i64 %w, i64 %w1 seq_cst seq_cst
  %won = extractvalue {{ i64, i1 }} %x, 1
  br i1 %won, label %run, label %loop
run:
  %off = mul i64 %i, %st
  %p = getelementptr i8, ptr %ctx, i64 %off
  %r = call ptr %fn(ptr %p)
  %d = atomicrmw add ptr @caten_pool_done, i64 1 seq_cst
  %k1 = add i64 %k, 1
  br label %loop
out:
  ret i64 %k
}}

define internal ptr @caten_pool_worker(ptr %unused) #1 {{
entry:
  %ts = alloca [2 x i64], align 8
  br label %loop
loop:
  %idle = phi i64 [0, %entry], [0, %worked], [%idle1, %spin], [%idle1, %sleep]
  %w = load atomic i64, ptr @caten_pool_word seq_cst, align 8
  %g = lshr i64 %w, 32
  %k = call i64 @caten_pool_claim(i64 %g)
  %any = icmp ne i64 %k, 0
  br i1 %any, label %worked, label %idling
worked:
  br label %loop
idling:
  %idle1 = add i64 %idle, 1
  %spinning = icmp ult i64 %idle1, {SPIN}
  br i1 %spinning, label %spin, label %later
spin:
  {pause}
  br label %loop
later:
  %stay = icmp ult i64 %idle1, {SPIN + SLEEPS}
  br i1 %stay, label %sleep, label %quit
sleep:
  store i64 0, ptr %ts, align 8
  %nsp = getelementptr inbounds [2 x i64], ptr %ts, i64 0, i64 1
  store i64 50000, ptr %nsp, align 8
  %rc = call i32 @nanosleep(ptr %ts, ptr null)
  br label %loop
quit:
  %q = atomicrmw sub ptr @caten_pool_workers, i64 1 seq_cst
  ret ptr null
}}

define internal void @caten_pool_run(ptr %fn, ptr %ctx, i64 %stride, i64 %n, i64 %want) #1 {{
entry:
  %h = alloca i64, align 8
  %many = icmp sgt i64 %n, 1
  br i1 %many, label %lock, label %serial
serial:
  %si = phi i64 [0, %entry], [0, %lock], [%si1, %serial_body]
  %sc = icmp slt i64 %si, %n
  br i1 %sc, label %serial_body, label %serial_out
serial_body:
  %soff = mul i64 %si, %stride
  %sp = getelementptr i8, ptr %ctx, i64 %soff
  %sr = call ptr %fn(ptr %sp)
  %si1 = add i64 %si, 1
  br label %serial
serial_out:
  ret void
lock:
  %x = cmpxchg ptr @caten_pool_busy, i32 0, i32 1 seq_cst seq_cst
  %got = extractvalue {{ i32, i1 }} %x, 1
  br i1 %got, label %setup, label %serial
setup:
  %w = load atomic i64, ptr @caten_pool_word seq_cst, align 8
  %g0 = lshr i64 %w, 32
  %gen = add i64 %g0, 1
  %gw = shl i64 %gen, 32
  %shut = or i64 %gw, 4294967295
  store atomic i64 %shut, ptr @caten_pool_word seq_cst, align 8
  store atomic i64 %n, ptr @caten_pool_n seq_cst, align 8
  store atomic ptr %fn, ptr @caten_pool_fn seq_cst, align 8
  store atomic ptr %ctx, ptr @caten_pool_ctx seq_cst, align 8
  store atomic i64 %stride, ptr @caten_pool_stride seq_cst, align 8
  store atomic i64 0, ptr @caten_pool_done seq_cst, align 8
  store atomic i64 %gw, ptr @caten_pool_word seq_cst, align 8
  br label %spawn
spawn:
  %have = load atomic i64, ptr @caten_pool_workers seq_cst, align 8
  %need = icmp slt i64 %have, %want
  br i1 %need, label %start, label %work
start:
  %o = atomicrmw add ptr @caten_pool_workers, i64 1 seq_cst
  %rc = call i32 @pthread_create(ptr %h, ptr null, ptr @caten_pool_worker, ptr null)
  %started = icmp eq i32 %rc, 0
  br i1 %started, label %detach, label %failed
detach:
  %hv = load i64, ptr %h, align 8
  %dr = call i32 @pthread_detach(i64 %hv)
  br label %spawn
failed:
  %o2 = atomicrmw sub ptr @caten_pool_workers, i64 1 seq_cst
  br label %work
work:
  %k = call i64 @caten_pool_claim(i64 %gen)
  br label %wait
wait:
  %done = load atomic i64, ptr @caten_pool_done seq_cst, align 8
  %all = icmp sge i64 %done, %n
  br i1 %all, label %finish, label %pausing
pausing:
  {pause}
  br label %wait
finish:
  store atomic i32 0, ptr @caten_pool_busy seq_cst, align 4
  ret void
}}"""


def declare_pool(mod) -> None:
    """Define the pool in module `mod` once (caten.render.llvm.module.Module)."""
    if "caten_pool" in mod.shared:
        return
    mod.shared.add("caten_pool")
    x86 = mod.x86
    mod.funcs.append(pool_ir(x86))
    mod.root("caten_pool_run", light=True)
    mod.declare("pthread_create", "i32", ["ptr", "ptr", "ptr", "ptr"])
    mod.declare("pthread_detach", "i32", ["i64"])
    mod.declare("nanosleep", "i32", ["ptr", "ptr"])
    if x86:
        mod.declare("llvm.x86.sse2.pause", "void", [])
