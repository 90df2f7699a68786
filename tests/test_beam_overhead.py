"""pipelines/beam_overhead.py in real 2-process FnApiRunner pipelines: only the stages with work to
share go to the worker processes, the rest run in the runner process; a local run's bundles sample no
state, in the driver and in its workers; bundle descriptors carry only their stages' PCollections."""

from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that, equal_to
import pytest

from pipelines import beam_overhead


def test_only_stages_with_work_to_share_go_to_the_worker_processes(monkeypatch, request):
    """With 2 worker processes: a GroupByKey of >= PARALLEL_MIN_KEYS keys and a "Spread ..." reshuffle
    of 4 elements are split over both workers; a 50-key GroupByKey and a global count run as one
    bundle in the runner process itself. Results are Beam's either way."""
    import os

    beam_overhead.apply()  # (as a local run does)
    request.addfinalizer(lambda: beam_overhead.apply(False))
    bundles = []  # (stage name, elements sent, ran in the runner process) of every bundle
    real = fn_runner.BundleManager.process_bundle

    def counted(self, inputs, *args, **kwargs):
        sizes = [len(b) for chunks in inputs.values() for b in chunks]
        bundles.append((self.bundle_context_manager.stage.name, sum(sizes),
                        isinstance(self.bundle_context_manager, beam_overhead._InProcess)))
        return real(self, inputs, *args, **kwargs)

    monkeypatch.setattr(fn_runner.BundleManager, "process_bundle", counted)
    options = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=2",
                               "--direct_running_mode=multi_processing", "--no_pipeline_type_check"])
    runner_pid, keys = os.getpid(), beam_overhead.PARALLEL_MIN_KEYS
    with beam.Pipeline(options=options) as p:
        items = p | "Items" >> beam.Create(list(range(2 * keys)), reshuffle=False)
        many = (items | "KeyMany" >> beam.Map(lambda x: (x % keys, x)) | "GroupMany" >> beam.GroupByKey()
                | "PidMany" >> beam.MapTuple(lambda k, xs: os.getpid()) | "DistinctMany" >> beam.Distinct())
        few = items | "KeyFew" >> beam.Map(lambda x: (x % 50, x)) | "GroupFew" >> beam.GroupByKey()
        sums = few | "Sum" >> beam.MapTuple(lambda k, xs: (k, sum(xs)))
        pids_few = few | "PidFew" >> beam.MapTuple(lambda k, xs: os.getpid()) | "DistinctFew" >> beam.Distinct()
        spread = (p | "Four" >> beam.Create([1, 2, 3, 4], reshuffle=False) | "Spread items" >> beam.Reshuffle()
                  | "PidSpread" >> beam.Map(lambda x: os.getpid()) | "DistinctSpread" >> beam.Distinct())
        total = sums | "Total" >> beam.combiners.Count.Globally()
        assert_that(sums, equal_to([(k, sum(range(k, 2 * keys, 50))) for k in range(50)]), label="Sums")
        assert_that(total, equal_to([50]), label="Count")
        assert_that(pids_few, equal_to([runner_pid]), label="FewHere")
        for label, pids in (("Many", many), ("Spread", spread)):  # two worker processes, not this one
            assert_that(pids | f"Both{label}" >> beam.combiners.ToList()
                        | f"Check{label}" >> beam.Map(lambda ps: len(ps) == 2 and runner_pid not in ps),
                        equal_to([True]), label=f"{label}OnWorkers")
    by_stage: dict[str, list[tuple[int, bool]]] = {}
    for stage, size, here in bundles:
        by_stage.setdefault(stage, []).append((size, here))

    def runs(fragment):
        return next(v for stage, v in by_stage.items() if fragment in stage)
    assert [here for _, here in runs("(GroupMany/Read)")] == [False, False]
    assert [here for _, here in runs("(Spread items/ReshufflePerKey/GroupByKey/Read)")] == [False, False]
    assert [here for _, here in runs("(GroupFew/Read)")] == [True]
    assert [here for _, here in runs("(Total/CombineGlobally(CountCombineFn)/CombinePerKey/Group/Read)")] == [True]


def test_a_grouped_input_is_split_over_the_workers_by_the_bytes_of_its_groups():
    """`partition_by_size`: the groups Beam's own partition gives, each key's group whole, split into
    parts of about equal bytes. Four large groups at even positions of the key order (Beam deals keys
    out in turn: all four to one worker) end two and two; an empty grouping still gives every worker
    its empty part."""
    from apache_beam.coders import coders
    from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
    from apache_beam.runners.portability.fn_api_runner import execution
    from apache_beam.transforms import core, window
    from apache_beam.utils.windowed_value import WindowedValue

    def buffer(pairs):
        pre = coders.WindowedValueCoder(coders.TupleCoder([coders.VarIntCoder(), coders.StrUtf8Coder()]))
        post = coders.WindowedValueCoder(coders.TupleCoder([coders.VarIntCoder(),
                                                            coders.IterableCoder(coders.StrUtf8Coder())]))
        grouping = execution.GroupingBuffer(pre, post, core.Windowing(window.GlobalWindows()))
        stream = create_OutputStream()
        for pair in pairs:
            pre.get_impl().encode_to_stream(WindowedValue(pair, 0, [window.GlobalWindow()]), stream, True)
        grouping.append(stream.get())
        return grouping, post.get_impl()

    def groups(encoded, coder):
        stream, out = create_InputStream(encoded), []
        while stream.size() > 0:
            key, values = coder.decode_from_stream(stream, True).value
            out.append((key, sorted(values)))
        return sorted(out)

    big = {0, 2, 4, 6}
    pairs = [(k, "x" * 50_000 if k in big else f"v{k}") for k in range(300)]
    pairs += [(k, "again") for k in range(0, 300, 7)]
    beams, coder = buffer(pairs)
    ours, _ = buffer(pairs)
    expected = groups(b"".join(chunk for part in beam_overhead._PARTITION(beams, 2) for chunk in part), coder)
    parts = beam_overhead.partition_by_size(ours, 2)
    assert [len(part) for part in parts] == [1, 1]
    assert groups(parts[0][0] + parts[1][0], coder) == expected
    assert [sum(1 for key, _ in groups(part[0], coder) if key in big) for part in parts] == [2, 2]
    sizes = [len(part[0]) for part in parts]
    assert max(sizes) - min(sizes) <= 50_100, sizes
    assert beam_overhead.partition_by_size(ours, 2) is parts  # partitioned once, as Beam's
    assert beam_overhead.partition_by_size(buffer([])[0], 2) == [[b""], [b""]]


def test_a_local_run_samples_no_state_in_any_process_and_keeps_metrics():
    """Inside `local_run()` the driver and the worker processes it starts run bundles with untimed state
    samplers (no thread per bundle); a step still has its tracker, so metrics are counted. Outside it,
    and in a worker no local run started, Beam's sampler is untouched."""
    import os

    from apache_beam.metrics.metric import Metrics, MetricsFilter
    from apache_beam.runners.worker import statesampler

    beam_overhead.apply()
    assert statesampler.StateSampler.start is beam_overhead._SAMPLER_START  # LOCAL_RUN_ENV unset
    beam_overhead.apply(False)

    from pipelines import stage as stage_module

    def untimed(x):  # runs in a worker, where unpickling it imported pipelines.stage, as our DoFns do
        assert stage_module.__name__ == "pipelines.stage"
        Metrics.counter("test", "seen").inc()
        tracker = statesampler.get_current_tracker()
        return (x % 2, (statesampler.StateSampler.start is beam_overhead.start_untimed, tracker is not None,
                        os.getpid()))

    options = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=2",
                               "--direct_running_mode=multi_processing", "--no_pipeline_type_check"])
    with beam_overhead.local_run():
        assert statesampler.StateSampler.start is beam_overhead.start_untimed
        p = beam.Pipeline(options=options)
        # a "Spread ..." reshuffle: the check runs on the worker processes, not in this one
        seen = (p | beam.Create(list(range(40)), reshuffle=False) | "Spread checks" >> beam.Reshuffle()
                | "Check" >> beam.Map(untimed))
        flags = seen | beam.Map(lambda kv: kv[1][:2]) | beam.Distinct()
        assert_that(flags, equal_to([(True, True)]))
        runner_pid = os.getpid()
        on_workers = (seen | "Pids" >> beam.Map(lambda kv: kv[1][2]) | "DistinctPids" >> beam.Distinct()
                      | beam.combiners.ToList() | beam.Map(lambda ps: len(ps) == 2 and runner_pid not in ps))
        assert_that(on_workers, equal_to([True]), label="OnWorkers")
        result = p.run()
        result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("seen"))["counters"]
    assert sum(c.committed for c in counters) == 40
    assert statesampler.StateSampler.start is beam_overhead._SAMPLER_START
    assert beam_overhead.LOCAL_RUN_ENV not in os.environ


def test_a_run_whose_stages_all_stay_in_the_runner_process_still_ends():
    """With 2 worker processes and nothing to share, every stage runs in the runner process and the
    run can end before a worker has connected: it must still end (the worker is told there is no
    work when it connects), not wait for that worker forever. Run in a child with a deadline."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import apache_beam as beam
        from apache_beam.options.pipeline_options import PipelineOptions
        from apache_beam.testing.util import assert_that, equal_to
        from pipelines import beam_overhead
        beam_overhead.apply()
        options = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=2",
                                   "--direct_running_mode=multi_processing", "--no_pipeline_type_check"])
        with beam.Pipeline(options=options) as p:
            sums = (p | beam.Create([(1, 2), (1, 3), (2, 5)], reshuffle=False) | beam.CombinePerKey(sum))
            assert_that(sums, equal_to([(1, 5), (2, 5)]))
        print("ended")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0 and proc.stdout.strip() == "ended", proc.stderr[-2000:]


def test_a_local_run_s_worker_processes_run_beam_s_harness_as_local_worker():
    """The worker processes a local run starts run pipelines/local_worker.py (Beam's SDK harness), and the
    run ends with them: a child runs a 2-worker pipeline whose mapped step, on the workers, reports its
    process's main module."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys
        import apache_beam as beam
        from apache_beam.options.pipeline_options import PipelineOptions
        from apache_beam.testing.util import assert_that, equal_to
        from pipelines import beam_overhead
        options = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=2",
                                   "--direct_running_mode=multi_processing", "--no_pipeline_type_check"])
        with beam_overhead.local_run():
            with beam.Pipeline(options=options) as p:
                mains = (p | beam.Create(list(range(40)), reshuffle=False) | "Spread items" >> beam.Reshuffle()
                         | beam.Map(lambda _: sys.modules["__main__"].__spec__.name) | beam.Distinct())
                assert_that(mains, equal_to(["pipelines.local_worker"]))
        print("ended")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0 and proc.stdout.strip() == "ended", proc.stderr[-2000:]


STANDBY_SCRIPT = """
import os, sys, threading
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from pipelines import beam_overhead
if sys.argv[1:] == ["thread"]:  # a thread running: no fork, workers started as processes of their own
    threading.Thread(target=threading.Event().wait, daemon=True).start()
driver = os.getpid()
options = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=2",
                           "--direct_running_mode=multi_processing", "--no_pipeline_type_check"])

def started(_):
    how = "forked" if beam_overhead.forked_worker else " ".join(sys.argv[1:])
    return how, os.getppid() == driver, os.getpid() != driver

with beam_overhead.local_run(standby=2):
    used = list(beam_overhead._standby)
    with beam.Pipeline(options=options) as p:
        seen = (p | beam.Create(list(range(40)), reshuffle=False) | "Spread items" >> beam.Reshuffle()
                | beam.Map(started) | beam.Distinct())
        assert_that(seen, equal_to([("forked" if sys.argv[1:] != ["thread"] else "--standby", True, True)]))
print(len(used), [p.returncode for p in used], beam_overhead._standby)
with beam_overhead.local_run(standby=2):
    unused = list(beam_overhead._standby)
    with beam.Pipeline(options=options) as p:
        assert_that(p | beam.Create([(1, 2), (1, 3)], reshuffle=False) | beam.CombinePerKey(sum),
                    equal_to([(1, 5)]))
print(len(unused), all(p.poll() is not None for p in unused), beam_overhead._standby)
"""


@pytest.mark.parametrize("how", ["forked", "thread"])
def test_a_local_run_hands_its_workers_to_the_standby_processes_it_started_and_ends_the_unused_ones(how):
    """local_run(standby=2) starts two worker processes before the pipeline is built, and the runner hands
    them its workers' environment instead of starting processes of its own: the mapped step runs in
    children of the driver that were forked from it, or, where the driver runs another thread and
    cannot fork safely, that were started with `--standby`; both end with the run. Standby workers that
    a run does not use (all its stages stay in the runner process) are ended with it. In a child with a
    deadline."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", STANDBY_SCRIPT, how], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0 and proc.stdout.split("\n")[-3:] == ["2 [0, 0] []", "2 True []", ""], (
        proc.stdout, proc.stderr[-2000:])


def test_a_standby_worker_whose_input_ends_before_its_environment_ends_quietly():
    """A standby worker that is never handed an environment (its stdin closed) exits with status 0
    without starting Beam's harness."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "pipelines.local_worker", "--standby"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == "", proc.stderr[-2000:]


def test_local_worker_runs_the_exit_functions_then_ends_and_a_failed_harness_fails_the_process():
    """After the harness returns, the process's exit functions run (the extraction children stop, logs
    are flushed) and it ends with status 0; a harness that raises ends it as Beam's would: the
    traceback, the exit functions, status 1."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    for harness, status in (("lambda argv: None", 0), ("lambda argv: 1 / 0", 1)):
        script = ("import atexit; from pipelines import beam_overhead as b, local_worker as w; "
                  f"b.sdk_worker_main.main = {harness}; atexit.register(print, 'exit function ran'); w.main()")
        proc = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=60)
        assert proc.returncode == status and proc.stdout.strip() == "exit function ran", proc.stderr[-2000:]
        assert ("ZeroDivisionError" in proc.stderr) == bool(status)


def test_a_forked_worker_runs_its_own_exit_functions_not_the_driver_s_and_a_failed_harness_fails_it():
    """A standby worker forked from the driver waits for its environment on its pipe, runs the harness,
    then its own exit functions (the driver's are not its to run: they run once, in the driver) and ends
    with status 0; a harness that raises ends it with the traceback, its exit functions, status 1."""
    import subprocess
    import sys
    import textwrap

    root = Path(__file__).resolve().parents[1]
    for body, status in (("pass", 0), ("1 / 0", 1)):
        script = textwrap.dedent(f"""
            import atexit, json, os
            from pipelines import beam_overhead
            def harness(argv):
                atexit.register(print, "worker exit function ran", flush=True)
                {body}
            beam_overhead.sdk_worker_main.main = harness
            atexit.register(print, "driver exit function ran")
            worker = beam_overhead._fork_worker()
            worker.stdin.write(json.dumps({{"PATH": os.environ["PATH"]}}).encode() + b"\\n")
            worker.stdin.close()
            print("status", worker.wait(), flush=True)
        """)
        proc = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.split("\n") == ["worker exit function ran", f"status {status}", "driver exit function ran",
                                          ""], (proc.stdout, proc.stderr[-2000:])
        assert ("ZeroDivisionError" in proc.stderr) == bool(status)


def test_a_local_run_keeps_what_exists_out_of_collections_until_it_ends():
    """What exists as a local run begins, and once its graph is built, is frozen (not traversed by the
    collector) for the run, and the collector runs at the local run's thresholds; both are handed back
    when it ends, also when the run fails."""
    import gc

    own = gc.get_threshold()
    assert own != beam_overhead.LOCAL_GC_THRESHOLDS
    with beam_overhead.local_run():
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == beam_overhead.LOCAL_GC_THRESHOLDS
        before = gc.get_freeze_count()
        beam_overhead.graph_built()
        assert gc.get_freeze_count() >= before
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == own
    with pytest.raises(RuntimeError):
        with beam_overhead.local_run():
            raise RuntimeError("the run failed")
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == own


def test_a_worker_gets_the_fixes_only_from_a_local_run():
    """Importing pipelines.stage (what unpickling our DoFns does in any worker) installs nothing in a
    worker of another runner (Dataflow, Flink, Spark, Prism); in a worker process a local run started
    (LOCAL_RUN_ENV inherited) it installs the fixes, the untimed sampler, the uncompressed pickler and the
    collector's thresholds."""
    import os
    import subprocess
    import sys

    check = ("import pipelines.stage; from pipelines import beam_overhead as b; "
             "from apache_beam.transforms import userstate; from apache_beam.runners.worker import statesampler; "
             "from apache_beam.runners.worker import bundle_processor as p; "
             "from apache_beam.internal import pickler as q; "
             "print(userstate.get_dofn_specs is b.dofn_specs, statesampler.StateSampler.start is b.start_untimed, "
             "p.concurrent.futures.ThreadPoolExecutor is b.CallerThreadExecutor, p.pickler is b.UncompressedPickler, "
             "q.loads is b.UncompressedPickler.loads, __import__('gc').get_threshold() == b.LOCAL_GC_THRESHOLDS)")
    env = {k: v for k, v in os.environ.items() if k != beam_overhead.LOCAL_RUN_ENV}
    root = Path(__file__).resolve().parents[1]
    for marked, expected in ((False, "False False False False False False"), (True, "True True True True True True")):
        out = subprocess.run([sys.executable, "-c", check], cwd=root, capture_output=True, text=True, check=True,
                             env={**env, beam_overhead.LOCAL_RUN_ENV: "1"} if marked else env).stdout.split("\n")
        assert out[-2] == expected, out


def test_bundle_descriptors_hold_what_beam_s_hold_for_their_transforms():
    """Every stage's descriptor in a 2-process run with side inputs, a combine and a GroupByKey: the same
    transforms, coders, windowing strategies and environments as Beam's own, and exactly Beam's
    PCollections among those the stage's transforms read or write; the results are Beam's."""
    from apache_beam.runners.portability.fn_api_runner import execution

    compared = []

    def checked(self):
        ours, beams = beam_overhead.process_bundle_descriptor(self), beam_overhead._DESCRIPTOR(self)
        used = {p for t in ours.transforms.values() for p in (*t.inputs.values(), *t.outputs.values())}
        assert ours.transforms == beams.transforms and ours.coders == beams.coders
        assert ours.windowing_strategies == beams.windowing_strategies and ours.environments == beams.environments
        assert dict(ours.pcollections) == {p: beams.pcollections[p] for p in used}
        assert len(ours.pcollections) < len(beams.pcollections)
        compared.append(self.stage.name)
        return ours

    options = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=2",
                               "--direct_running_mode=multi_processing"])
    beam_overhead.apply()
    execution.BundleContextManager._build_process_bundle_descriptor = checked
    try:
        with beam.Pipeline(options=options) as p:
            numbers = p | beam.Create(range(2000))
            total = numbers | "Total" >> beam.CombineGlobally(sum)
            shifted = numbers | "Shift" >> beam.Map(lambda n, t: (n % 7, n + t), beam.pvalue.AsSingleton(total))
            grouped = shifted | beam.GroupByKey() | beam.MapTuple(lambda k, vs: (k, len(list(vs))))
            assert_that(grouped, equal_to([(k, len(range(k, 2000, 7))) for k in range(7)]))
    finally:
        beam_overhead.apply(False)  # Beam's own functions back, this one too
    assert execution.BundleContextManager._build_process_bundle_descriptor is beam_overhead._DESCRIPTOR
    assert len(compared) > 5


def test_bundle_processors_build_their_operations_in_the_calling_thread():
    """Inside `local_run()` a bundle processor unpickles its DoFns in the thread that processes the
    bundle (Beam starts a thread per bundle processor for it), and a failure there still fails the run
    with its own error; outside it Beam's executor is back. (Worker processes: the next test.)"""
    import concurrent.futures
    import os
    import threading

    import pytest
    from apache_beam.runners.worker import bundle_processor

    class Unpickled(beam.DoFn):
        threads: set = set()  # every thread of this process that unpickled one

        def __setstate__(self, state):
            self.__dict__.update(state)
            type(self).threads.add(threading.get_ident())

        def process(self, x):
            yield type(self).threads == {threading.get_ident()}, os.getpid()

    class Unpicklable(beam.DoFn):
        def __setstate__(self, state):
            raise ValueError("unpickling failed on purpose")

        def process(self, x):
            yield x

    options = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=2",
                               "--direct_running_mode=multi_processing", "--no_pipeline_type_check"])
    with beam_overhead.local_run():
        assert bundle_processor.concurrent.futures.ThreadPoolExecutor is beam_overhead.CallerThreadExecutor
        with beam.Pipeline(options=options) as p:
            runner_pid = os.getpid()
            checked = (p | beam.Create(list(range(40)), reshuffle=False) | beam.ParDo(Unpickled())
                       | beam.MapTuple(lambda same, pid: (same, pid == runner_pid)) | beam.Distinct())
            assert_that(checked, equal_to([(True, True)]))
        with pytest.raises(Exception, match="unpickling failed on purpose"):
            with beam.Pipeline(options=options) as p:
                _ = p | "Few" >> beam.Create([1, 2]) | beam.ParDo(Unpicklable())
    assert bundle_processor.concurrent.futures.ThreadPoolExecutor is concurrent.futures.ThreadPoolExecutor


def test_operations_pickled_again_are_not_compressed_and_everything_else_reads_as_beam_s():
    """UncompressedPickler: what it pickles is a plain pickle (no bz2, no base64) that it reads back;
    what Beam's pickler wrote (the pipeline's payloads) it reads as Beam does. Inside `local_run()` the
    bundle processor and the operations read and write through it; a run with a side input, a combine
    and a GroupByKey over 2 worker processes gives Beam's results; outside it Beam's pickler is back."""
    import os

    from apache_beam.internal import pickler
    from apache_beam.runners.worker import bundle_processor, operations

    fn = (lambda x, k=3: x * k, (), {}, [], None)
    plain = beam_overhead.UncompressedPickler.dumps(fn)
    assert plain[:1] == b"\x80" and beam_overhead.UncompressedPickler.loads(plain)[0](2) == 6
    assert beam_overhead.UncompressedPickler.loads(pickler.dumps(fn))[0](2) == 6
    assert beam_overhead.UncompressedPickler.loads(pickler.dumps(fn).decode("ascii"))[0](2) == 6

    options = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=2",
                               "--direct_running_mode=multi_processing", "--no_pipeline_type_check"])
    with beam_overhead.local_run():
        assert bundle_processor.pickler is operations.pickler is beam_overhead.UncompressedPickler
        with beam.Pipeline(options=options) as p:
            items = p | beam.Create([(k % 7, k) for k in range(3000)], reshuffle=False)
            scale = p | "Scale" >> beam.Create([10])
            sums = (items | "Spread items" >> beam.Reshuffle()
                    | beam.Map(lambda kv, s: (kv[0], kv[1] * s), beam.pvalue.AsSingleton(scale))
                    | beam.CombinePerKey(sum))
            assert_that(sums, equal_to([(r, 10 * sum(k for k in range(3000) if k % 7 == r)) for r in range(7)]))
            grouped = items | beam.GroupByKey() | beam.MapTuple(lambda k, vs: (k, len(list(vs))))
            assert_that(grouped, equal_to([(r, len(range(r, 3000, 7))) for r in range(7)]), label="Grouped")
    assert bundle_processor.pickler is operations.pickler is pickler
    assert beam_overhead.LOCAL_RUN_ENV not in os.environ


def test_a_local_run_pickles_its_functions_uncompressed():
    """`local_run()`: Beam's pickler writes plain pickles for the whole pipeline (its DoFns' payloads in
    the pipeline proto) and reads both forms; a run with a side input, a combine and a GroupByKey gives
    Beam's results; afterwards Beam's pickler is back. (Its worker processes read them: every 2-worker
    run of this file and of tests/test_pipeline.py.)"""
    from apache_beam.internal import pickler
    from apache_beam.portability.api import beam_runner_api_pb2

    options = PipelineOptions(["--runner=FnApiRunner", "--no_pipeline_type_check"])
    with beam_overhead.local_run():
        assert pickler.dumps((1, 2))[:1] == b"\x80"
        with beam.Pipeline(options=options) as p:
            items = p | beam.Create([(k % 5, k) for k in range(200)])
            scale = p | "Scale" >> beam.Create([3])
            sums = (items | beam.Map(lambda kv, s: (kv[0], kv[1] * s), beam.pvalue.AsSingleton(scale))
                    | beam.CombinePerKey(sum))
            assert_that(sums, equal_to([(r, 3 * sum(k for k in range(200) if k % 5 == r)) for r in range(5)]))
            grouped = items | beam.GroupByKey() | beam.MapTuple(lambda k, vs: (k, len(list(vs))))
            assert_that(grouped, equal_to([(r, 40) for r in range(5)]), label="Grouped")
            payloads = [t.spec.payload for t in p.to_runner_api().components.transforms.values()
                        if t.spec.urn == "beam:transform:pardo:v1"]
        assert payloads and all(beam_runner_api_pb2.ParDoPayload.FromString(x).do_fn.payload[:1] == b"\x80"
                                for x in payloads)
    assert pickler.dumps is beam_overhead._PICKLER_DUMPS and pickler.dumps((1, 2))[:1] != b"\x80"


def test_a_flatten_that_only_feeds_a_group_by_key_is_not_a_stage_of_its_own(monkeypatch, request):
    """A CoGroupByKey of PCollections made in different stages: its inputs write to the GroupByKey's
    buffer themselves (no "Flatten/Read" stage decodes and encodes them again), with 1 and with 2
    worker processes; a Flatten whose output something else also reads keeps its stage. Results
    are Beam's."""
    beam_overhead.apply()
    request.addfinalizer(lambda: beam_overhead.apply(False))
    stages = []
    real = fn_runner.BundleManager.process_bundle

    def named(self, inputs, *args, **kwargs):
        stages.append(self.bundle_context_manager.stage.name)
        return real(self, inputs, *args, **kwargs)

    monkeypatch.setattr(fn_runner.BundleManager, "process_bundle", named)
    for workers in (1, 2):
        stages.clear()
        options = PipelineOptions(["--runner=FnApiRunner", f"--direct_num_workers={workers}",
                                   "--direct_running_mode=multi_processing", "--no_pipeline_type_check"])
        with beam.Pipeline(options=options) as p:
            left = p | "Left" >> beam.Create([(k % 7, k) for k in range(40)]) | "Square" >> beam.MapTuple(
                lambda k, v: (k, v * v))
            right = (p | "Right" >> beam.Create(list(range(7))) | "Spread right" >> beam.Reshuffle()
                     | "Name" >> beam.Map(lambda k: (k, f"key {k}")))
            joined = ({"squares": left, "names": right} | "Join" >> beam.CoGroupByKey()
                      | "Sorted" >> beam.MapTuple(lambda k, g: (k, sorted(g["squares"]), g["names"])))
            both = (left, right | "Len" >> beam.MapTuple(lambda k, name: (k, len(name)))) | "Both" >> beam.Flatten()
            grouped = both | "Group" >> beam.GroupByKey() | "Total" >> beam.MapTuple(lambda k, vs: (k, sum(vs)))
            counted = both | "Count" >> beam.combiners.Count.Globally()
            assert_that(joined, equal_to([(k, sorted(v * v for v in range(k, 40, 7)), [f"key {k}"]) for k in range(7)]),
                        label="Joined")
            assert_that(grouped, equal_to([(k, sum(v * v for v in range(k, 40, 7)) + 5) for k in range(7)]),
                        label="Grouped")
            assert_that(counted, equal_to([47]), label="Counted")
        assert stages and not any("Join/CoGroupByKeyImpl/Flatten/Read" in name for name in stages), workers
        assert any("(Both/Read)" in name for name in stages), workers


def test_a_read_of_enough_parquet_files_goes_to_the_worker_processes(monkeypatch, request, tmp_path):
    """With 2 worker processes, ReadAllFromParquet's reshuffle of PARALLEL_MIN_FILES files is split over
    both workers (each file is work: its rows are decoded there), and a read of 2 files runs in the
    runner process. The rows are Beam's either way."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    beam_overhead.apply()
    request.addfinalizer(lambda: beam_overhead.apply(False))
    for folder, n in (("many", beam_overhead.PARALLEL_MIN_FILES), ("few", 2)):
        (tmp_path / folder).mkdir()
        for i in range(n):
            pq.write_table(pa.table({"x": list(range(10 * i, 10 * i + 10))}), tmp_path / folder / f"part-{i}.parquet")
    bundles = []
    real = fn_runner.BundleManager.process_bundle

    def counted(self, inputs, *args, **kwargs):
        bundles.append((self.bundle_context_manager.stage.name,
                        isinstance(self.bundle_context_manager, beam_overhead._InProcess)))
        return real(self, inputs, *args, **kwargs)

    monkeypatch.setattr(fn_runner.BundleManager, "process_bundle", counted)
    options = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=2",
                               "--direct_running_mode=multi_processing", "--no_pipeline_type_check"])
    with beam.Pipeline(options=options) as p:
        for folder, n in (("many", beam_overhead.PARALLEL_MIN_FILES), ("few", 2)):
            rows = (p | f"{folder}/Pattern" >> beam.Create([str(tmp_path / folder / "part-*.parquet")])
                    | f"{folder}/Read" >> beam.io.ReadAllFromParquet() | f"{folder}/X" >> beam.Map(lambda r: r["x"]))
            assert_that(rows, equal_to(list(range(10 * n))), label=f"{folder}/Rows")
    here = {name.split("/")[0].lstrip("("): [] for name, _ in bundles}
    for name, in_runner in bundles:
        if "/ReadAllFiles/Reshard/ReshufflePerKey/GroupByKey/Read" in name:
            here[name.split("/")[0].lstrip("(")].append(in_runner)
    assert here["many"] == [False, False] and here["few"] == [True]
