"""A numba pipeline for the helpers that only other kernels call (`inner`).

numba turns every function it compiles into machine code at once, even a
helper without a CPython wrapper that nothing ever calls directly: each
caller links the helper's optimised LLVM IR into its own module and
generates its own machine code from it. The helper's own code generation is
wasted: 2.0 s of the 2.9 s the builders' half of a cold `warmup()` spent
generating code (29 libraries, 2-core EPYC, numba 0.68).

`LinkOnlyCompiler` is numba's nopython pipeline, lowering into a
`LinkOnlyLibrary`: a code library that stops after optimisation. It keeps
the optimised module for callers to link and never hands it to numba's JIT
engine. Its cache entry is that module's bitcode (numba's own "bitcode"
form) instead of object code; a process that loads it, to compile a new
caller, generates its code then, as numba does for any bitcode entry.

A helper whose code reads its environment (numba's per-function global for
objects the code may reach at run time: print, object mode, exceptions with
run-time arguments) or has unresolved recursive references takes numba's
usual path instead: its caller's linked copy would read an environment
pointer that numba sets only through the JIT engine. None of ours does, and
the check is a scan of the module's text.

This uses numba internals (its code library and pipeline classes, numba
0.68). jit_options falls back to numba's own pipeline if they cannot be
imported.
"""

import re

from numba.core.codegen import JITCodeLibrary
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.typed_passes import NopythonTypeInference

__all__ = ["LinkOnlyCompiler"]


class _CodegenForLinkOnly:
    """numba's JIT code generator, except that setting a function's
    environment does nothing: a LinkOnlyLibrary's module never reaches the
    JIT engine, which is where numba would look the pointer up."""

    def __init__(self, codegen):
        self._codegen = codegen

    def set_env(self, env_name, env):
        pass

    def __getattr__(self, name):
        return getattr(self._codegen, name)


# An instruction that reads an environment global (its definition line
# starts with the name, any use has it after an operator), or a reference
# numba resolves at run time (recursion).
_NEEDS_THE_ENGINE = re.compile(r"^[^@\n][^\n]*_ZN08NumbaEnv|numba\.unresolved\$", re.MULTILINE)


class LinkOnlyLibrary(JITCodeLibrary):
    """A code library that callers link and that is never run itself."""

    _in_engine = False  # True when it needed numba's usual path (see _NEEDS_THE_ENGINE)

    @property
    def codegen(self):
        return self._codegen if self._in_engine else _CodegenForLinkOnly(self._codegen)

    def _finalize_final_module(self):
        if _NEEDS_THE_ENGINE.search(str(self._final_module)):
            self._in_engine = True
            super()._finalize_final_module()
            return
        # as numba's, without adding the module to the JIT engine and
        # generating its machine code
        self._finalize_dynamic_globals()
        self._verify_declare_only_symbols()
        self._finalized = True

    def get_pointer_to_function(self, name):
        self._ensure_finalized()
        if self._in_engine:
            return super().get_pointer_to_function(name)
        return 0  # nothing to point to: callers link the IR

    def serialize_using_object_code(self):
        if self._in_engine:
            return super().serialize_using_object_code()
        return self.serialize_using_bitcode()


@register_pass(mutates_CFG=False, analysis_only=False)
class UseLinkOnlyLibrary(FunctionPass):
    """Give the lowering pass a LinkOnlyLibrary to fill."""

    _name = "mrope_tracker_use_link_only_library"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        if state.library is None:
            state.library = LinkOnlyLibrary(state.targetctx.codegen(), state.func_id.func_qualname)
            state.library.enable_object_caching()  # (as numba's lowering does, for the usual path)
        return True


class LinkOnlyCompiler(CompilerBase):
    """numba's nopython pipeline, lowering into a LinkOnlyLibrary."""

    def define_pipelines(self):
        pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm.add_pass_after(UseLinkOnlyLibrary, NopythonTypeInference)
        pm.finalize()
        return [pm]
