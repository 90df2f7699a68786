"""Per-transform and per-stage costs of apache-beam 2.77 (pinned), cut without changing a result.

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
  costs a round trip to a worker process and a bundle processor there, and so does a small part:
  a stage's input and output cross gRPC twice (runner to worker and back), which costs more than a
  second core saves unless the stage has much work.
- Every bundle starts a state-sampling thread (it adds the time spent in each step to msecs counters,
  for a runner's monitoring and its stuck-step logs) and joins it at the end, waiting out the
  thread's sleep (2 ms at first, growing to 200 ms): ~2.3 ms of a bare stage's ~6.5 ms in process
  (a chain of 200 GroupByKeys: 1.41 s with the thread, 0.94 s without). Nothing reads those
  counters on a local run (unless it measures its stages' cost: `local_run(timed=True)`).
- Every stage's bundle descriptor is built with a copy of every PCollection of the pipeline.
- A bundle processor unpickles each DoFn and CombineFn and pickles it again for its operation (with
  the input's windowing), bz2-compressed at level 9 (a fixed cost per call, however small), and the operation
  unpickles it once more.
- Every bundle processor builds its operations (unpickling each DoFn) in a new thread, so that
  an unpickling that hangs can end the SDK harness for the runner to restart: a thread started and
  joined per stage.
- A Flatten of PCollections made in different stages is materialised (`translations.sink_flattens`:
  "TODO: actually attempt to sink rather than always materialize"): each input writes to a buffer and
  a stage of its own reads it back. Where that stage only passes the elements on to a GroupByKey, as
  in every CoGroupByKey, it decodes and encodes every element once more in the runner process, one
  stage after another, whatever the worker count: the template lines' per-line join, each
  deduplication's join of documents and survivors.
- At the end of a run the runner closes its worker processes one after another, waiting for each to
  exit, and a worker's interpreter then frees every object it holds (the run's models, its caches)
  before it exits.

`local_run()` installs them for a local run (FnApiRunner, where they were measured), in the driver and
in the worker processes it starts (`apply_in_local_workers`, when a worker imports `pipelines.stage` to
unpickle one of our DoFns); nothing is changed on other runners or in their workers:
- `core.get_function_args_defaults(f)` memoised by the function itself (`f.__func__` for a bound
  method: a bound method's signature does not depend on `self`), held weakly so unpickled lambdas do
  not accumulate; callers get fresh lists. What it reads (parameters and their defaults) is fixed when
  a function is defined; callables that cannot be weakly referenced are asked every time.
- `userstate.get_dofn_specs(dofn)` (asked for every ParDo at graph construction, translation and in
  every bundle processor: ~2,000 times in a rerun of the last group on the sample, ~200 us each)
  splits dir(dofn) once per class into the methods the class fixes (a function, a classmethod; their
  parameters, so their state and timer specs, are the same for every instance) and what is looked up
  per instance: the instance's own attributes, properties and other descriptors, and methods with an
  `_inspect_<name>` (Beam asks that instead, and a Map's reads the wrapped callable). Only the latter
  are asked per call (~6 us). Classes with their own __getattr__, __getattribute__ or __dir__, and
  instances with an `_inspect_` attribute of their own, get Beam's function.
- ParDo's check for a `process` that both yields and returns (a warning) reads the method's source
  file on every ParDo: memoised per code object.
- `view_as(cls)` memoised per options object and class. A view shares its parent's option values
  (`_all_options`), so the same view object is what a fresh one would be: Beam documents that writes
  through any view reach every other.
- Only a stage with work to share (`shares_work`: the input files, a read of >= 8 Parquet files or
  ranges, a GroupByKey of >= 1,000 keys) is
  split over the worker processes; every other stage runs as one bundle (Beam's own single-worker
  `BundleManager`) in the runner process itself, on Beam's in-memory worker (`_InProcess`, what a
  1-worker run uses). Bundle boundaries never change an output here: every output is byte-identical
  across worker counts (tests/test_pipeline.py, test_interleaved.py, test_images_beam.py,
  test_packing_multimodal.py).
- A grouped input shared over the workers is split into parts of about equal bytes
  (`partition_by_size`: each key's group whole, the largest first, to the part with the fewest
  bytes so far), not dealt out key by key in turn: groupings by site or URL are skewed.
- The state sampler keeps its scoped states and the current tracker (metrics
  find their container through it) but runs no thread: its msecs counters stay 0.
- Each stage's bundle descriptor holds the PCollections its transforms read and write, not every
  PCollection of the pipeline: Beam copies all of them (thousands in a run) into every stage's
  descriptor, and each worker parses them again. The SDK harness looks PCollections up
  only through a transform's inputs and outputs; coders, windowing strategies and environments (a few
  dozen) are still copied whole.
- A bundle processor builds its operations in the calling thread: a local run has no harness to
  restart, and a hang there hangs the run either way.
- A stage that only reads a Flatten's buffer and writes it to a GroupByKey is dropped from the plan
  (`sink_flatten_reads`): the Flatten's inputs write to the GroupByKey's buffer themselves, in the
  stages that make them. Only where each input's PCollection has the Flatten's coder and windowing
  (Beam has already made them so, `fix_flatten_coders`) and the buffer has no other reader: the
  GroupByKey gets the same bytes, in the same order.
- Nothing a local run pickles is compressed (`UncompressedPickler`): neither what a bundle processor
  pickles again for its own operations nor the pipeline's functions, which only the driver and the
  run's own worker processes read (each installs the reader before Beam's harness starts).
- The worker processes run `pipelines/local_worker.py`: Beam's SDK harness, then the process's exit
  functions, then an exit without the interpreter's finalization (docs/design.md, "Local runner
  settings").
- A run with worker processes starts them as it begins (`local_run(standby=N)`), before the graph is
  built: on Linux, with no other thread running, forked from the driver, which has imported Beam's
  harness and the pipeline's modules already (and, where the run packs, loaded the tokenizer its
  manifests need); otherwise each imports them while the driver builds the graph. Each then waits for
  the environment Beam gives a worker it starts. The runner hands that environment to a standby
  process (`StandbyWorker`, Beam's `SubprocessSdkWorker` but for the start) instead of starting one
  when the first stage with work to share begins, and waiting for its imports there; the unused ones
  end with the run.
- What exists when a local run begins, and again once its graph is built, is kept out of the runner
  process's garbage collections (`gc.freeze`; `graph_built`) until the run ends: each full collection
  traversed the modules and the graph again. And the run's processes collect less often
  (LOCAL_GC_THRESHOLDS): a young collection per 100,000 objects allocated, not 700.
`tests/test_pipeline.py::test_beam_overhead_fixes_give_beam_s_answers` checks the memos against Beam's
own answers over a whole run's graph; `tests/test_beam_overhead.py` which stages the workers share.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import gc
import inspect
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import traceback
import types
import weakref

import grpc
from apache_beam.internal import cloudpickle_pickler, pickler
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2
from apache_beam.runners.portability import local_job_service
from apache_beam.runners.portability.fn_api_runner import execution, fn_runner, worker_handlers
from apache_beam.runners.worker import bundle_processor, operations, sdk_worker_main, statesampler
from apache_beam.transforms import core, userstate
from apache_beam.utils import thread_pool_executor
from google.protobuf import json_format, text_format

_ARGS_DEFAULTS = core.get_function_args_defaults
_DOFN_SPECS = userstate.get_dofn_specs
_YIELD_AND_RETURN = core._check_fn_use_yield_and_return
_VIEW_AS = PipelineOptions.view_as
_PARALLEL_PROCESS_BUNDLE = fn_runner.ParallelBundleManager.process_bundle
_CREATE_STAGES = fn_runner.FnApiRunner.create_stages
_CONTROL_CLOSE = worker_handlers.ControlConnection.close
_START_WORKER = worker_handlers.SubprocessSdkWorkerHandler.start_worker
_DESCRIPTOR = execution.BundleContextManager._build_process_bundle_descriptor
_PARTITION = execution.GroupingBuffer.partition
_SAMPLER_START, _SAMPLER_STOP = statesampler.StateSampler.start, statesampler.StateSampler.stop
_PICKLER_DUMPS, _PICKLER_LOADS = pickler.dumps, pickler.loads
LOCAL_RUN_ENV = "CURATE_LOCAL_RUN"
IN_PROCESS = "curate-in-process"  # the key of the runner process's own worker among a run's workers
_signatures: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_class_specs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_yield_and_return: dict = {}  # code object -> bool; code objects live as long as their module


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


def dofn_specs(dofn):
    """`userstate.get_dofn_specs(dofn)`: the union, over every name in dir(dofn) whose value is a
    bound method, of the state and timer specs among that method's parameter defaults. The names
    whose method is fixed by the class are looked at once per class (`_class_methods`); per instance
    only the rest: its own attributes, and what the class computes per instance (properties and
    other descriptors, and methods with an `_inspect_<name>`, which Beam asks instead and which may
    read the instance: a Map's `_inspect_process` looks at the wrapped callable)."""
    cls = type(dofn)
    per_class = _class_specs.get(cls)
    if per_class is None:
        per_class = _class_specs[cls] = _class_methods(dofn)
    own = getattr(dofn, "__dict__", None)
    if per_class is False or not isinstance(own, dict) or any(n.startswith("_inspect_") for n in own):
        return _DOFN_SPECS(dofn)
    fixed, per_instance = per_class
    states, timers = set(), set()
    for name, (s, t) in fixed.items():
        if name not in own:
            states |= s
            timers |= t
    for name in {*per_instance, *(n for n, v in own.items() if isinstance(v, types.MethodType))}:
        s, t = _method_specs(dofn, name)
        states |= s
        timers |= t
    return states, timers


def _class_methods(dofn):
    """(name -> specs for the methods fixed by the class, names to look at per instance), or False
    when the class looks its attributes up its own way (__getattr__, __getattribute__, __dir__) or a
    method's parameters are invalid (Beam's own function then raises, every time)."""
    cls = type(dofn)
    if (cls.__getattribute__ is not object.__getattribute__ or hasattr(cls, "__getattr__")
            or cls.__dir__ is not object.__dir__):
        return False
    fixed, per_instance = {}, []
    own = getattr(dofn, "__dict__", {})
    for name in dir(cls):
        raw = next((c.__dict__[name] for c in cls.__mro__ if name in c.__dict__), _MISSING)
        if name in own:  # this instance shadows the class's value; another may not
            per_instance.append(name)
        elif isinstance(raw, (types.FunctionType, classmethod, types.MethodType)) and not hasattr(cls, f"_inspect_{name}"):
            try:
                fixed[name] = _method_specs(dofn, name)
            except ValueError:
                return False
        elif raw is _MISSING or (hasattr(type(raw), "__get__") and not isinstance(raw, _NEVER_METHODS)
                                 and not (isinstance(raw, property) and core.DoFn.__dict__.get(name) is raw)):
            per_instance.append(name)  # a property, an _inspect_-ed method, another descriptor
    return fixed, tuple(per_instance)


_MISSING = object()
# What the class dict can hold whose value on an instance is never a Python bound method (getattr
# gives a function, a builtin method, a method-wrapper, a dict or a weakref): skipped by Beam too.
# The getset descriptors a Python class has are __dict__, __weakref__ and object's __class__. DoFn's
# own properties (_process_defined, _can_yield_batches, ...) are bools.
_NEVER_METHODS = (staticmethod, types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType,
                  types.ClassMethodDescriptorType, types.GetSetDescriptorType, type)


def _method_specs(dofn, name: str) -> tuple[set, set]:
    """The body of `get_dofn_specs`'s loop for one name (nothing unless its value is a bound method)."""
    from apache_beam.runners.common import MethodWrapper
    from apache_beam.transforms.core import _DoFnParam, _StateDoFnParam, _TimerDoFnParam

    if not isinstance(getattr(dofn, name, None), types.MethodType):
        return set(), set()
    defaults = MethodWrapper(dofn, name).defaults
    param_ids = [d.param_id for d in defaults if isinstance(d, _DoFnParam)]
    if len(param_ids) != len(set(param_ids)):
        raise ValueError('DoFn %r has duplicate %s method parameters: %s.' % (dofn, name, param_ids))
    return ({d.state_spec for d in defaults if isinstance(d, _StateDoFnParam)},
            {d.timer_spec for d in defaults if isinstance(d, _TimerDoFnParam)})


def uses_yield_and_return(fn) -> bool:
    """`core._check_fn_use_yield_and_return(fn)` (ParDo's warning check, which reads the source of
    `process` from disk for every ParDo built), once per code object: its answer depends only on the
    source lines `inspect.getsourcelines` finds for that code (after `__func__` and `__wrapped__`)."""
    try:
        code = inspect.unwrap(getattr(fn, "__func__", fn)).__code__
    except (AttributeError, ValueError):
        return _YIELD_AND_RETURN(fn)
    if code not in _yield_and_return:
        _yield_and_return[code] = _YIELD_AND_RETURN(fn)
    return _yield_and_return[code]


def process_bundle_descriptor(self):
    """`BundleContextManager._build_process_bundle_descriptor` with only the stage's own PCollections."""
    components = self.execution_context.pipeline_components
    used = {pcoll for transform in self.stage.transforms
            for pcoll in (*transform.inputs.values(), *transform.outputs.values())}
    return beam_fn_api_pb2.ProcessBundleDescriptor(
        id=self.bundle_uid,
        transforms={transform.unique_name: transform for transform in self.stage.transforms},
        pcollections={pcoll: components.pcollections[pcoll] for pcoll in sorted(used)
                      if pcoll in components.pcollections},
        coders=dict(components.coders.items()),
        windowing_strategies=dict(components.windowing_strategies.items()),
        environments=dict(components.environments.items()),
        state_api_service_descriptor=self.state_api_service_descriptor(),
        timer_api_service_descriptor=self.data_api_service_descriptor())


def create_stages(self, pipeline_proto):
    """`FnApiRunner.create_stages`, then `sink_flatten_reads` on the stages it planned."""
    context, stages = _CREATE_STAGES(self, pipeline_proto)
    return context, sink_flatten_reads(context, stages)


def sink_flatten_reads(context, stages: list) -> list:
    """`stages` (fused, in the order they run) without the stages that only read a Flatten's buffer
    and write what they read to a GroupByKey's; the Flatten's inputs write to the GroupByKey's buffer
    instead. Kept where the buffer has another reader, or where an input's PCollection differs from
    the Flatten's output in coder or windowing (the bytes would not be the GroupByKey's)."""
    from apache_beam.runners.portability.fn_api_runner.translations import split_buffer_id

    pcollections = context.components.pcollections
    readers, writers = {}, {}
    for stage in stages:
        for transform in stage.transforms:
            if transform.spec.urn == bundle_processor.DATA_INPUT_URN:
                readers.setdefault(transform.spec.payload, []).append(stage)
            elif transform.spec.urn == bundle_processor.DATA_OUTPUT_URN:
                writers.setdefault(transform.spec.payload, []).append(transform)

    def wire(pcollection):
        proto = pcollections[pcollection]
        return proto.coder_id, proto.windowing_strategy_id

    gone = set()
    for stage in stages:
        if len(stage.transforms) != 2 or stage.timers:
            continue
        read, write = stage.transforms
        if (read.spec.urn != bundle_processor.DATA_INPUT_URN or write.spec.urn != bundle_processor.DATA_OUTPUT_URN
                or split_buffer_id(read.spec.payload)[0] != "materialize"
                or split_buffer_id(write.spec.payload)[0] != "group"):
            continue
        (passed,), (grouped,) = read.outputs.values(), write.inputs.values()
        inputs = writers.get(read.spec.payload, [])
        if (passed != grouped or len(readers[read.spec.payload]) != 1 or not inputs
                or any(wire(next(iter(t.inputs.values()))) != wire(passed) for t in inputs)):
            continue
        for transform in inputs:
            transform.spec.payload = write.spec.payload
        gone.add(stage)
    if not gone:
        return stages
    kept = [stage for stage in stages if stage not in gone]
    for stage in kept:  # the order is already fixed; nothing may wait on a stage that is gone
        if stage.must_follow & gone:
            stage.must_follow = frozenset(stage.must_follow - gone)
    return kept


def view_as(self, cls):
    """`PipelineOptions.view_as(cls)`, one view per options object and class (kept beside the
    object, not in it: an options object pickles and lists its `__dict__`)."""
    views = _views.setdefault(self, {})
    if cls not in views:
        views[cls] = _VIEW_AS(self, cls)
    return views[cls]


def process_bundle(self, inputs, expected_outputs, fired_timers, expected_output_timers, dry_run=False):
    """`ParallelBundleManager.process_bundle` for a stage with enough work to share (`shares_work`);
    any other stage runs as one bundle in the runner process itself (`_InProcess`). Partitioning first
    is what the parallel path does too (it caches the parts). A stage that stays here takes its input
    whole (one part): split into more, an input of fewer chunks than parts is decoded and encoded
    again element by element (`ListBuffer.partition`), to be joined back here."""
    share = shares_work(inputs)
    parts = {name: buffer.partition(self._num_workers if share else 1) for name, buffer in inputs.items()}
    if share and all(any(chunk for p in parts.values() for chunk in p[worker]) for worker in range(self._num_workers)):
        return _PARALLEL_PROCESS_BUNDLE(self, inputs, expected_outputs, fired_timers, expected_output_timers,
                                        dry_run)
    whole = {name: [chunk for part in p for chunk in part] for name, p in parts.items()}
    single = fn_runner.BundleManager(_InProcess(self.bundle_context_manager), self._progress_frequency,
                                     cache_token_generator=self._cache_token_generator)
    return single.process_bundle(whole, expected_outputs, fired_timers, expected_output_timers, dry_run)


SPREAD = "Spread "        # a Reshuffle labelled "Spread ..." marks work to share whatever its size
PARALLEL_MIN_KEYS = 1000  # a grouped input with fewer keys runs in the runner process
READ_FILES = "/ReadAllFiles/Reshard/"  # ReadAllFromParquet's reshuffle: each key a file (or a range of one) to read
PARALLEL_MIN_FILES = 8


def partition_by_size(self, n: int) -> list[list[bytes]]:
    """`GroupingBuffer.partition` into n > 1 parts of about equal bytes: each key's group encoded as
    Beam encodes it (Beam's partition into one part per key), the largest first, each to the part
    with the fewest bytes so far. Beam deals the keys out in turn whatever their size, and a
    grouping by site or URL is skewed (docs/design.md, "Local runner settings"). Which worker gets a
    key never changes an output (see `shares_work`)."""
    if self._grouped_output or n == 1:
        return _PARTITION(self, n)
    groups = sorted((b"".join(chunks) for chunks in _PARTITION(self, max(len(self._table), 1))), key=len,
                    reverse=True)
    parts, sizes = [[] for _ in range(n)], [0] * n
    for group in groups:
        smallest = sizes.index(min(sizes))
        parts[smallest].append(group)
        sizes[smallest] += len(group)
    self._grouped_output = [[b"".join(part)] for part in parts]
    return self._grouped_output


def shares_work(inputs) -> bool:
    """Whether a stage's bundle goes to the worker processes: its input comes out of a "Spread ..."
    reshuffle (the input files, each a file's worth of work), out of the reshuffle of a read of
    Parquet files with at least PARALLEL_MIN_FILES files or ranges to read (a finished group's
    documents that the next reads back, the loss audit's read of every output), or out of a
    GroupByKey with at least PARALLEL_MIN_KEYS keys. Everything else (counters, stats, markers, the drop
    rows a branch gathers before it writes them, the bytes of a few thousand images) costs more to ship
    to a worker and back than the worker saves: on 6 copies of mixed-dev (10,158 pages, 2 workers) 357 of 409 stages were slower
    with 2 worker processes than in process (5.6 s in all), and the whole run took 43.5/43.7 s when
    every stage with work for both went to the workers, 38.9/40.3 s with this rule (alternating runs)."""
    if any(name.startswith(SPREAD) for name in inputs):
        return True
    keys = sum(len(b._table) for b in inputs.values()
               if isinstance(b, execution.GroupingBuffer) and not b._grouped_output)
    if any(READ_FILES in name for name in inputs):
        return keys >= PARALLEL_MIN_FILES
    return keys >= PARALLEL_MIN_KEYS


class _InProcess:
    """A stage's bundle context whose worker is the runner process itself (Beam's EmbeddedWorkerHandler:
    in-memory data and state planes, the mode of a 1-worker run), for the stages that do not share
    work: such a bundle then costs no round trip through gRPC to a worker process. The handler is made
    once per run and closed with the run's other workers."""

    def __init__(self, context):
        self._context = context

    def __getattr__(self, name):
        return getattr(self._context, name)

    @property
    def worker_handlers(self):
        manager = self._context.execution_context.worker_handler_manager
        handlers = manager._cached_handlers[IN_PROCESS]  # (a defaultdict: close_all closes and forgets it)
        if not handlers:
            environment = next(iter(manager._environments.values()))
            handlers.append(worker_handlers.EmbeddedWorkerHandler(
                None, manager.state_servicer, manager._job_provision_info.for_environment(environment), manager))
        return handlers


class CallerThreadExecutor:
    """The `concurrent.futures.ThreadPoolExecutor` a bundle processor builds its operations with, running
    each task in the calling thread: the future it returns is already done."""

    def __init__(self, max_workers=None, thread_name_prefix=""):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    @staticmethod
    def submit(fn, *args, **kwargs) -> concurrent.futures.Future:
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as err:  # raised again by future.result(), as from Beam's thread
            future.set_exception(err)
        return future


class UncompressedPickler:
    """Beam's `pickler` in a local run (the pickler module's functions, and the `pickler` bundle_processor
    and operations see): pickles without bz2 and base64 (a plain pickle's first byte is 0x80), and reads
    both those and Beam's own. Only where Beam's default pickler (cloudpickle) is the one in use."""

    @staticmethod
    def dumps(o, enable_trace=True, use_zlib=False, **kwargs) -> bytes:
        if pickler.desired_pickle_lib is not cloudpickle_pickler:
            return _PICKLER_DUMPS(o, enable_trace, use_zlib, **kwargs)
        return cloudpickle_pickler._dumps(o)  # a pickle's first byte is 0x80, never one of base64's

    @staticmethod
    def loads(encoded, enable_trace=True, use_zlib=False):
        if isinstance(encoded, bytes) and encoded[:1] == b"\x80":
            return cloudpickle_pickler._loads(encoded)
        return _PICKLER_LOADS(encoded, enable_trace, use_zlib)


# `concurrent` as bundle_processor sees it: its ThreadPoolExecutor is CallerThreadExecutor
_CALLER_THREAD = types.SimpleNamespace(futures=types.SimpleNamespace(
    ThreadPoolExecutor=CallerThreadExecutor, TimeoutError=concurrent.futures.TimeoutError))


def start_untimed(self) -> None:
    """`statesampler.StateSampler.start` without its sampling thread."""
    self.tracked_thread = threading.current_thread()
    statesampler.set_current_tracker(self)
    self.started = True


def stop_untimed(self) -> None:
    statesampler.set_current_tracker(None)
    self.finished = True


def _untimed_sampler(on: bool) -> None:
    sampler = statesampler.StateSampler
    sampler.start, sampler.stop = (start_untimed, stop_untimed) if on else (_SAMPLER_START, _SAMPLER_STOP)


@contextlib.contextmanager
def local_run(timed: bool = False, standby: int = 0):
    """A local run's pipeline (FnApiRunner, where these were measured): the fixes installed in this
    process for its duration, and in the worker processes it starts (pipelines/local_worker.py installs
    them before Beam's harness reads anything: they inherit LOCAL_RUN_ENV), with untimed state samplers
    unless `timed` (the run measures its stages' cost). Only this process and those workers read the
    pipeline's pickled functions, so they are not compressed (Beam's `pickler` as UncompressedPickler,
    which reads both forms). `standby`: worker processes to start now (`start_standby_workers`; the
    run's worker count), the unused ones ended with the run. Remote workers (Dataflow, Flink, Spark,
    Prism) and other runners' drivers run Beam as released."""
    before = os.environ.get(LOCAL_RUN_ENV)
    os.environ[LOCAL_RUN_ENV] = "timed" if timed else "1"
    try:
        gc.freeze()  # the modules, kept out of every collection here and in the workers forked now
        start_standby_workers(standby)  # first: a forked worker installs the fixes itself, as any other
        apply()
        pickler.dumps, pickler.loads = UncompressedPickler.dumps, UncompressedPickler.loads
        yield
    finally:
        gc.unfreeze()
        stop_standby_workers()
        pickler.dumps, pickler.loads = _PICKLER_DUMPS, _PICKLER_LOADS
        apply(False)
        if before is None:
            os.environ.pop(LOCAL_RUN_ENV, None)
        else:
            os.environ[LOCAL_RUN_ENV] = before


def graph_built() -> None:
    """The driver has built the graph and the run begins (inside `local_run`): what exists now (the
    modules, the graph and its protos) lives until the run ends, so the collector stops traversing it
    (`gc.freeze`; `local_run` hands it back when it ends). Each full collection of the runner process
    traversed it all, a few tenths of a second each, in the runner's serial time."""
    gc.freeze()


def close_control(self) -> None:
    """`ControlConnection.close`, which tells a connected worker there is no more work, and also one
    that has not connected yet: with stages run in the runner process, a short run can end before a
    worker process has started, and Beam's close then leaves it waiting for instructions forever
    (and the run waiting for it to exit)."""
    if self._state == worker_handlers.BeamFnControlServicer.UNSTARTED_STATE:
        self._push_queue.put(worker_handlers.BeamFnControlServicer._DONE_MARKER)  # read when it connects
    _CONTROL_CLOSE(self)


# A local run's processes collect cyclic garbage rarely: a page's dicts, lists and strings are freed by
# their reference counts, but with Python's thresholds every 700 of them allocated started a young
# collection, and about every hundredth of those a full one, which traversed every object the run holds
# (the models' tables, the tokenizer's piece cache, a grouping buffer's elements): docs/design.md, "Local
# runner settings".
LOCAL_GC_THRESHOLDS = (100_000, 50, 50)
_gc_thresholds: tuple | None = None  # the process's own while a local run's are set


BEAM_WORKER, LOCAL_WORKER = b"-m apache_beam.runners.worker.sdk_worker_main", b"-m pipelines.local_worker"
STANDBY_COMMAND = f"{sys.executable} -m pipelines.local_worker"  # what FnApiRunner's command becomes
STANDBY = "--standby"  # pipelines/local_worker.py's argument: wait for the environment on stdin


_standby: list[subprocess.Popen] = []  # worker processes started ahead, not yet handed to the runner


def start_standby_workers(n: int) -> None:
    """Start `n` worker processes ahead of the runner. On Linux, where this process runs no other
    thread, forked from it: a worker then has Beam's harness and the pipeline's modules already, and
    the graph is built without worker processes importing them beside it on the same cores. Otherwise
    (macOS, where system libraries may not survive a fork; a driver with threads) started as
    `python -m pipelines.local_worker --standby`, which imports them while the driver builds the graph.
    Either way the worker waits for its environment before it runs the harness."""
    forked = sys.platform.startswith("linux") and threading.active_count() == 1
    for _ in range(n):
        worker = (_fork_worker() if forked else
                  subprocess.Popen([sys.executable, "-m", "pipelines.local_worker", STANDBY], stdin=subprocess.PIPE))
        with worker_handlers.SUBPROCESS_LOCK:
            _standby.append(worker)


def _fork_worker() -> "ForkedWorker":
    """A standby worker forked from this process (`run_forked`), reading its environment from a pipe of
    its own."""
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the worker: it never returns from here
        atexit._clear()  # the driver's exit functions are the driver's to run
        try:
            os.close(write_end)
            for other in _standby:  # the earlier workers' pipes: theirs to see closed
                if isinstance(other, ForkedWorker):
                    os.close(other.stdin.fileno())
            run_forked(read_end)
        except BaseException:  # as an interpreter ends on an uncaught exception: traceback, exit functions, 1
            traceback.print_exc()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(1)
    os.close(read_end)
    return ForkedWorker(pid, os.fdopen(write_end, "wb"))


forked_worker = False  # this process is a standby worker forked from the driver (`run_forked`)


def run_forked(read_end: int) -> None:
    """A standby worker forked from the driver (`_fork_worker`, which has cleared the driver's exit
    functions): it has the driver's modules but none of its log handlers, waits for its environment on
    `read_end` (as pipelines/local_worker.py `--standby` does on stdin), and runs the harness. Returns
    only by raising."""
    global forked_worker
    forked_worker = True
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)  # as a fresh interpreter's, until the harness sets its own
    logging.getLogger("apache_beam").setLevel(logging.NOTSET)
    with os.fdopen(read_end, "rb") as pipe:
        line = pipe.readline()
    if not line:
        os._exit(0)
    os.environ.clear()
    os.environ.update(json.loads(line))
    run_harness()


def run_harness() -> None:
    """A local run's worker process (pipelines/local_worker.py, or forked): Beam's SDK harness until the
    runner is done with it, the exit functions, then the end of the process without the interpreter's
    finalization."""
    apply_in_local_workers()  # before the harness unpickles anything: the run's pickles are not compressed
    sdk_worker_main.main(sys.argv[:1])
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class ForkedWorker:
    """A forked standby worker with the part of `subprocess.Popen`'s interface a standby is used
    through: `stdin`, `poll`, `wait`, `kill`, `returncode`."""

    def __init__(self, pid: int, stdin):
        self.pid, self.stdin, self.returncode = pid, stdin, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def stop_standby_workers() -> None:
    """End the standby workers the runner did not use (a run whose stages all ran in process)."""
    with worker_handlers.SUBPROCESS_LOCK:
        unused, _standby[:] = list(_standby), []
    for process in unused:
        process.kill()  # still importing or waiting: nothing of the run's is in it
        process.wait()


def _descriptor(url: str) -> str:
    return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))


class StandbyWorker(local_job_service.SubprocessSdkWorker):
    """Beam's `SubprocessSdkWorker` (apache-beam 2.77's `run`: a logging server for the worker, the
    worker's environment, a wait for its exit) handing that environment to a standby process instead of
    starting one."""

    def __init__(self, process: subprocess.Popen, *args):
        super().__init__(*args)
        self._process = process

    def run(self) -> None:
        options = [("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)]
        logging_server = grpc.server(thread_pool_executor.shared_unbounded_instance(), options=options)
        logging_port = logging_server.add_insecure_port("[::]:0")
        logging_server.start()
        beam_fn_api_pb2_grpc.add_BeamFnLoggingServicer_to_server(local_job_service.BeamFnLoggingServicer(),
                                                                 logging_server)
        env = dict(os.environ, CONTROL_API_SERVICE_DESCRIPTOR=_descriptor(self._control_address),
                   LOGGING_API_SERVICE_DESCRIPTOR=_descriptor(f"localhost:{logging_port}"),
                   PIPELINE_OPTIONS=json_format.MessageToJson(self._provision_info.provision_info.pipeline_options))
        if self._worker_id:
            env["WORKER_ID"] = self._worker_id
        p = self._process
        try:
            p.stdin.write(json.dumps(env).encode() + b"\n")
            p.stdin.close()
            p.wait()
            if p.returncode:
                raise RuntimeError(f"Worker subprocess exited with return code {p.returncode}")
        finally:
            if p.poll() is None:
                p.kill()
            logging_server.stop(0)


def start_worker(self) -> None:
    """`SubprocessSdkWorkerHandler.start_worker`, the worker process started as pipelines/local_worker.py
    (Beam's SDK harness, then an exit without the interpreter's finalization): a standby one where the
    run started some (`start_standby_workers`)."""
    self._worker_command_line = self._worker_command_line.replace(BEAM_WORKER, LOCAL_WORKER)
    standby = None
    with worker_handlers.SUBPROCESS_LOCK:
        while standby is None and _standby and self._worker_command_line == STANDBY_COMMAND.encode():
            standby = _standby.pop(0)
            if standby.poll() is not None:  # it failed before it was needed: a process of Beam's own instead
                standby = None
    if standby is None:
        _START_WORKER(self)
        return
    self.worker = StandbyWorker(standby, self._worker_command_line, self.control_address, self.provision_info,
                                self.worker_id)
    self.worker_thread = threading.Thread(name="run_worker", target=self.worker.run)
    self.worker_thread.start()


_FIXES = ((core, "get_function_args_defaults", function_args_defaults, _ARGS_DEFAULTS),
          (userstate, "get_dofn_specs", dofn_specs, _DOFN_SPECS),
          (core, "_check_fn_use_yield_and_return", uses_yield_and_return, _YIELD_AND_RETURN),
          (PipelineOptions, "view_as", view_as, _VIEW_AS),
          (fn_runner.ParallelBundleManager, "process_bundle", process_bundle, _PARALLEL_PROCESS_BUNDLE),
          (fn_runner.FnApiRunner, "create_stages", create_stages, _CREATE_STAGES),
          (worker_handlers.ControlConnection, "close", close_control, _CONTROL_CLOSE),
          (worker_handlers.SubprocessSdkWorkerHandler, "start_worker", start_worker, _START_WORKER),
          (execution.BundleContextManager, "_build_process_bundle_descriptor", process_bundle_descriptor, _DESCRIPTOR),
          (execution.GroupingBuffer, "partition", partition_by_size, _PARTITION),
          (bundle_processor, "concurrent", _CALLER_THREAD, bundle_processor.concurrent),
          (bundle_processor, "pickler", UncompressedPickler, pickler),
          (operations, "pickler", UncompressedPickler, pickler))


def apply(on: bool = True) -> None:
    """Install the fixes (`on`), or put Beam's own functions back; the untimed sampler with them in a
    process a local run marked (LOCAL_RUN_ENV); the collector's thresholds (LOCAL_GC_THRESHOLDS, or
    what they were)."""
    global _gc_thresholds
    for owner, name, ours, beams in _FIXES:
        setattr(owner, name, ours if on else beams)
    _untimed_sampler(on and os.environ.get(LOCAL_RUN_ENV) == "1")
    if on and _gc_thresholds is None:
        _gc_thresholds = gc.get_threshold()
        gc.set_threshold(*LOCAL_GC_THRESHOLDS)
    elif not on and _gc_thresholds is not None:
        gc.set_threshold(*_gc_thresholds)
        _gc_thresholds = None


def apply_in_local_workers() -> None:
    """In a worker process a local run started (pipelines/local_worker.py, before Beam's harness; and at
    import of pipelines.stage): install the fixes, and Beam's pickler as UncompressedPickler (the
    run's pickles are not compressed)."""
    if os.environ.get(LOCAL_RUN_ENV) in ("1", "timed"):
        apply()
        pickler.dumps, pickler.loads = UncompressedPickler.dumps, UncompressedPickler.loads
