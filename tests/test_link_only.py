"""kernels/link_only.py: helpers that only other kernels call are compiled
without machine code of their own; a helper whose code needs numba's JIT
engine (it reads its environment, as print does) takes numba's usual path.
The kernels' own use is covered by every other test, and the cache path by
tests/test_warmup.py."""

import numba

from mrope_tracker.kernels.link_only import LinkOnlyCompiler

link_only = numba.njit(_nrt=False, no_cpython_wrapper=True, no_cfunc_wrapper=True, pipeline_class=LinkOnlyCompiler)


@link_only
def _half(x):
    return x // 2


@link_only
def _shout(x):
    print("value", x)
    return x + 1


@numba.njit
def _caller(x):
    return _half(x) + _shout(x)


def test_helpers_link_with_and_without_an_environment(capfd):
    assert _caller(10) == 5 + 11
    assert "value 10" in capfd.readouterr().out
    (half,) = _half.overloads.values()
    (shout,) = _shout.overloads.values()
    assert not half.library._in_engine  # linked only: no machine code of its own
    assert shout.library._in_engine  # print reads the helper's environment
