"""Memoised introspection for apache-beam 2.77 (pinned): same answers, asked once.

Profiled on a whole run of mixed-dev (1 worker, ~1,100 ParDos, ~420 fused stages), Beam spends about
a seventh of the wall clock asking Python for the same signatures again and again:
- `userstate.get_dofn_specs` runs `inspect.signature` on every bound method in `dir(dofn)` (~30,
  nearly all inherited from `DoFn`), several times per ParDo while the graph is built and again in
  every bundle processor a worker builds: ~270,000 signatures per run, the same few hundred functions.
- `PipelineOptions.view_as` builds a new options object, re-parsing every registered option class,
  on every `Pipeline.apply` (~5,000 times).

`apply()` (run when `pipelines` is imported: by the driver, and by every worker when it unpickles one
of our DoFns) memoises both:
- `core.get_function_args_defaults(f)` by the function itself (`f.__func__` for a bound method; a
  bound method's signature does not depend on `self`), held weakly so unpickled lambdas do not
  accumulate; callers get fresh lists. What it reads (parameters and their defaults) is fixed when a
  function is defined; callables that cannot be weakly referenced are asked every time.
- `view_as(cls)` per options object and class. A view shares its parent's option values
  (`_all_options`), so the same view object is what a fresh one would be; Beam documents that writes
  through any view reach every other.
`tests/test_beam_memo.py` checks both against Beam's own answers over a whole run's graph.
"""

from __future__ import annotations

import types
import weakref

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import core

_ARGS_DEFAULTS = core.get_function_args_defaults
_VIEW_AS = PipelineOptions.view_as
_signatures: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def function_args_defaults(f):
    """`core.get_function_args_defaults(f)`, computed once per function."""
    bound = isinstance(f, types.MethodType)
    key = f.__func__ if bound else f
    try:
        known = _signatures.setdefault(key, {})
    except TypeError:  # not weakly referable (a builtin) or unhashable
        return _ARGS_DEFAULTS(f)
    if bound not in known:
        known[bound] = _ARGS_DEFAULTS(f)
    args, defaults = known[bound]
    return list(args), list(defaults)


def view_as(self, cls):
    """`PipelineOptions.view_as(cls)`, one view per options object and class (kept beside the
    object, not in it: an options object pickles and lists its `__dict__`)."""
    views = _views.setdefault(self, {})
    if cls not in views:
        views[cls] = _VIEW_AS(self, cls)
    return views[cls]


def apply() -> None:
    core.get_function_args_defaults = function_args_defaults
    PipelineOptions.view_as = view_as
