"""Three per-transform and per-stage costs of apache-beam 2.77 (pinned), cut without changing a result.

Profiled on a whole run of mixed-dev (~1,100 ParDos fused into ~420 stages), Beam spent about a
fifth of the wall clock on work whose answer never changes, or on workers with nothing to do:
- `userstate.get_dofn_specs` runs `inspect.signature` on every bound method in `dir(dofn)` (~30,
  nearly all inherited from `DoFn`), several times per ParDo while the graph is built and again in
  every bundle processor a worker builds: ~270,000 signatures per run of the same few hundred
  functions.
- `PipelineOptions.view_as` builds a new options object, re-parsing every registered option class,
  on every `Pipeline.apply` (~5,000 times).
- With more than one local worker, FnApiRunner's `ParallelBundleManager` splits every stage's input
  into one part per worker and sends each worker its part, also when some parts are empty (most of
  the ~420 stages carry a single element: a count, a side input, a marker). The empty part still
  costs a round trip to a worker process and a bundle processor there.

`apply()` (run when `pipelines.stage` is imported: by the driver, and by every worker when it unpickles
one of our DoFns) installs:
- `core.get_function_args_defaults(f)` memoised by the function itself (`f.__func__` for a bound
  method: a bound method's signature does not depend on `self`), held weakly so unpickled lambdas do
  not accumulate; callers get fresh lists. What it reads (parameters and their defaults) is fixed when
  a function is defined; callables that cannot be weakly referenced are asked every time.
- `view_as(cls)` memoised per options object and class. A view shares its parent's option values
  (`_all_options`), so the same view object is what a fresh one would be: Beam documents that writes
  through any view reach every other.
- A stage whose input leaves a worker with an empty part runs as one bundle on one worker (Beam's own
  single-worker `BundleManager`), so no worker waits on another's empty bundle and no parallelism is
  lost. Bundle boundaries never change an output here: every output is byte-identical across worker
  counts (tests/test_pipeline.py, test_interleaved.py, test_images_beam.py, test_packing_multimodal.py).
`tests/test_pipeline.py::test_beam_overhead_fixes_give_beam_s_answers` checks the memos against Beam's
own answers over a whole run's graph; `tests/test_beam_overhead.py` the single-worker stages.
"""

from __future__ import annotations

import types
import weakref

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.transforms import core

_ARGS_DEFAULTS = core.get_function_args_defaults
_VIEW_AS = PipelineOptions.view_as
_PARALLEL_PROCESS_BUNDLE = fn_runner.ParallelBundleManager.process_bundle
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


def process_bundle(self, inputs, expected_outputs, fired_timers, expected_output_timers, dry_run=False):
    """`ParallelBundleManager.process_bundle`, or one bundle on one worker when a worker's part of the
    input would be empty. Partitioning first is what the parallel path does too (it caches the parts)."""
    parts = {name: buffer.partition(self._num_workers) for name, buffer in inputs.items()}
    if all(any(chunk for p in parts.values() for chunk in p[worker]) for worker in range(self._num_workers)):
        return _PARALLEL_PROCESS_BUNDLE(self, inputs, expected_outputs, fired_timers, expected_output_timers,
                                        dry_run)
    whole = {name: [chunk for part in p for chunk in part] for name, p in parts.items()}
    single = fn_runner.BundleManager(self.bundle_context_manager, self._progress_frequency,
                                     cache_token_generator=self._cache_token_generator)
    return single.process_bundle(whole, expected_outputs, fired_timers, expected_output_timers, dry_run)


def apply() -> None:
    core.get_function_args_defaults = function_args_defaults
    PipelineOptions.view_as = view_as
    fn_runner.ParallelBundleManager.process_bundle = process_bundle
