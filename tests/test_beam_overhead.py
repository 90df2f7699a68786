"""pipelines/beam_overhead.py in real 2-process FnApiRunner pipelines: a stage whose input leaves a
worker nothing runs as one bundle, a stage with work for both is still split; a local run's bundles
sample no state, in the driver and in its workers."""

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that, equal_to

from pipelines import beam_overhead


def test_a_stage_with_an_empty_part_runs_on_one_worker(monkeypatch):
    beam_overhead.apply()  # (as importing pipelines.stage does)
    bundles = []  # (stage name, elements sent) of every bundle a worker ran
    real = fn_runner.BundleManager.process_bundle

    def counted(self, inputs, *args, **kwargs):
        sizes = [len(b) for chunks in inputs.values() for b in chunks]
        bundles.append((self.bundle_context_manager.stage.name, sum(sizes)))
        return real(self, inputs, *args, **kwargs)

    monkeypatch.setattr(fn_runner.BundleManager, "process_bundle", counted)
    options = PipelineOptions(["--runner=FnApiRunner", "--direct_num_workers=2",
                               "--direct_running_mode=multi_processing", "--no_pipeline_type_check"])
    with beam.Pipeline(options=options) as p:
        many = p | "Many" >> beam.Create(list(range(400)), reshuffle=False) | "Key" >> beam.Map(lambda x: (x % 50, x))
        sums = many | "GroupKeys" >> beam.GroupByKey() | "Sum" >> beam.MapTuple(lambda k, xs: (k, sum(xs)))
        total = sums | "Total" >> beam.combiners.Count.Globally()
        assert_that(sums, equal_to([(k, sum(range(k, 400, 50))) for k in range(50)]), label="Sums")
        assert_that(total, equal_to([50]), label="Count")
    by_stage: dict[str, list[int]] = {}
    for stage, size in bundles:
        by_stage.setdefault(stage, []).append(size)
    grouped = [sizes for stage, sizes in by_stage.items() if "(GroupKeys/Read)" in stage]
    counted_once = [sizes for stage, sizes in by_stage.items() 
                    if "(Total/CombineGlobally(CountCombineFn)/CombinePerKey/Group/Read)" in stage]
    assert grouped and all(len(sizes) == 2 and min(sizes) > 0 for sizes in grouped)  # 50 keys: both workers
    assert counted_once and all(len(sizes) == 1 for sizes in counted_once)  # one count: one bundle


def test_a_local_run_samples_no_state_in_any_process_and_keeps_metrics():
    """Inside `local_run()` the driver and the worker processes it starts run bundles with untimed state
    samplers (no thread per bundle); a step still has its tracker, so metrics are counted. Outside it,
    and in a worker no local run started, Beam's sampler is untouched."""
    import os

    from apache_beam.metrics.metric import Metrics, MetricsFilter
    from apache_beam.runners.worker import statesampler

    beam_overhead.apply()
    assert statesampler.StateSampler.start is beam_overhead._SAMPLER_START  # LOCAL_RUN_ENV unset

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
        seen = (p | beam.Create(list(range(40)), reshuffle=False) | "Key" >> beam.Map(lambda x: (x % 20, x))
                | beam.GroupByKey() | beam.FlatMap(lambda kv: kv[1]) | "Check" >> beam.Map(untimed))
        flags = seen | beam.Map(lambda kv: kv[1][:2]) | beam.Distinct()
        assert_that(flags, equal_to([(True, True)]))
        result = p.run()
        result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("seen"))["counters"]
    assert sum(c.committed for c in counters) == 40
    assert statesampler.StateSampler.start is beam_overhead._SAMPLER_START
    assert beam_overhead.LOCAL_RUN_ENV not in os.environ
