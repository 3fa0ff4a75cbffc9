"""The `caten` command: a compiler driver like gcc, plus run, ops, runtimes and friends.

`caten [OPTIONS] FILE` compiles; any other first word names a subcommand. Every caten.Error
is printed as a gcc-style diagnostic with exit status 1; usage errors exit 2.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from caten import __version__
from caten.deep import deep
from caten.errors import Error
from caten.options import Options

EXAMPLES = """\b
Examples:
  caten run examples/softmax.lisp X=x.npy -o y.npy    run the last composite on .npy inputs
  caten examples/softmax.lisp --emit ir -r numpy      show the principal-op graph
  caten -r llvm examples/axpy.lisp -o libaxpy.so      shared library + axpy.h
  caten -r cuda -S examples/softmax.lisp -o k.cu      CUDA C and a JSON manifest
  caten ops                                           principal ops and library composites
  caten runtimes                                      which runtimes work here, and why not
"""


def diagnostics(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn caten.Error into a diagnostic and exit 1; never show a traceback."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return deep(fn, *args, **kwargs)  # long programs make deep graphs: give the stages room
        except Error as e:
            click.echo(e.format(), err=True)
            sys.exit(1)
        except BrokenPipeError:  # `caten ops | head`
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except RecursionError:
            click.echo("caten: error: input nests too deeply", err=True)
            sys.exit(1)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except OSError as e:
            if not e.filename:
                raise
            click.echo(file_error(e).format(), err=True)
            sys.exit(1)
        except Exception as e:  # a bug in caten: say so in one line
            click.echo(f"caten: internal compiler error: {type(e).__name__}: {e}\n"
                       "please report this with the input that caused it", err=True)
            sys.exit(3)
    return wrapper


def file_error(e: OSError) -> Error:
    """A file the user named could not be opened: say which, why, and what to do."""
    path = os.fsdecode(e.filename)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        hint = f"the folder {folder} does not exist: create it first (mkdir -p {folder})"
    elif isinstance(e, PermissionError):
        hint = "check the file's permissions, or write somewhere else"
    else:
        hint = "check the path"
    return Error(f"cannot open {path}: {e.strerror or e}", hint=hint)


class CatenGroup(click.Group):
    """A group whose default command compiles: `caten [OPTIONS] FILE`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            self._typo(ctx, args[0])
            args = ["compile"] + args
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        """A command's `--no-cache` holds until it ends: one run in-process gives caching back."""
        from caten.cache.store import switch_off

        try:
            return super().invoke(ctx)
        finally:
            switch_off(False)

    def _typo(self, ctx: click.Context, word: str) -> None:
        """`caten rnu`: a word that is no file, looks like no path and is close to a command is a
        mistyped command, a usage error (exit 2), not a missing source file."""
        from caten.errors import closest

        if word.startswith("-") or "." in word or os.sep in word or os.path.exists(word):
            return
        cmd = closest(word, [c for c in self.commands if c != "compile"])
        if cmd:
            raise click.UsageError(f"no command or file named '{word}'; did you mean `{cmd}`?", ctx)


def _check_cpu(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A bad `--cpu` spec is a usage error now, before anything is read."""
    if value:
        from caten import target

        try:
            target.parse(value)
        except Error as e:
            raise click.BadParameter(f"{e.message} ({e.hint})" if e.hint else e.message) from None
    return value


def compile_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options shared by compiling and running."""
    opts = [
        click.option("-r", "--runtime", default="llvm", show_default=True, help="runtime plugin"),
        click.option("-D", "defines", multiple=True, metavar="NAME=VALUE", help="bind a dim or type variable"),
        click.option("-O", "opt", type=click.IntRange(0, 3), default=2, show_default=True, help="optimisation level"),
        click.option("--rules", multiple=True, type=click.Path(), help="rule file (repeatable)"),
        click.option("--fast-math", is_flag=True,
                     help="allow results that are not IEEE-exact (a/b as a*(1/b), 1/(1/x) as x, ...): "
                          "the built-in `fastmath` rules, which no -O level runs"),
        click.option("--no-cache", is_flag=True, help="do not read or write the compile cache"),
        click.option("--plugin", type=click.Path(), help="load a runtime plugin from a Python file"),
        click.option("-v", "--verbose", is_flag=True, help="say what each stage did"),
        click.option("--explain-rules", is_flag=True, help="report each rewrite rule that fired, where and how often"),
        click.option("--cpu", "cpu", metavar="NAME[,+FEAT,-FEAT]", callback=_check_cpu,
                     help="CPU to compile for (llvm, c): host (default), znver3, rocketlake, x86-64-v3...; "
                          "without it, CATEN_CPU"),
        click.option("--debug", is_flag=True,
                     help="check the graph between stages (dtypes, shapes, args; also CATEN_VERIFY=1)"),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def options(runtime: str, defines: tuple[str, ...], opt: int, rules: tuple[str, ...], fast_math: bool,
            no_cache: bool, plugin: str | None, verbose: bool, explain_rules: bool, cpu: str | None,
            debug: bool) -> Options:
    """The Options of the flags `compile_options` declares."""
    explain = None
    if no_cache:  # nothing of this command is cached (until it ends: CatenGroup.invoke)
        from caten.cache.store import switch_off

        switch_off()
    if explain_rules:
        from caten.rewrite import Explain

        explain = Explain()
    return Options(runtime=runtime, defines=parse_defines(defines), opt_level=opt, rules=tuple(rules),
                   fast_math=fast_math, use_cache=not no_cache, plugin=plugin, verbose=verbose, explain=explain,
                   target=cpu or "", debug=debug)


def parse_defines(defines: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for d in defines:
        if "=" not in d:
            raise click.UsageError(f"-D expects NAME=VALUE, got '{d}'")
        k, v = d.split("=", 1)
        out[k.strip()] = v.strip()
    return out


@click.group(cls=CatenGroup, epilog=EXAMPLES, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="caten")
def cli() -> None:
    """caten: compile tensor programs written in a small Lisp into kernels.

    \b
    caten [OPTIONS] FILE compiles FILE (.lisp or .yaml) like a C compiler:
      -r/--runtime NAME  -o PATH  -S  --emit ir|opt-ir|schedule|loops|source|asm|obj|lib
      -D NAME=VALUE  -O0..-O3  --rules FILE  --fast-math  -e/--entry NAME  --no-cache  --plugin PATH  -v
      --cpu NAME (znver3, rocketlake, x86-64-v3, host; also CATEN_CPU)
    (caten FILE --help lists them in full). The commands below run, inspect and test.
    """


@cli.command("compile", hidden=True, epilog=EXAMPLES)
@click.argument("file", type=click.Path())
@compile_options
@click.option("-o", "output", type=click.Path(), help="output path")
@click.option("-S", "asm", is_flag=True, help="write source/assembly text instead of a binary")
@click.option("--emit", type=click.Choice(["ir", "opt-ir", "schedule", "loops", "source", "asm", "obj", "lib"]),
              help="what to write")
@click.option("-e", "--entry", multiple=True, help="composite to compile (default: every one)")
@diagnostics
def compile_cmd(file: str, runtime: str, defines: tuple[str, ...], opt: int, rules: tuple[str, ...],
                fast_math: bool, no_cache: bool, plugin: str | None, verbose: bool, explain_rules: bool,
                cpu: str | None, debug: bool, output: str | None, asm: bool, emit: str | None,
                entry: tuple[str, ...]) -> None:
    """Compile FILE."""
    from caten.cli.compile import compile_file

    compile_file(file, options(runtime, defines, opt, rules, fast_math, no_cache, plugin, verbose, explain_rules,
                               cpu, debug), output, asm, emit, list(entry))


@cli.command("run", epilog=EXAMPLES)
@click.argument("file", type=click.Path())
@click.argument("inputs", nargs=-1)
@compile_options
@click.option("-e", "--entry", help="composite to run (default: the last one in the file)")
@click.option("-o", "output", type=click.Path(), help="output .npy (one output) or .npz (several)")
@click.option("--check-bounds", is_flag=True, default=None,
              help="check every load and store of the generated code (also CATEN_CHECK_BOUNDS=1)")
@click.option("--weights", type=click.Path(), help=".npz of inputs by name (the weights `caten import` wrote)")
@diagnostics
def run_cmd(file: str, inputs: tuple[str, ...], runtime: str, defines: tuple[str, ...], opt: int,
            rules: tuple[str, ...], fast_math: bool, no_cache: bool, plugin: str | None, verbose: bool,
            explain_rules: bool, cpu: str | None, debug: bool, entry: str | None, output: str | None,
            check_bounds: bool | None, weights: str | None) -> None:
    """Run a composite of FILE on .npy inputs given as NAME=PATH.npy."""
    from caten.cli.run import run_file

    opts = options(runtime, defines, opt, rules, fast_math, no_cache, plugin, verbose, explain_rules, cpu, debug)
    run_file(file, list(inputs), opts.but(check_bounds=check_bounds or None), entry, output, weights)


@cli.command("profile", epilog=EXAMPLES)
@click.argument("file", type=click.Path())
@click.argument("inputs", nargs=-1)
@compile_options
@click.option("-e", "--entry", help="composite to profile (default: the last one in the file)")
@click.option("--reps", type=click.IntRange(1, 10000), default=10, show_default=True, help="calls timed")
@click.option("--svg", type=click.Path(), help="write the roofline plot with the kernels on it")
@click.option("--remeasure", is_flag=True, help="measure this machine's peak FLOP/s and bandwidth again")
@diagnostics
def profile_cmd(file: str, inputs: tuple[str, ...], runtime: str, defines: tuple[str, ...], opt: int,
                rules: tuple[str, ...], fast_math: bool, no_cache: bool, plugin: str | None, verbose: bool,
                explain_rules: bool, cpu: str | None, debug: bool, entry: str | None, reps: int,
                svg: str | None, remeasure: bool) -> None:
    """Time each kernel of a composite of FILE (llvm) against this machine's roofline: inputs as
    NAME=PATH.npy, the others random (-D binds symbolic sizes)."""
    from caten.cli.profile import profile_file

    opts = options(runtime, defines, opt, rules, fast_math, no_cache, plugin, verbose, explain_rules, cpu, debug)
    profile_file(file, list(inputs), opts, entry, reps, svg, remeasure)


@cli.command("tune", epilog=EXAMPLES)
@click.argument("file", type=click.Path())
@click.argument("inputs", nargs=-1)
@compile_options
@click.option("-e", "--entry", help="composite to tune (default: the last one in the file)")
@click.option("--reps", type=click.IntRange(1, 1000), default=7, show_default=True,
              help="timed rounds per candidate")
@diagnostics
def tune_cmd(file: str, inputs: tuple[str, ...], runtime: str, defines: tuple[str, ...], opt: int,
             rules: tuple[str, ...], fast_math: bool, no_cache: bool, plugin: str | None, verbose: bool,
             explain_rules: bool, cpu: str | None, debug: bool, entry: str | None, reps: int) -> None:
    """Choose the GEMM shapes of a composite of FILE on this machine by a timed search and keep
    them in the cache (every later compile of it here uses them): inputs as NAME=PATH.npy, the
    others random (-D binds symbolic sizes)."""
    from caten.cli.tune import tune_file

    opts = options(runtime, defines, opt, rules, fast_math, no_cache, plugin, verbose, explain_rules, cpu, debug)
    tune_file(file, list(inputs), opts, entry, reps)


@cli.command("test-runtime")
@click.option("-r", "--runtime", default="llvm", show_default=True, help="runtime to test")
@click.option("-o", "output", type=click.Path(), help="report path (default reports/RUNTIME.md)")
@click.option("--compile-only", is_flag=True, help="compile every case but run none (device absent)")
@click.option("--ops", "pattern", help="only ops whose name matches this glob pattern")
@click.option("--plugin", type=click.Path(), help="load a runtime plugin from a Python file first")
@click.option("--no-gradients", is_flag=True, help="skip the gradient cases (forward cases only)")
@click.option("-j", "--jobs", type=click.IntRange(1, 64), default=1, show_default=True,
              help="forward rows run on this many worker processes at once")
@click.option("--slice", "part", metavar="K/N",
              help="only the rows whose name hashes to K mod N (a fixed third with 0/3: CI's sample)")
@click.option("--dtypes", metavar="LIST", help="only these dtype columns, comma-separated (e.g. i4,u4)")
@click.option("--merge", is_flag=True, help="replace only the cells run in the existing report (no gradients)")
@diagnostics
def test_runtime_cmd(runtime: str, output: str | None, compile_only: bool, pattern: str | None,
                     plugin: str | None, no_gradients: bool, jobs: int, part: str | None, dtypes: str | None,
                     merge: bool) -> None:
    """Run the op-coverage conformance suite (forward and gradient cases) and write
    reports/RUNTIME.md and .json."""
    from caten.cli.testrt import run_conformance

    sys.exit(run_conformance(runtime, output, compile_only, pattern, plugin, gradients=not no_gradients, jobs=jobs,
                             part=part, dtypes=dtypes, merge=merge))


@cli.command("fuzz")
@click.option("--seed", type=int, default=0, show_default=True, help="first program's seed")
@click.option("--count", type=int, help="check N programs, stop at the first failure (default 100)")
@click.option("--soak", type=int, metavar="N", help="check N programs and report every failure")
@click.option("--targets", default="llvm+bounds,c+bounds,llvm", show_default=True,
              help="runtimes to compare with the numpy reference (+bounds: the bounds-checked mode)")
@click.option("--opencl", is_flag=True, help="also run on opencl (bounds-checked)")
@click.option("--shrink-budget", type=int, default=60, show_default=True, help="trials when minimizing a failure")
@click.option("--time-limit", type=float, metavar="SECONDS", help="stop after this long")
@click.option("--show", is_flag=True, help="print the program of --seed and exit")
@diagnostics
def fuzz_cmd(seed: int, count: int | None, soak: int | None, targets: str, opencl: bool, shrink_budget: int,
             time_limit: float | None, show: bool) -> None:
    """Differential fuzzing: random programs on the runtimes against the numpy reference."""
    from caten.cli.fuzz import run_fuzz

    sys.exit(run_fuzz(seed, count, soak, targets, opencl, shrink_budget, time_limit, show))


@cli.command("graph")
@click.argument("file", type=click.Path())
@click.option("-e", "--entry", help="composite to draw (default: the last one)")
@click.option("-o", "output", type=click.Path(), help="g.dot (or g.svg/g.png with Graphviz installed)")
@click.option("-D", "defines", multiple=True, metavar="NAME=VALUE", help="bind a dim or type variable")
@diagnostics
def graph_cmd(file: str, entry: str | None, output: str | None, defines: tuple[str, ...]) -> None:
    """Draw a composite's principal-op graph as Graphviz DOT (or SVG)."""
    from caten.cli.graph import write_graph

    write_graph(file, entry, output, parse_defines(defines))


@cli.group("cache")
def cache_group() -> None:
    """Inspect or clear the compile cache (~/.cache/caten, $XDG_CACHE_HOME, $CATEN_CACHE_DIR).

    A folder that is not yours or that others can write to is refused for your private one."""


@cache_group.command("info")
@click.option("-v", "--verbose", is_flag=True, help="also this process's hit/miss counts per kind")
@diagnostics
def cache_info_cmd(verbose: bool) -> None:
    """Where the cache is, how many entries, how large."""
    from caten.cache import default_cache

    c = default_cache()
    ents = c.entries()
    kinds: dict[str, int] = {}
    for f, _, _ in ents:
        k = f.suffix.lstrip(".")
        kinds[k] = kinds.get(k, 0) + 1
    click.echo(f"location: {c.root}")
    click.echo(f"entries:  {len(ents)}" + (f" ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})"
                                           if kinds else ""))
    click.echo(f"size:     {sum(s for _, s, _ in ents) / 1e6:.2f} MB of {c.cap / 1e6:.0f} MB")
    if verbose:
        st = c.stats
        click.echo(f"this process: {st.hits} hits, {st.misses} misses, {st.writes} writes, {st.corrupt} corrupt")


@cache_group.command("clear")
@diagnostics
def cache_clear_cmd() -> None:
    """Delete every cache entry (your own files in the cache folder; links are never followed)."""
    from caten.cache import default_cache

    c = default_cache()
    click.echo(f"removed {c.clear()} entries from {c.root}")


@cli.group("rules")
def rules_group() -> None:
    """Work with rewrite-rule files."""


@rules_group.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("-v", "--verbose", is_flag=True, help="show every rule checked")
@diagnostics
def rules_check_cmd(files: tuple[str, ...], verbose: bool) -> None:
    """Test each rule for soundness on random inputs; exit 1 on a counterexample."""
    from caten.cli.rules import check_files

    sys.exit(check_files(list(files), verbose))


@cli.command("ops")
@click.option("--markdown", is_flag=True, help="the listing as the page docs/ops.md (with the built-in rules)")
@click.option("-o", "output", type=click.Path(), help="write to this file instead of stdout")
@diagnostics
def ops_cmd(markdown: bool, output: str | None) -> None:
    """List the principal ops and the library composites with their doc lines."""
    if markdown:
        from caten.cli.opsdoc import markdown as page

        text = page()
    else:
        from caten.cli.info import ops_text

        text = ops_text()
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        click.echo(text, nl=False)


@cli.command("runtimes")
@click.option("--plugin", type=click.Path(), help="load a runtime plugin from a Python file first")
@diagnostics
def runtimes_cmd(plugin: str | None) -> None:
    """List runtimes, whether each is available here, and why not."""
    from caten.cli.info import print_runtimes

    print_runtimes(plugin)


from caten.cli.importer import register as _register_import  # noqa: E402

_register_import(cli, diagnostics)


def main() -> None:
    cli(prog_name="caten")
